// kernels::cuda RoPE against kernels::cpu on the same inputs: the table bit
// for bit (both are the CPU's double computation), forward and backward
// within the bound of two differently rounded rotations, over odd shapes
// (tokens 1 .. 129, head_dim 2 .. 128, 1 .. 5 heads); in place equal to out of
// place; position 0 the identity; InternalError on bad shapes and arguments.
#include "kernels/cuda/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::kU;
using testing::random_exact;

struct RopeCase {
  int64_t batch, seq, heads, head_dim;
  double theta;
};
// tokens = batch * seq: 1, 7, 74, 129; LLaMA's 10000 and LLaMA 3's 500000.
const RopeCase kCases[] = {{1, 1, 1, 2, 10000.0},
                           {1, 7, 3, 6, 500000.0},
                           {2, 37, 2, 128, 10000.0},
                           {3, 43, 5, 64, 10000.0}};

std::string label(const RopeCase& c) {
  return "batch " + std::to_string(c.batch) + ", seq " + std::to_string(c.seq) + ", heads " +
         std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim);
}

// HF's default inverse frequencies, theta^(-2i / head_dim), i < head_dim / 2.
std::vector<double> inverse_frequencies(int64_t head_dim, double theta) {
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(theta, (2.0 * i) / head_dim);
  return f;
}

struct Tables {
  Tensor cos, sin;          // host, from kernels::cpu
  Tensor cos_gpu, sin_gpu;  // from kernels::cuda
};
Tables tables(const RopeCase& c, Device gpu) {
  Tables t;
  const Shape shape = {c.seq, c.head_dim / 2};
  t.cos = Tensor::empty(shape);
  t.sin = Tensor::empty(shape);
  kernels::cpu::rope_table(c.seq, inverse_frequencies(c.head_dim, c.theta), t.cos, t.sin);
  t.cos_gpu = Tensor::empty(shape, gpu);
  t.sin_gpu = Tensor::empty(shape, gpu);
  kernels::cuda::rope_table(c.seq, inverse_frequencies(c.head_dim, c.theta), t.cos_gpu, t.sin_gpu);
  return t;
}

// Each output is x1 c -/+ x2 s: two products and one add, so each side is
// within gamma_2 (|x1 c| + |x2 s|) of the exact value for its fp32 table entry
// (the tables are bitwise equal; FMA contraction on either side only removes a
// rounding), and the two differ by at most twice that. The magnitude used is
// that of both outputs of the pair together, a slight overestimate.
void expect_rotations_agree(const Tensor& cuda_out, const Tensor& cpu_out, const Tensor& x,
                            const Tables& t, int64_t seq, int64_t head_dim,
                            const std::string& what) {
  const std::vector<float> got = cuda_out.to_vector(), want = cpu_out.to_vector();
  const int64_t tokens = x.size(0), width = x.size(1), half = head_dim / 2;
  const double gamma2 = 2 * kU / (1 - 2 * kU);
  int failures = 0;
  for (int64_t tok = 0; tok < tokens && failures < 5; ++tok) {
    const int64_t p = tok % seq;
    for (int64_t col = 0; col < width && failures < 5; ++col) {
      const int64_t i = col % head_dim % half;  // the pair index
      const int64_t first = col - col % head_dim + i;
      const double c = t.cos(p, i), s = t.sin(p, i);
      const double mag = std::fabs(x(tok, first) * c) + std::fabs(x(tok, first + half) * s) +
                         std::fabs(x(tok, first + half) * c) + std::fabs(x(tok, first) * s);
      const double bound = 2 * gamma2 * mag;
      const size_t at = static_cast<size_t>(tok * width + col);
      if (!(std::fabs(static_cast<double>(got[at]) - want[at]) <= bound)) {
        ADD_FAILURE() << what << " at (" << tok << ", " << col << "): cuda " << got[at] << ", cpu "
                      << want[at] << ", bound " << bound;
        ++failures;
      }
    }
  }
}

TEST(CudaRopeTest, TableIsBitwiseTheCpuTable) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const RopeCase& c : kCases) {
    const Tables t = tables(c, gpu);
    EXPECT_EQ(t.cos_gpu.to_vector(), t.cos.to_vector()) << label(c);
    EXPECT_EQ(t.sin_gpu.to_vector(), t.sin.to_vector()) << label(c);
  }
}

TEST(CudaRopeTest, ForwardAndBackwardMatchCpu) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(label(c));
    const Tables t = tables(c, gpu);
    const Shape shape = {c.batch * c.seq, c.heads * c.head_dim};
    const Tensor x = random_exact(shape, 1);
    Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape);
    kernels::cpu::rope_forward(x, t.cos, t.sin, y);
    kernels::cpu::rope_backward(x, t.cos, t.sin, dx);
    const Tensor x_gpu = x.to(gpu);
    Tensor y_gpu = Tensor::empty(shape, gpu), dx_gpu = Tensor::empty(shape, gpu);
    kernels::cuda::rope_forward(x_gpu, t.cos_gpu, t.sin_gpu, y_gpu);
    kernels::cuda::rope_backward(x_gpu, t.cos_gpu, t.sin_gpu, dx_gpu);
    expect_rotations_agree(y_gpu, y, x, t, c.seq, c.head_dim, "forward");
    expect_rotations_agree(dx_gpu, dx, x, t, c.seq, c.head_dim, "backward");

    // In place: each thread reads its pair before writing it, so y may be x.
    Tensor inplace = x.to(gpu);
    kernels::cuda::rope_forward(inplace, t.cos_gpu, t.sin_gpu, inplace);
    EXPECT_EQ(inplace.to_vector(), y_gpu.to_vector()) << "in-place forward";
    inplace = x.to(gpu);
    kernels::cuda::rope_backward(inplace, t.cos_gpu, t.sin_gpu, inplace);
    EXPECT_EQ(inplace.to_vector(), dx_gpu.to_vector()) << "in-place backward";
  }
}

// cos 0 = 1 and sin 0 = 0 exactly: the first token of every sequence is unchanged.
TEST(CudaRopeTest, PositionZeroIsTheIdentity) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const RopeCase c{3, 7, 3, 6, 10000.0};
  const Tables t = tables(c, gpu);
  const int64_t width = c.heads * c.head_dim;
  const Tensor x = random_exact({c.batch * c.seq, width}, 2);
  Tensor y_gpu = Tensor::empty(x.shape(), gpu);
  kernels::cuda::rope_forward(x.to(gpu), t.cos_gpu, t.sin_gpu, y_gpu);
  const Tensor y = y_gpu.to(Device::cpu());
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < width; ++j) {
      ASSERT_EQ(y(b * c.seq, j), x(b * c.seq, j)) << "sequence " << b << ", column " << j;
    }
  }
}

TEST(CudaRopeTest, BadShapesAndArgumentsThrow) {
  COLROW_REQUIRE_GPU();
  const Device gpu = testing::test_gpu();
  const RopeCase c{2, 4, 2, 8, 10000.0};
  const Tables t = tables(c, gpu);
  namespace cuda = kernels::cuda;
  const Tensor x = Tensor::zeros({8, 16}, gpu);
  Tensor y = Tensor::empty({8, 16}, gpu);
  EXPECT_NO_THROW(cuda::rope_forward(x, t.cos_gpu, t.sin_gpu, y));
  Tensor y_wrong = Tensor::empty({8, 8}, gpu);
  EXPECT_THROW(cuda::rope_forward(x, t.cos_gpu, t.sin_gpu, y_wrong), InternalError);
  // seq = 4 does not divide 6 tokens; 12 columns are not whole heads of 8.
  const Tensor x_tokens = Tensor::zeros({6, 16}, gpu), x_width = Tensor::zeros({8, 12}, gpu);
  Tensor y_tokens = Tensor::empty({6, 16}, gpu), y_width = Tensor::empty({8, 12}, gpu);
  EXPECT_THROW(cuda::rope_forward(x_tokens, t.cos_gpu, t.sin_gpu, y_tokens), InternalError);
  EXPECT_THROW(cuda::rope_backward(x_width, t.cos_gpu, t.sin_gpu, y_width), InternalError);
  // sin of another shape than cos.
  const Tensor sin_short = Tensor::zeros({4, 3}, gpu);
  EXPECT_THROW(cuda::rope_forward(x, t.cos_gpu, sin_short, y), InternalError);
  // A strided x (a column block) is refused.
  const Tensor wide = Tensor::zeros({8, 32}, gpu);
  EXPECT_THROW(cuda::rope_forward(wide.slice(1, 0, 16), t.cos_gpu, t.sin_gpu, y), InternalError);
  // Host tables are refused rather than read as device memory.
  EXPECT_THROW(cuda::rope_forward(x, t.cos, t.sin, y), InternalError);
  // The table's arguments: seq >= 1, finite positive frequencies, GPU outputs.
  Tensor cos = Tensor::empty({4, 4}, gpu), sin = Tensor::empty({4, 4}, gpu);
  EXPECT_THROW(cuda::rope_table(0, inverse_frequencies(8, 10000.0), cos, sin), InternalError);
  EXPECT_THROW(cuda::rope_table(4, {}, cos, sin), InternalError);
  EXPECT_THROW(cuda::rope_table(4, inverse_frequencies(8, 0.0), cos, sin), InternalError);
  Tensor host_cos = Tensor::empty({4, 4}), host_sin = Tensor::empty({4, 4});
  EXPECT_THROW(cuda::rope_table(4, inverse_frequencies(8, 10000.0), host_cos, host_sin),
               InternalError);
}

}  // namespace
}  // namespace colrow
