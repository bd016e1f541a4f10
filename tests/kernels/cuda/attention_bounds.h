// The inputs of the fused attention kernels' test (flash_attention_test.cpp,
// on a GPU and under the warp emulation) and their error bounds against the
// double reference (support/attention_reference.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"
#include "kernels/attention_case.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/attention_reference.h"

namespace colrow::testing {

// A case's operands on the host, uniform in [-1, 1).
struct AttentionInputs {
  Tensor q, k, v, dout;
};
inline AttentionInputs attention_inputs(const AttentionCase& c, uint32_t seed) {
  return {random_uniform({c.tokens(), c.q_width()}, seed, -1.0f, 1.0f),
          random_uniform({c.tokens(), c.kv_width()}, seed + 1, -1.0f, 1.0f),
          random_uniform({c.tokens(), c.kv_width()}, seed + 2, -1.0f, 1.0f),
          random_uniform({c.tokens(), c.q_width()}, seed + 3, -1.0f, 1.0f)};
}

// in with every value rounded to bf16: the exact inputs of the reference.
inline AttentionInputs bf16_values(const AttentionInputs& in) {
  auto round = [](const Tensor& t) { return t.to(DType::kBF16).to(DType::kF32); };
  return {round(in.q), round(in.k), round(in.v), round(in.dout)};
}

// Peaked rows: q times 8 (exact in bf16) puts most of each row's mass on a
// few keys, so a lost rescale of the running max or sum, or a key off by one
// at a tile or window edge, moves out by much more than the bound (with flat
// rows such errors are partly averaged away). Their bounds take q_max 8.
inline AttentionInputs with_peaked_rows(AttentionInputs in) {
  std::vector<float> q = in.q.to_vector();
  for (float& x : q) x *= 8.0f;
  in.q = Tensor::from_vector(in.q.shape(), q);
  return in;
}
constexpr double kPeakedQMax = 8.0;

// The fused kernels' tiles of 64.
inline int64_t key_tiles(const AttentionCase& c) {
  return (c.seq + 63) / 64;
}

// The reference's bound e covers any order of the plain softmax's sums. The
// fused kernels differ in two ways, each a relative error on every P:
//   - forward rescales a row's running sums once per key tile: one rounding
//     of alpha = expf(m_old - m_new) each (expf within 2 ulp, its argument a
//     difference rounded once: u |m_old - m_new| <= 2 u L), so at most
//     tiles x (3 + 2 L) u;
//   - backward's P = expf(s - lse) carries lse = m + logf(l)'s rounding,
//     u |m| + 2 u |log l| + u |lse| <= 4 u L, and expf's 2 ulp.
// L bounds |s| + log T, here q_max scale x head_dim (q in [-q_max, q_max),
// k in [-1, 1)) + log T.
// dQ, dK and dV are sums of magnitude m over P times values, so each is
// within 2 e (the reference's, as for the plain kernels) plus
// (tiles (3 + 2 L) + 4 L + 4) u m of the exact value: doubled for margin.
inline double fused_relative_error(const AttentionCase& c, double q_max = 1.0) {
  const double L = q_max * std::sqrt(static_cast<double>(c.head_dim)) +
                   std::log(static_cast<double>(c.seq)) + 1.0;
  return 2.0 * (key_tiles(c) * (3.0 + 2.0 * L) + 4.0 * L + 4.0) * kU;
}

inline void expect_close_to_reference(const std::string& what, const Tensor& got,
                                      const reference::BMatrix& ref, double relative) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), ref.size()) << what;
  int64_t violations = 0, worst = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = 2.0 * ref[i].e + (relative + 1e-12) * ref[i].m;
    if (!(std::fabs(static_cast<double>(g[i]) - ref[i].v) <= bound)) {
      ++violations;
      if (worst < 0) worst = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(violations, 0) << what << ": " << violations << " of " << g.size()
                           << " elements past their bound; first at " << worst << ": got "
                           << (worst >= 0 ? g[worst] : 0.0f) << ", exact "
                           << (worst >= 0 ? ref[worst].v : 0.0);
}

constexpr double kBf16U = 1.0 / 256;  // bf16's unit roundoff: 8 significant bits

// What bf16 adds to the fused kernels' fp32 bound, per output, in units of
// bf16's unit roundoff u_b times the reference magnitude m (every product
// and sum is still fp32's, so fused_relative_error's terms stay):
//   out = sum_j bf16(P_j) V_j / l: P rounded as P V's operand (u_b m), the
//     output rounded once (u_b |out| <= u_b m): 2.
//   dV = sum_i bf16(P_i)^T dO_i: the same, 2.
//   D = dO . O reads the bf16 output, within 2 u_b m(O) per element, so D is
//     within 2 u_b m(D) (m(D) = sum_e |dO_e| m(O_e) = sum_j P_j m(dP_j), the
//     reference's own magnitude of D); dS = P (dP - D) is then within
//     2 u_b m(dS) and is rounded to bf16 as its products' operand: 3;
//     dQ = scale dS K and dK = scale dS^T Q inherit that and round once: 4.
// Doubled, for the second-order terms and a margin. A wrong index or a lost
// tile is an O(1) error of m.
inline double bf16_relative_error(const AttentionCase& c, int roundings, double q_max = 1.0) {
  return fused_relative_error(c, q_max) + 2.0 * roundings * kBf16U;
}

// out, dq, dk and dv of bf16 kernels against `ref`, the reference of their
// (bf16-exact) inputs, each within its count of roundings.
inline void expect_bf16_close_to_reference(const AttentionCase& c, const reference::CoreResult& ref,
                                           const Tensor& out, const Tensor& dq, const Tensor& dk,
                                           const Tensor& dv, double q_max = 1.0) {
  expect_close_to_reference("out", out, ref.out, bf16_relative_error(c, 2, q_max));
  expect_close_to_reference("dq", dq, ref.dq, bf16_relative_error(c, 4, q_max));
  expect_close_to_reference("dk", dk, ref.dk, bf16_relative_error(c, 4, q_max));
  expect_close_to_reference("dv", dv, ref.dv, bf16_relative_error(c, 2, q_max));
}

}  // namespace colrow::testing
