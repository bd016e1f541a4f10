// Device checks and dispatch for kernels/ops.h; every operation is timed
// under `--profile` (kernels/op_profile.h). The backends take fp32 and bf16
// operands alike (kernels/ops.h says which are which).
#include "kernels/ops.h"

#include "kernels/op_profile.h"
#include "kernels/op_trace.h"

namespace colrow::kernels {

Backend& backend_for(Device device) {
  return device.is_cpu() ? cpu_backend() : cuda_backend(device.index);
}

}  // namespace colrow::kernels

namespace colrow::ops {
namespace {

// The backend of one call, timed while the temporary lives: to the end of
// the full expression `on(...)->operation(...)`.
struct TimedBackend {
  kernels::OpScope scope;
  kernels::Backend& backend;
  kernels::Backend* operator->() { return &backend; }
};

// The bytes of the operands (each once; null pointers hold none).
double operand_bytes(std::initializer_list<const Tensor*> tensors) {
  double bytes = 0.0;
  for (const Tensor* t : tensors) {
    if (t != nullptr) bytes += static_cast<double>(t->numel()) * dtype_bytes(t->dtype());
  }
  return bytes;
}

// The backend of `device`, after checking every tensor lives there; `flops`:
// the call's products, for the profile's rates (kernels::OpWork).
TimedBackend on(const char* what, Device device, std::initializer_list<const Tensor*> tensors,
                double flops = 0.0) {
  require_device(what, device, tensors);
  kernels::trace_op(what, tensors);
  const kernels::OpWork work =
      kernels::op_profiling() ? kernels::OpWork{flops, operand_bytes(tensors)} : kernels::OpWork{};
  return {{what, device, work}, kernels::backend_for(device)};
}

// 2 m n k. Taken while profiling only: the shapes are checked by the kernels.
double gemm_flops(int64_t m, int64_t n, int64_t k) {
  if (!kernels::op_profiling()) return 0.0;
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// Causal attention's products over the visible triangle (the sliding window
// not taken off): per (sequence, head) T (T + 1) / 2 x head_dim multiply-adds
// per product; 2 products forward, 5 backward. `saved` is [batch, n_head,
// seq(, seq)] on every backend.
double attention_flops(const Tensor& q, const Tensor& saved, int products) {
  if (!kernels::op_profiling() || saved.ndim() < 3 || q.ndim() != 2) return 0.0;
  const double batch = static_cast<double>(saved.size(0)),
               heads = static_cast<double>(saved.size(1));
  const double seq = static_cast<double>(saved.size(2));
  const double head_dim = static_cast<double>(q.size(1)) / heads;
  return products * batch * heads * seq * (seq + 1.0) * head_dim;
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  const bool matrices = a.ndim() == 2 && c.ndim() == 2;
  const int64_t k = !matrices ? 0 : trans_a == Trans::kNo ? a.size(1) : a.size(0);
  on("gemm", c.device(), {&a, &b, &c}, matrices ? gemm_flops(c.size(0), c.size(1), k) : 0.0)
      ->gemm(trans_a, trans_b, alpha, a, b, beta, c);
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  on("linear_forward", y.device(), {&x, &w, &b, &y},
     x.ndim() == 2 && w.ndim() == 2 ? gemm_flops(x.size(0), w.size(0), w.size(1)) : 0.0)
      ->linear_forward(x, w, b, y);
}

void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  on("linear_weight_grads", dw.device(), {&dy, &x, &dw, &db},
     dw.ndim() == 2 && dy.ndim() == 2 ? gemm_flops(dw.size(0), dw.size(1), dy.size(0)) : 0.0)
      ->linear_weight_grads(dy, x, dw, db);
}

void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y) {
  on("linear_gelu_forward", y.device(), {&x, &w, b, &pre_activation, &y},
     x.ndim() == 2 && w.ndim() == 2 ? gemm_flops(x.size(0), w.size(0), w.size(1)) : 0.0)
      ->linear_gelu_forward(x, w, b, pre_activation, y);
}

void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx) {
  on("linear_gelu_input_grad", dx.device(), {&dy, &w, &pre_activation, &dx},
     dy.ndim() == 2 && w.ndim() == 2 ? gemm_flops(dy.size(0), w.size(1), w.size(0)) : 0.0)
      ->gelu_input_grad(dy, w, pre_activation, dx);
}

void add_bias(Tensor& y, const Tensor& b) {
  on("add_bias", b.device(), {&y, &b})->add_bias(y, b);
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  on("accumulate_bias_grad", db.device(), {&dy, &db})->accumulate_bias_grad(dy, db);
}

void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) {
  on("gelu_forward", y.device(), {&x, &y})->gelu_forward(form, x, y);
}

void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  on("gelu_backward", dx.device(), {&x, &dy, &dx})->gelu_backward(form, x, dy, dx);
}

void silu_forward(const Tensor& x, Tensor& y) {
  on("silu_forward", y.device(), {&x, &y})->silu_forward(x, y);
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  on("silu_backward", dx.device(), {&x, &dy, &dx})->silu_backward(x, dy, dx);
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  on("swiglu_forward", h.device(), {&gate, &up, &h})->swiglu_forward(gate, up, h);
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  on("swiglu_backward", dup.device(), {&gate, &up, &dh, &dgate, &dup})
      ->swiglu_backward(gate, up, dh, dgate, dup);
}

// The fused residual adds trace and time under names of their own.
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                        Tensor* sum) {
  on(residual != nullptr ? "add_layer_norm_forward" : "layer_norm_forward", rstd.device(),
     {&x, residual, &gamma, &beta, sum, &y, &mean, &rstd})
      ->layer_norm_forward(x, gamma, beta, eps, y, mean, rstd, residual, sum);
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual) {
  on(dresidual != nullptr ? "layer_norm_backward_add" : "layer_norm_backward", dbeta.device(),
     {&x, &gamma, &mean, &rstd, &dy, dresidual, &dx, &dgamma, &dbeta})
      ->layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, dresidual);
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual, Tensor* sum) {
  on(residual != nullptr ? "add_rms_norm_forward" : "rms_norm_forward", rstd.device(),
     {&x, residual, &weight, sum, &y, &rstd})
      ->rms_norm_forward(x, weight, eps, y, rstd, residual, sum);
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual) {
  on(dresidual != nullptr ? "rms_norm_backward_add" : "rms_norm_backward", dweight.device(),
     {&x, &weight, &rstd, &dy, dresidual, &dx, &dweight})
      ->rms_norm_backward(x, weight, rstd, dy, dx, dweight, dresidual);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  on("add", out.device(), {&a, &b, &out})->add(a, b, out);
}

void add_into(Tensor& out, const Tensor& a) {
  on("add_into", a.device(), {&out, &a})->add_into(out, a);
}

void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin) {
  on("rope_table", sin.device(), {&cos, &sin})->rope_table(seq, inv_freq, cos, sin);
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  on("rope_forward", y.device(), {&x, &cos, &sin, &y})->rope_forward(x, cos, sin, y);
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  on("rope_backward", dx.device(), {&dy, &cos, &sin, &dx})->rope_backward(dy, cos, sin, dx);
}

Shape attention_saved_shape(Device device, const AttentionSize& size) {
  return kernels::backend_for(device).attention_saved_shape(device, size);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& saved, Tensor& out) {
  on("attention_forward", out.device(), {&q, &k, &v, &saved, &out}, attention_flops(q, saved, 2))
      ->attention_forward(q, k, v, window, saved, out);
}

Shape attention_backward_scratch_shape(Device device, const AttentionSize& size) {
  return kernels::backend_for(device).attention_backward_scratch_shape(device, size);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& saved, const Tensor& dout, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& scratch) {
  on("attention_backward", scratch.device(),
     {&q, &k, &v, &out, &saved, &dout, &dq, &dk, &dv, &scratch}, attention_flops(q, saved, 5))
      ->attention_backward(q, k, v, out, saved, dout, window, dq, dk, dv, scratch);
}

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) {
  // A bf16 cache is read and written natively: widening it whole per call
  // would cost more than the fp32 cache it replaces.
  on("kv_cache_append", cache.device(), {&x, &cache})->kv_cache_append(x, rows, cache);
}

void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out) {
  on("cached_attention", out.device(), {&q, &k_cache, &v_cache, &scores, &out})
      ->cached_attention(q, k_cache, v_cache, rows, window, scores, out);
}

void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y) {
  on("embedding_forward", y.device(), {&table_local, &y})
      ->embedding_forward(ids, vocab_start, table_local, y);
}

void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local) {
  on("embedding_backward", dtable_local.device(), {&dy, &dtable_local})
      ->embedding_backward(ids, vocab_start, dy, dtable_local);
}

void stage_embedding_ids(const std::vector<int32_t>& ids, int64_t vocab_start,
                         const Tensor& table_local) {
  on("stage_embedding_ids", table_local.device(), {&table_local})
      ->stage_embedding_ids(ids, vocab_start, table_local);
}

void stage_cross_entropy_targets(Device device, const std::vector<int32_t>& targets) {
  on("stage_cross_entropy_targets", device, {})->stage_cross_entropy_targets(device, targets);
}

void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq) {
  on("position_embedding_forward", table.device(), {&x, &table})
      ->position_embedding_forward(x, table, seq);
}

void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable) {
  on("position_embedding_backward", dtable.device(), {&dx, &dtable})
      ->position_embedding_backward(dx, seq, dtable);
}

void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials) {
  on("cross_entropy_partials", partials.device(), {&logits_local, &partials})
      ->cross_entropy_partials(logits_local, rows, partials);
}

void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses) {
  on("cross_entropy_combine", losses.device(), {&gathered, &max, &sum_exp, &losses})
      ->cross_entropy_combine(gathered, rows, max, sum_exp, losses);
}

void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local) {
  on("cross_entropy_backward", dlogits_local.device(),
     {&logits_local, &max, &sum_exp, dloss, &dlogits_local})
      ->cross_entropy_backward(logits_local, rows, max, sum_exp, dloss, uniform_scale,
                               dlogits_local);
}

void divide(Tensor& x, float divisor) {
  if (divisor == 1.0f) return;  // x / 1 is x: no pass over x for nothing
  on("divide", x.device(), {&x})->divide(x, divisor);
}

void convert(const Tensor& src, Tensor& dst) {
  // The rounding is core's (Tensor::convert_from), the same on every device.
  const kernels::OpScope scope("convert", dst.device(), {0.0, operand_bytes({&src, &dst})});
  require_device("convert", dst.device(), {&src, &dst});
  dst.convert_from(src);
}

void fill_random(Tensor& local, const RandomFill& fill) {
  on("fill_random", local.device(), {&local})->fill_random(local, fill);
}

void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step) {
  if (segments.empty()) return;
  const Device device = segments.front().param.device();
  for (const AdamWSegment& s : segments) {
    require_device("adamw_update", device,
                   {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq, &s.compute});
  }
  double bytes = 0.0;
  for (const AdamWSegment& s : segments) {
    bytes += 4.0 * s.param.numel() * sizeof(float) +
             static_cast<double>(s.compute.numel()) * dtype_bytes(s.compute.dtype());
  }
  const kernels::OpScope scope("adamw_update", device, {0.0, bytes});
  kernels::backend_for(device).adamw_update(segments, step);
}

double sum_of_squares(const std::vector<Tensor>& parts) {
  if (parts.empty()) return 0.0;
  const Device device = parts.front().device();
  for (const Tensor& part : parts) require_device("sum_of_squares", device, {&part});
  double bytes = 0.0;
  for (const Tensor& part : parts)
    bytes += static_cast<double>(part.numel()) * dtype_bytes(part.dtype());
  const kernels::OpScope scope("sum_of_squares", device, {0.0, bytes});
  return kernels::backend_for(device).sum_of_squares(parts);
}

}  // namespace colrow::ops
