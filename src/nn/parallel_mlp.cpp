// ParallelMLP: column -> activation -> row, one all-reduce each way (with
// sequence parallelism: an all-gather and a reduce-scatter each way).
#include "colrow/nn/parallel_mlp.h"

#include "colrow/core/error.h"
#include "colrow/nn/shared_buffer.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

LinearSpec projection(const MlpConfig& c, const std::string& suffix, int64_t in, int64_t out,
                      bool output = false) {
  LinearSpec spec;
  spec.name = c.name + "." + suffix;
  spec.in_features = in;
  spec.out_features = out;
  spec.bias = c.bias;
  spec.seed = c.seed;
  spec.weight_init = output && c.output_init ? c.output_init : c.weight_init;
  spec.bias_init = c.bias_init;
  return spec;
}

const MlpConfig& validated(const MlpConfig& config, int tp) {
  validate(config, tp);
  return config;
}

bool gated(const MlpConfig& c) {
  return c.activation == Activation::kSwiGlu;
}

ops::GeluForm gelu_form(const MlpConfig& c) {
  return c.activation == Activation::kGeluErf ? ops::GeluForm::kErf : ops::GeluForm::kTanh;
}

// GPT-2's tanh GELU goes with the projections around it: the up projection
// writes both its output and the activation, the down projection's input
// gradient comes out through the activation's derivative (cuBLASLt's GELU
// epilogues in bf16; the separate kernels elsewhere, the same bits there).
bool gelu_tanh(const MlpConfig& c) {
  return c.activation == Activation::kGelu;
}

}  // namespace

ParallelMLP::ParallelMLP(Communicator& tp, const MlpConfig& config)
    : config_(validated(config, tp.size())),
      input_(tp, config.sequence_parallel, config.overlap_backward),
      down_(tp,
            projection(config, gated(config) ? "down_proj" : "c_proj", config.ffn_hidden_size,
                       config.d_model),
            /*input_is_parallel=*/true, config.sequence_parallel) {
  if (gated(config)) {
    const OutputBlock mine{tp.rank(), tp.size()};
    gate_up_.emplace(
        tp, std::vector<ColumnPart>{
                {projection(config, "gate_proj", config.d_model, config.ffn_hidden_size), mine},
                {projection(config, "up_proj", config.d_model, config.ffn_hidden_size), mine}});
  } else {
    up_.emplace(tp, projection(config, "c_fc", config.d_model, config.ffn_hidden_size));
  }
}

Shape ParallelMLP::hidden_shape(const Tensor& up) const {
  return {up.size(0), gate_up_ ? gate_up_->part_columns(0) : up.size(1)};
}

const Tensor& ParallelMLP::forward(const Tensor& x_given) {
  // x: [tokens, d_model] -> hidden: [tokens, ffn/tp] -> y: [tokens, d_model]
  const Tensor& x = input_.forward(x_given);  // none, or an all-gather of the token blocks
  // With recomputation, backward makes the activation again with the GELU
  // kernel: forward uses the same kernel, so both hold the same bits.
  if (gelu_tanh(config_) && !recompute_activation_) {
    layer_buffer(hidden_, hidden_is_shared(), "mlp.hidden", {x.size(0), up_->out_features_local()},
                 up_->weight().value.device(), x.dtype());
    up_->forward_gelu(x, hidden_);  // no communication
    return down_.forward(hidden_);
  }
  // swiglu: gate and up in one GEMM, [tokens, 2 ffn/tp]; no communication
  const Tensor& up = gate_up_ ? gate_up_->forward(x) : up_->forward(x);
  layer_buffer(hidden_, hidden_is_shared(), "mlp.hidden", hidden_shape(up), up.device(),
               up.dtype());
  activate();
  return down_.forward(hidden_);  // one all-reduce (or reduce-scatter) over tp
}

void ParallelMLP::activate() {
  if (gate_up_) {
    const Tensor& gate_up = gate_up_->output();
    ops::swiglu_forward(gate_up_->part(gate_up, 0), gate_up_->part(gate_up, 1), hidden_);
  } else {
    ops::gelu_forward(gelu_form(config_), up_->output(), hidden_);
  }
}

const Tensor& ParallelMLP::backward(const Tensor& dy) {
  const Tensor& up = up_output();
  if (recompute_activation_) {
    // Its buffer served the layers after this one: the hidden units again, the same bits.
    layer_buffer(hidden_, hidden_is_shared(), "mlp.hidden", hidden_shape(up), up.device(),
                 up.dtype());
    activate();
  }
  if (gelu_tanh(config_)) {
    // dy -> d_up: [tokens, ffn/tp] through the GELU; none, or an all-gather of dy's token blocks
    const Tensor& d_up = down_.backward_through_gelu(dy, hidden_, up);
    Tensor& dx = input_.partial_grad();  // sequence parallel: starts gathering x again
    up_->backward_input(d_up, dx, /*accumulate=*/false);
    input_.reduce_partial_grad();  // while the weight gradients compute
    up_->backward_weights(d_up);
    return input_.grad();
  }
  // dy -> d_hidden: [tokens, ffn/tp]; none, or an all-gather of dy's token blocks
  const Tensor& d_hidden = down_.backward(dy, hidden_);
  // swiglu: the gradients of gate and up as column blocks of one, like the output
  layer_buffer(d_up_, shared_buffers_, gate_up_ ? "mlp.d_gate_up" : "mlp.d_up", up.shape(),
               d_hidden.device(), d_hidden.dtype());
  Tensor& dx = input_.partial_grad();  // sequence parallel: starts gathering x again
  if (gate_up_) {
    Tensor d_gate = gate_up_->part(d_up_, 0), d_up = gate_up_->part(d_up_, 1);
    ops::swiglu_backward(gate_up_->part(up, 0), gate_up_->part(up, 1), d_hidden, d_gate, d_up);
    // Both branches read the same x: one GEMM sums their partial dx.
    gate_up_->backward_input(d_up_, dx, /*accumulate=*/false);
  } else {
    // c_fc's output is still in up_'s buffer: GELU backward reads its input.
    ops::gelu_backward(gelu_form(config_), up, d_hidden, d_up_);
    up_->backward_input(d_up_, dx, /*accumulate=*/false);
  }
  // all-reduce (or reduce-scatter) dx over tp while the weight gradients compute
  input_.reduce_partial_grad();
  if (gate_up_) {
    gate_up_->backward_weights(d_up_);
  } else {
    up_->backward_weights(d_up_);
  }
  return input_.grad();
}

void ParallelMLP::share_buffers() {
  shared_buffers_ = true;
  input_.share_buffers();
  down_.share_buffers();
}

std::vector<Parameter*> ParallelMLP::parameters() {
  // swiglu: gate's and up's weights, then their biases (a group's parts together)
  std::vector<Parameter*> params;
  if (gate_up_) {
    params = gate_up_->parameters();
  } else {
    params.push_back(&up_->weight());
    if (up_->bias()) params.push_back(up_->bias());
  }
  params.push_back(&down_.weight());
  if (down_.bias()) params.push_back(down_.bias());
  return params;
}

double ParallelMLP::forward_flops(int64_t tokens) const {
  const int projections = gate_up_ ? 3 : 2;
  return projections * 2.0 * tokens * config_.d_model * config_.ffn_hidden_size;
}

}  // namespace colrow
