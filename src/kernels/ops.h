// The operations nn/ and train/ compute with: each one checks that its
// tensors share one device, then runs on that device's backend
// (kernels/backend.h). Shapes and formulas: the kernels/cpu header of the same
// name (gemm.h, linear.h, bias.h, activation.h, norm.h, residual.h, rope.h,
// attention.h, kv_cache.h, embedding.h, cross_entropy.h, adamw.h, reduce.h,
// init.h); convert is Tensor::convert_from, timed as an op.
// dtypes: the activations of one call and the weights' compute copies are all
// fp32 or all bf16 (mixed ones are an InternalError); norm statistics,
// attention's saved probabilities, RoPE tables, the cross-entropy's per-row
// values, every parameter gradient, and the tensors of divide, fill_random
// and the optimizer are fp32. A bf16 output holds its fp32
// result rounded once (kernels/mixed_precision.h).
#pragma once

#include "kernels/backend.h"

namespace colrow::ops {

using kernels::AdamWSegment;
using kernels::AdamWStep;
using kernels::AttentionSize;
using kernels::CacheRows;
using kernels::CrossEntropyRows;
using kernels::GeluForm;
using kernels::RandomFill;
using kernels::Trans;

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c);
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);
void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y);
void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx);
void add_bias(Tensor& y, const Tensor& b);
void accumulate_bias_grad(const Tensor& dy, Tensor& db);
void gelu_forward(GeluForm form, const Tensor& x, Tensor& y);
void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx);
void silu_forward(const Tensor& x, Tensor& y);
void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup);
// The norms, each with its optional fused residual add (kernels/cpu/norm.h):
// forward's input x + residual, written to sum; backward's dx = dresidual +
// the norm's input gradient.
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual = nullptr,
                        Tensor* sum = nullptr);
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual = nullptr);
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual = nullptr, Tensor* sum = nullptr);
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual = nullptr);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_into(Tensor& out, const Tensor& a);
void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin);
void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx);
Shape attention_saved_shape(Device device, const AttentionSize& size);
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& saved, Tensor& out);
Shape attention_backward_scratch_shape(Device device, const AttentionSize& size);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& saved, const Tensor& dout, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& scratch);
void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache);
void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out);
void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y);
void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local);
void stage_embedding_ids(const std::vector<int32_t>& ids, int64_t vocab_start,
                         const Tensor& table_local);
void stage_cross_entropy_targets(Device device, const std::vector<int32_t>& targets);
void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq);
void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable);
void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials);
void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses);
void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local);
void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step);
double sum_of_squares(const std::vector<Tensor>& parts);
void divide(Tensor& x, float divisor);  // x /= divisor; nothing at all for 1
void convert(const Tensor& src, Tensor& dst);
void fill_random(Tensor& local, const RandomFill& fill);

}  // namespace colrow::ops
