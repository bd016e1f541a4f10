// The CUDA backend: every operation of kernels/backend.h forwarded to the
// kernels in kernels/cuda, which queue their work on the GPU's compute stream.
#include "kernels/backend.h"

#include "colrow/core/error.h"

#include "kernels/cuda/activation.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/bias.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/device_peak.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/init.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/residual.h"
#include "kernels/cuda/rope.h"
#include "kernels/elements.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels {
namespace {

class CudaBackend final : public Backend {
 public:
  void set_allow_tf32(bool allowed) override { ::colrow::cuda::set_allow_tf32(allowed); }
  // --deterministic is the CPU's thread-count invariance (fixed GEMM blocks).
  // On a GPU a run already repeats bit for bit (colrow's kernels use no float
  // atomics); the same bits across GPUs or cuBLAS versions are not promised.
  void set_deterministic(bool on) override {
    if (on) {
      throw ConfigError(
          "[device] --deterministic (the same bits at any thread count) is a cpu mode; on a GPU "
          "runs repeat bit for bit without it, and bits across GPUs or cuBLAS versions are not "
          "promised. Drop --deterministic, or use --device cpu.");
    }
  }
  void set_attention_kernel(AttentionKernel kernel) override { attention_kernel_ = kernel; }
  void set_attention_backward(AttentionBackward backward) override {
    attention_backward_ = backward;
  }
  void set_fused_epilogues(bool fused) override { cuda::set_fused_epilogues(fused); }
  double peak_flops(Device device, DType dtype) override {
    return ::colrow::cuda::peak_gemm_flops(device.index, dtype);
  }

  void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c) override {
    cuda::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    cuda::linear_forward(x, w, b, y);
  }
  void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) override {
    cuda::linear_weight_grads(dy, x, dw, db);
  }
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b,
                           Tensor& pre_activation, Tensor& y) override {
    cuda::linear_gelu_forward(x, w, b, pre_activation, y);
  }
  void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation,
                       Tensor& dx) override {
    cuda::gelu_input_grad(dy, w, pre_activation, dx);
  }
  void add_bias(Tensor& y, const Tensor& b) override { cuda::add_bias(y, b); }
  void accumulate_bias_grad(const Tensor& dy, Tensor& db) override {
    cuda::accumulate_bias_grad(dy, db);
  }
  void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) override {
    cuda::gelu_forward(form, x, y);
  }
  void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) override {
    cuda::gelu_backward(form, x, dy, dx);
  }
  void silu_forward(const Tensor& x, Tensor& y) override { cuda::silu_forward(x, y); }
  void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    cuda::silu_backward(x, dy, dx);
  }
  void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) override {
    cuda::swiglu_forward(gate, up, h);
  }
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                       Tensor& dup) override {
    cuda::swiglu_backward(gate, up, dh, dgate, dup);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                          Tensor* sum) override {
    cuda::layer_norm_forward(x, gamma, beta, eps, y, mean, rstd, residual, sum);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                           Tensor& dbeta, const Tensor* dresidual) override {
    cuda::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, dresidual);
  }
  void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                        const Tensor* residual, Tensor* sum) override {
    cuda::rms_norm_forward(x, weight, eps, y, rstd, residual, sum);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& dy, Tensor& dx, Tensor& dweight,
                         const Tensor* dresidual) override {
    cuda::rms_norm_backward(x, weight, rstd, dy, dx, dweight, dresidual);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { cuda::add(a, b, out); }
  void add_into(Tensor& out, const Tensor& a) override { cuda::add_into(out, a); }
  void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos,
                  Tensor& sin) override {
    cuda::rope_table(seq, inv_freq, cos, sin);
  }
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override {
    cuda::rope_forward(x, cos, sin, y);
  }
  void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) override {
    cuda::rope_backward(dy, cos, sin, dx);
  }
  // The fused kernels where they take the head_dim (they never store the
  // [B, NH, T, T] probabilities); the plain ones, their reference, otherwise.
  Shape attention_saved_shape(Device device, const AttentionSize& size) override {
    if (uses_fused_attention(device, size.head_dim)) return {size.batch, size.n_head, size.seq};
    return {size.batch, size.n_head, size.seq, size.seq};
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                         Tensor& saved, Tensor& out) override {
    if (saved.ndim() == 3) {
      cuda::flash_attention_forward(q, k, v, window, saved, out);
      return;
    }
    // The plain kernels are fp32: bf16 operands through widened copies.
    shared_dtype("attention_forward", {&q, &k, &v, &out});
    Fp32Operands f;
    cuda::attention_forward(f.in(q), f.in(k), f.in(v), window, saved, f.out(out));
    f.store();
  }
  Shape attention_backward_scratch_shape(Device device, const AttentionSize& size) override {
    if (uses_fused_attention(device, size.head_dim)) {
      return cuda::flash_attention_backward_scratch_shape(size, device.index, attention_backward_);
    }
    return cuda::attention_backward_scratch_shape(size.batch, size.n_head, size.seq);
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& saved, const Tensor& dout, int64_t window, Tensor& dq,
                          Tensor& dk, Tensor& dv, Tensor& scratch) override {
    if (saved.ndim() == 3) {
      cuda::flash_attention_backward(q, k, v, out, saved, dout, window, dq, dk, dv, scratch,
                                     attention_backward_);
      return;
    }
    shared_dtype("attention_backward", {&q, &k, &v, &dout, &dq, &dk, &dv});
    Fp32Operands f;
    cuda::attention_backward(f.in(q), f.in(k), f.in(v), saved, f.in(dout), f.out(dq), f.out(dk),
                             f.out(dv), scratch);
    f.store();
  }
  void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) override {
    cuda::kv_cache_append(x, rows, cache);
  }
  void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const CacheRows& rows, int64_t window, Tensor& scores,
                        Tensor& out) override {
    cuda::cached_attention(q, k_cache, v_cache, rows, window, scores, out);
  }
  void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                         const Tensor& table_local, Tensor& y) override {
    cuda::embedding_forward(ids, vocab_start, table_local, y);
  }
  void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                          Tensor& dtable_local) override {
    cuda::embedding_backward(ids, vocab_start, dy, dtable_local);
  }
  void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) override {
    cuda::position_embedding_forward(x, table, seq);
  }
  void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) override {
    cuda::position_embedding_backward(dx, seq, dtable);
  }
  void stage_embedding_ids(const std::vector<int32_t>& ids, int64_t vocab_start,
                           const Tensor& table_local) override {
    cuda::stage_embedding_ids(table_local.device().index, ids, vocab_start, table_local.size(0));
  }
  void stage_cross_entropy_targets(Device device, const std::vector<int32_t>& targets) override {
    cuda::stage_cross_entropy_targets(device.index, targets);
  }
  void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                              Tensor& partials) override {
    cuda::cross_entropy_partials(logits_local, rows, partials);
  }
  void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                             Tensor& sum_exp, Tensor& losses) override {
    cuda::cross_entropy_combine(gathered, rows, max, sum_exp, losses);
  }
  void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                              const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                              float uniform_scale, Tensor& dlogits_local) override {
    cuda::cross_entropy_backward(logits_local, rows, max, sum_exp, dloss, uniform_scale,
                                 dlogits_local);
  }
  void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step) override {
    cuda::adamw_update(segments, step);
  }
  double sum_of_squares(const std::vector<Tensor>& parts) override {
    return cuda::sum_of_squares(parts);
  }
  void divide(Tensor& x, float divisor) override { cuda::divide(x, divisor); }
  void fill_random(Tensor& local, const RandomFill& fill) override {
    cuda::fill_random(local, fill);
  }

 private:
  bool uses_fused_attention(Device device, int64_t head_dim) const {
    if (attention_kernel_ == AttentionKernel::kPlain) return false;
    const bool fits = cuda::flash_attention_supports(head_dim, device.index);
    if (!fits && attention_kernel_ == AttentionKernel::kFused) {
      throw ConfigError("[attention] attention (fused) does not take head_dim " +
                        std::to_string(head_dim) +
                        ": the fused kernels go up to 128 within the GPU's shared memory. Use "
                        "--attention auto (the plain kernels there) or plain.");
    }
    return fits;
  }

  AttentionKernel attention_kernel_ = AttentionKernel::kAuto;
  AttentionBackward attention_backward_ = AttentionBackward::kRecompute;
};

}  // namespace

Backend& cuda_backend(int /*device*/) {
  // One object serves every GPU: each kernel reads its device from its tensors.
  static CudaBackend backend;
  return backend;
}

}  // namespace colrow::kernels
