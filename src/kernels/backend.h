// Backend: the one kernel interface nn/ and train/ compute through (via
// kernels/ops.h). kernels/cpu (BLAS + OpenMP, the reference) and kernels/cuda
// (cuBLAS + CUDA) implement every operation under the same file names; a
// tensor's device picks the backend (ggml's backends, MLX's eval_cpu /
// eval_gpu). Every tensor argument lives on the backend's device; token ids
// and targets are host vectors (a few KiB per step) that a GPU backend uploads.
// Shapes, layouts and formulas of each operation are documented once, in the
// kernels/cpu header of the same name.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/cache_rows.h"
#include "colrow/core/tensor.h"
#include "kernels/gelu_form.h"
#include "kernels/trans.h"

namespace colrow::kernels {

// The vocabulary-parallel cross-entropy's view of one rank's logits
// (nn/vocab_parallel_cross_entropy.h): classes [vocab_start, vocab_start +
// real) are real on this rank, the rest of the local columns are padding.
struct CrossEntropyRows {
  const std::vector<int32_t>* targets = nullptr;  // replicated over tp
  // The logits' rows are targets' [first_row, first_row + tokens): all of
  // them by default (tokens < 0: to the end), or one chunk of a longer batch
  // (nn/gpt_model.h: the output head in token chunks), whose targets are then
  // uploaded to a GPU once for every chunk.
  int64_t first_row = 0;
  int64_t tokens = -1;
  int32_t ignore_index = -100;
  int64_t vocab_start = 0;  // global id of local column 0
  int64_t real = 0;         // real (non-padded) local columns, 0..vocab_size_local
  int64_t vocab_size = 0;   // real classes over all ranks
  float label_smoothing = 0.0f;
  // Local columns on every rank (padded vocabulary / tp): where the combine
  // of all ranks' partials finds each rank's real classes.
  int64_t vocab_size_local = 0;
};

// Per token and rank, what the forward pass over the logits hands the combine
// (kernels/cpu/cross_entropy.h): max, sum of exps, target logit, shifted sum.
constexpr int64_t kCrossEntropyPartials = 4;

// The sizes of one causal attention call (kernels/cpu/attention.h's legend).
struct AttentionSize {
  int64_t batch = 0, n_head = 0, seq = 0, head_dim = 0;
  DType dtype = DType::kF32;  // of q, k, v and out (the kernel may depend on it)
};

// Which causal attention kernel training uses (--attention): the fused one
// where the backend has it and it takes the head_dim, else the plain one
// that stores the probabilities (kAuto); always the plain one (kPlain, the
// reference); or the fused one, refused where it does not apply (kFused).
enum class AttentionKernel { kAuto, kFused, kPlain };

// How the fused bf16 kernels on tensor cores compute dQ in backward
// (--attention-backward; kernels/cuda/tensor_core_attention_kernels.cuh):
// in a kernel of its own over query tiles, which recomputes S and dP
// (kRecompute: seven products), or in the dK, dV kernel, each key tile's
// partial added into an fp32 sum in key-tile order (kOrdered: five products,
// a [B, NH, T, head_dim] fp32 scratch). Both give the same bits on every run.
enum class AttentionBackward { kRecompute, kOrdered };

// One parameter's part of an AdamW update: 1-d views of equal length.
struct AdamWSegment {
  Tensor param;
  Tensor grad;
  Tensor exp_avg;
  Tensor exp_avg_sq;
  bool decay = false;  // weight decay applies
  // Empty, or the parameter's bf16 compute copy (same length): written with
  // the updated param rounded once, in the same pass, as llm.c writes its bf16
  // weights beside the fp32 masters (no separate conversion per parameter).
  Tensor compute;
};

// The scalars of one AdamW step (torch.optim.AdamW, single-tensor form).
struct AdamWStep {
  float step_size = 0.0f;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 - beta2^t)
  float decay = 1.0f;                  // 1 - lr * weight_decay, on decayed segments
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float grad_scale = 1.0f;  // the clipping factor
};

// Where a decoding step's new tokens sit in a KV cache (core/cache_rows.h).
using ::colrow::CacheRows;

// Parameters of a TP-invariant random fill (nn/parameter.h, core/philox.h).
struct RandomFill {
  Shape full_shape;
  int dim = 0;                   // the sharded dim
  int64_t offset_along_dim = 0;  // where the shard starts along it
  bool normal = true;            // N(0, scale^2), else U(-scale, scale)
  float scale = 0.0f;
  uint64_t seed = 0;
  uint64_t stream = 0;  // name_stream(parameter name)
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Whether fp32 GEMMs may use TF32 tensor cores (off by default). The CPU
  // has none: asking for it there is a ConfigError.
  virtual void set_allow_tf32(bool allowed) = 0;
  // --deterministic: the same bits at any number of threads per rank (the
  // CPU's GEMMs in fixed blocks, kernels/cpu/gemm.h; every other CPU kernel
  // is so already). The GPU path makes no such promise yet: a ConfigError.
  virtual void set_deterministic(bool on) = 0;
  // ConfigError where this backend has no fused attention and kFused is asked.
  virtual void set_attention_kernel(AttentionKernel kernel) = 0;
  // ConfigError where this backend has no fused attention and kOrdered is asked.
  virtual void set_attention_backward(AttentionBackward backward) = 0;
  // GEMM epilogues (the bias, the bias gradient, GELU and its derivative)
  // fused where the device can (cuBLASLt), or the GEMM and the element-wise
  // kernels one after the other: the A/B behind a profile, and a way around a
  // library that misbehaves. The CPU always runs them one after the other.
  virtual void set_fused_epilogues(bool fused) = 0;
  // Peak dense FLOP/s of GEMMs with `dtype` operands on `device` (fp32: TF32
  // when allowed); 0 when unknown.
  virtual double peak_flops(Device device, DType dtype) = 0;

  // --- GEMM (kernels/cpu/gemm.h): c = alpha op(a) op(b) + beta c
  virtual void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b,
                    float beta, Tensor& c) = 0;

  // --- a linear layer's GEMM and bias in one operation (kernels/cpu/linear.h)
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) = 0;
  virtual void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b,
                                   Tensor& pre_activation, Tensor& y) = 0;
  virtual void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation,
                               Tensor& dx) = 0;

  // --- bias (kernels/cpu/bias.h)
  virtual void add_bias(Tensor& y, const Tensor& b) = 0;
  virtual void accumulate_bias_grad(const Tensor& dy, Tensor& db) = 0;

  // --- activations (kernels/cpu/activation.h)
  virtual void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void silu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) = 0;
  virtual void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh,
                               Tensor& dgate, Tensor& dup) = 0;

  // --- norms (kernels/cpu/norm.h), with their optional fused residual add
  virtual void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  float eps, Tensor& y, Tensor& mean, Tensor& rstd,
                                  const Tensor* residual, Tensor* sum) = 0;
  virtual void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                                   Tensor& dbeta, const Tensor* dresidual) = 0;
  virtual void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                Tensor& rstd, const Tensor* residual, Tensor* sum) = 0;
  virtual void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& dy, Tensor& dx, Tensor& dweight,
                                 const Tensor* dresidual) = 0;

  // --- residual (kernels/cpu/residual.h)
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void add_into(Tensor& out, const Tensor& a) = 0;

  // --- RoPE (kernels/cpu/rope.h); cos and sin are allocated by the caller
  virtual void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos,
                          Tensor& sin) = 0;
  virtual void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) = 0;
  virtual void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                             Tensor& dx) = 0;

  // --- causal attention (kernels/cpu/attention.h)
  // What attention_forward keeps for attention_backward ("saved"): the
  // probabilities [B, NH, T, T] on the CPU, or each row's log-sum-exp
  // [B, NH, T] where a fused kernel recomputes P (CUDA's
  // kernels/cuda/flash_attention.h, up to head_dim 128). The kernels tell the
  // two apart by rank.
  virtual Shape attention_saved_shape(Device device, const AttentionSize& size) = 0;
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                                 Tensor& saved, Tensor& out) = 0;
  // The scratch attention_backward needs for this problem size.
  virtual Shape attention_backward_scratch_shape(Device device, const AttentionSize& size) = 0;
  // out: forward's output; window: forward's (the fused kernels need both,
  // the probabilities neither).
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& saved, const Tensor& dout,
                                  int64_t window, Tensor& dq, Tensor& dk, Tensor& dv,
                                  Tensor& scratch) = 0;

  // --- KV cache for incremental decoding (kernels/cpu/kv_cache.h)
  virtual void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) = 0;
  virtual void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const CacheRows& rows, int64_t window, Tensor& scores,
                                Tensor& out) = 0;

  // --- embeddings (kernels/cpu/embedding.h)
  virtual void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                                 const Tensor& table_local, Tensor& y) = 0;
  virtual void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start,
                                  const Tensor& dy, Tensor& dtable_local) = 0;
  virtual void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) = 0;
  virtual void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) = 0;

  // --- a batch's ids and targets staged ahead of the kernels that read them:
  // a GPU uploads now what embedding_forward/backward (over table_local's
  // rows) and the cross-entropy pieces will read, so those find it in place
  // and upload nothing, which lets a CUDA graph of them be fed each batch
  // (train/step_graph.h). The CPU reads the host vectors as they come: nothing.
  virtual void stage_embedding_ids(const std::vector<int32_t>& ids, int64_t vocab_start,
                                   const Tensor& table_local) = 0;
  virtual void stage_cross_entropy_targets(Device device, const std::vector<int32_t>& targets) = 0;

  // --- vocabulary-parallel cross-entropy pieces (kernels/cpu/cross_entropy.h)
  virtual void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                                      Tensor& partials) = 0;
  virtual void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows,
                                     Tensor& max, Tensor& sum_exp, Tensor& losses) = 0;
  virtual void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                                      const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                                      float uniform_scale, Tensor& dlogits_local) = 0;

  // --- optimizer and reductions (kernels/cpu/adamw.h, kernels/cpu/reduce.h)
  virtual void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step) = 0;
  virtual double sum_of_squares(const std::vector<Tensor>& parts) = 0;
  virtual void divide(Tensor& x, float divisor) = 0;

  // --- initialization (kernels/cpu/init.h): local = the shard of the full
  // random tensor, drawn by full index, identical for any tp
  virtual void fill_random(Tensor& local, const RandomFill& fill) = 0;
};

// The backend of `device`: the CPU's, or the CUDA one (ConfigError in a build
// without CUDA).
Backend& backend_for(Device device);

// The CPU's backend (kernels/cpu/cpu_backend.cpp).
Backend& cpu_backend();
// Defined by kernels/cuda/cuda_backend.cpp, or kernels/no_cuda/cuda_backend.cpp
// in a CPU-only build.
Backend& cuda_backend(int device);

}  // namespace colrow::kernels
