// The CPU backend: every operation of kernels/backend.h forwarded to the
// reference kernels in kernels/cpu (OpenBLAS + OpenMP).
#include "kernels/backend.h"

#include "colrow/core/error.h"

#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/kv_cache.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rope.h"
#include "kernels/elements.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels {
namespace {

class CpuBackend final : public Backend {
 public:
  void set_allow_tf32(bool allowed) override {
    if (allowed) {
      throw ConfigError(
          "[device] tf32 applies to fp32 GEMMs on a GPU; the cpu has no TF32. "
          "Drop --tf32, or use --device cuda.");
    }
  }
  void set_deterministic(bool on) override { cpu::set_thread_invariant_gemm(on); }
  void set_fused_epilogues(bool) override {}  // nothing to fuse: see backend.h
  void set_attention_kernel(AttentionKernel kernel) override {
    if (kernel == AttentionKernel::kFused) {
      throw ConfigError(
          "[attention] attention (fused) has no CPU kernel: the CPU keeps the probabilities. "
          "Use --attention auto or plain, or --device cuda.");
    }
  }
  void set_attention_backward(AttentionBackward backward) override {
    if (backward == AttentionBackward::kOrdered) {
      throw ConfigError(
          "[attention] attention-backward (ordered) is a backward of the GPU's fused bf16 "
          "kernels; the CPU keeps the probabilities. Use --attention-backward recompute, or "
          "--device cuda.");
    }
  }
  // Unknown: OpenBLAS's rate depends on the cores, their vector units and
  // clocks, which colrow does not model; bench mlp measures it instead.
  double peak_flops(Device, DType) override { return 0.0; }

  void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c) override {
    cpu::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    cpu::linear_forward(x, w, b, y);
  }
  void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) override {
    cpu::linear_weight_grads(dy, x, dw, db);
  }
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b,
                           Tensor& pre_activation, Tensor& y) override {
    cpu::linear_gelu_forward(x, w, b, pre_activation, y);
  }
  void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation,
                       Tensor& dx) override {
    cpu::gelu_input_grad(dy, w, pre_activation, dx);
  }
  void add_bias(Tensor& y, const Tensor& b) override { cpu::add_bias(y, b); }
  void accumulate_bias_grad(const Tensor& dy, Tensor& db) override {
    cpu::accumulate_bias_grad(dy, db);
  }
  void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) override {
    cpu::gelu_forward(form, x, y);
  }
  void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) override {
    cpu::gelu_backward(form, x, dy, dx);
  }
  void silu_forward(const Tensor& x, Tensor& y) override { cpu::silu_forward(x, y); }
  void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    cpu::silu_backward(x, dy, dx);
  }
  void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) override {
    cpu::swiglu_forward(gate, up, h);
  }
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                       Tensor& dup) override {
    cpu::swiglu_backward(gate, up, dh, dgate, dup);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                          Tensor* sum) override {
    cpu::layer_norm_forward(x, gamma, beta, eps, y, mean, rstd, residual, sum);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                           Tensor& dbeta, const Tensor* dresidual) override {
    cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, dresidual);
  }
  void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                        const Tensor* residual, Tensor* sum) override {
    cpu::rms_norm_forward(x, weight, eps, y, rstd, residual, sum);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& dy, Tensor& dx, Tensor& dweight,
                         const Tensor* dresidual) override {
    cpu::rms_norm_backward(x, weight, rstd, dy, dx, dweight, dresidual);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { cpu::add(a, b, out); }
  void add_into(Tensor& out, const Tensor& a) override { cpu::add_into(out, a); }
  void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos,
                  Tensor& sin) override {
    cpu::rope_table(seq, inv_freq, cos, sin);
  }
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override {
    cpu::rope_forward(x, cos, sin, y);
  }
  void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) override {
    cpu::rope_backward(dy, cos, sin, dx);
  }
  // The probabilities: with few threads per rank they cost memory, not time.
  Shape attention_saved_shape(Device, const AttentionSize& size) override {
    return {size.batch, size.n_head, size.seq, size.seq};
  }
  // The attention kernels are fp32 (OpenBLAS has no bf16 GEMM): bf16
  // operands go through widened copies, each output rounded once.
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                         Tensor& probs, Tensor& out) override {
    shared_dtype("attention_forward", {&q, &k, &v, &out});
    Fp32Operands f;
    cpu::attention_forward(f.in(q), f.in(k), f.in(v), window, probs, f.out(out));
    f.store();
  }
  Shape attention_backward_scratch_shape(Device, const AttentionSize& size) override {
    return cpu::attention_backward_scratch_shape(size.seq);
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& /*out*/,
                          const Tensor& probs, const Tensor& dout, int64_t /*window*/, Tensor& dq,
                          Tensor& dk, Tensor& dv, Tensor& scratch) override {
    shared_dtype("attention_backward", {&q, &k, &v, &dout, &dq, &dk, &dv});
    Fp32Operands f;
    cpu::attention_backward(f.in(q), f.in(k), f.in(v), probs, f.in(dout), f.out(dq), f.out(dk),
                            f.out(dv), scratch);
    f.store();
  }
  void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) override {
    cpu::kv_cache_append(x, rows, cache);
  }
  void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const CacheRows& rows, int64_t window, Tensor& scores,
                        Tensor& out) override {
    cpu::cached_attention(q, k_cache, v_cache, rows, window, scores, out);
  }
  void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                         const Tensor& table_local, Tensor& y) override {
    cpu::embedding_forward(ids, vocab_start, table_local, y);
  }
  void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                          Tensor& dtable_local) override {
    cpu::embedding_backward(ids, vocab_start, dy, dtable_local);
  }
  void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) override {
    cpu::position_embedding_forward(x, table, seq);
  }
  void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) override {
    cpu::position_embedding_backward(dx, seq, dtable);
  }
  void stage_embedding_ids(const std::vector<int32_t>&, int64_t, const Tensor&) override {}
  void stage_cross_entropy_targets(Device, const std::vector<int32_t>&) override {}
  void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                              Tensor& partials) override {
    cpu::cross_entropy_partials(logits_local, rows, partials);
  }
  void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                             Tensor& sum_exp, Tensor& losses) override {
    cpu::cross_entropy_combine(gathered, rows, max, sum_exp, losses);
  }
  void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                              const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                              float uniform_scale, Tensor& dlogits_local) override {
    cpu::cross_entropy_backward(logits_local, rows, max, sum_exp, dloss, uniform_scale,
                                dlogits_local);
  }
  void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step) override {
    cpu::adamw_update(segments, step);
  }
  double sum_of_squares(const std::vector<Tensor>& parts) override {
    return cpu::sum_of_squares(parts);
  }
  void divide(Tensor& x, float divisor) override { cpu::divide(x, divisor); }
  void fill_random(Tensor& local, const RandomFill& fill) override {
    cpu::fill_random(local, fill);
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace colrow::kernels
