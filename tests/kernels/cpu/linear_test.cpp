// kernels::cpu::linear_forward and linear_weight_grads: on small integers
// (every product and partial sum exact in fp32, whatever the order) they equal
// the integer reference exactly, so a wrong transpose, a missing bias or a
// gradient that overwrites instead of accumulating shows as a wrong value;
// strided column blocks; InternalError on mismatched shapes. bf16 (mixed
// precision): forward rounds the exact x w^T + b once (the bias added before
// the rounding, as cuBLASLt's epilogue does), the weight gradients of bf16 dy
// and x accumulate exactly into fp32 dw and db; dtype rules.
#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/gemm.h"

namespace colrow {
namespace {

// Integers in [-3, 3], deterministic per seed and element.
Tensor small_integers(const Shape& shape, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  uint32_t s = seed * 2654435761u + 12345u;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int>((s >> 16) % 7) - 3);
  }
  return Tensor::from_vector(shape, v);
}

using kernels::Trans;

// Same dtype, shape and bytes (contiguous tensors).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.bytes())) == 0;
}

struct Dims {
  int64_t tokens, in, out;
};
const Dims kDims[] = {{1, 1, 1}, {5, 7, 3}, {33, 65, 129}};

TEST(CpuLinearTest, ForwardIsTheExactAffineMap) {
  for (const Dims& d : kDims) {
    const Tensor x = small_integers({d.tokens, d.in}, 1), w = small_integers({d.out, d.in}, 2);
    const Tensor b = small_integers({d.out}, 3);
    Tensor y = Tensor::full({d.tokens, d.out}, 99.0f);
    kernels::cpu::linear_forward(x, w, b, y);
    for (int64_t t = 0; t < d.tokens; ++t) {
      for (int64_t o = 0; o < d.out; ++o) {
        double want = b.data()[o];
        for (int64_t i = 0; i < d.in; ++i) want += double{x(t, i)} * w(o, i);
        ASSERT_EQ(y(t, o), want) << "token " << t << ", output " << o;
      }
    }
  }
}

// fp32 operands, and bf16 ones (small integers are bf16-exact): both
// accumulate exactly into the fp32 gradients.
TEST(CpuLinearTest, WeightGradsAccumulate) {
  for (DType operands : {DType::kF32, DType::kBF16}) {
    for (const Dims& d : kDims) {
      const Tensor dy = small_integers({d.tokens, d.out}, 4),
                   x = small_integers({d.tokens, d.in}, 5);
      const Tensor dw0 = small_integers({d.out, d.in}, 6), db0 = small_integers({d.out}, 7);
      Tensor dw = dw0.clone(), db = db0.clone();
      kernels::cpu::linear_weight_grads(dy.to(operands), x.to(operands), dw, db);
      for (int64_t o = 0; o < d.out; ++o) {
        double want_b = db0.data()[o];
        for (int64_t t = 0; t < d.tokens; ++t) want_b += dy(t, o);
        ASSERT_EQ(db.data()[o], want_b) << dtype_name(operands) << ", output " << o;
        for (int64_t i = 0; i < d.in; ++i) {
          double want = dw0(o, i);
          for (int64_t t = 0; t < d.tokens; ++t) want += double{dy(t, o)} * x(t, i);
          ASSERT_EQ(dw(o, i), want) << dtype_name(operands) << ", output " << o << ", input " << i;
        }
      }
    }
  }
}

// x and y as column blocks of wider buffers: their neighbours stay.
TEST(CpuLinearTest, ColumnBlocks) {
  const Dims d{9, 6, 4};
  const Tensor wide_x = small_integers({d.tokens, d.in + 2}, 8);
  const Tensor w = small_integers({d.out, d.in}, 9), b = small_integers({d.out}, 10);
  Tensor wide_y = Tensor::full({d.tokens, d.out + 3}, 99.0f);
  Tensor y = wide_y.slice(1, 1, d.out);
  kernels::cpu::linear_forward(wide_x.slice(1, 2, d.in), w, b, y);
  for (int64_t t = 0; t < d.tokens; ++t) {
    EXPECT_EQ(wide_y(t, 0), 99.0f);
    EXPECT_EQ(wide_y(t, d.out + 1), 99.0f);
    for (int64_t o = 0; o < d.out; ++o) {
      double want = b.data()[o];
      for (int64_t i = 0; i < d.in; ++i) want += double{wide_x(t, i + 2)} * w(o, i);
      ASSERT_EQ(y(t, o), want);
    }
  }
}

TEST(CpuLinearTest, ShapeErrorsAreInternalErrors) {
  const Tensor x = Tensor::zeros({4, 6}), w = Tensor::zeros({5, 6});
  Tensor y = Tensor::empty({4, 5}), short_b = Tensor::zeros({4}), wide_y = Tensor::empty({4, 6});
  const Tensor b = Tensor::zeros({5});
  EXPECT_THROW(kernels::cpu::linear_forward(x, w, short_b, y), InternalError);
  EXPECT_THROW(kernels::cpu::linear_forward(x, w, b, wide_y), InternalError);
  Tensor dw = Tensor::zeros({5, 6});
  EXPECT_THROW(kernels::cpu::linear_weight_grads(y, x, dw, short_b), InternalError);
}

TEST(CpuLinearTest, Bf16ForwardRoundsTheExactAffineMapOnce) {
  for (const Dims& d : kDims) {
    const Tensor x = small_integers({d.tokens, d.in}, 11), w = small_integers({d.out, d.in}, 12);
    // A bias of 0.25 + integer: with the sum it often needs more than bf16's
    // 8 bits, so the rounding shows where it happens.
    Tensor b = small_integers({d.out}, 13);
    for (int64_t o = 0; o < d.out; ++o) b.data()[o] += 0.25f;
    Tensor y = Tensor::full({d.tokens, d.out}, 99.0f, Device::cpu(), DType::kBF16);
    kernels::cpu::linear_forward(x.to(DType::kBF16), w.to(DType::kBF16), b.to(DType::kBF16), y);
    for (int64_t t = 0; t < d.tokens; ++t) {
      for (int64_t o = 0; o < d.out; ++o) {
        double want = b.data()[o];
        for (int64_t i = 0; i < d.in; ++i) want += double{x(t, i)} * w(o, i);
        ASSERT_EQ(y.bf16_data()[t * d.out + o], float_to_bf16(static_cast<float>(want)))
            << "token " << t << ", output " << o;
      }
    }
  }
}

// The GELU pair is its pieces run one after the other, bit for bit, in fp32
// and bf16, with and without a bias: the layer (or the bare GEMM), then the
// tanh GELU (cuBLASLt's form; kernels/cpu/activation_test.cpp checks the
// GELU's accuracy, and an erf GELU here would differ by 1.5e-4 at x = 1).
TEST(CpuLinearTest, GeluPairIsTheLayerThenTheTanhGelu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool with_bias : {true, false}) {
      for (const Dims& d : kDims) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (with_bias ? ", bias" : ", no bias") +
                     ", tokens " + std::to_string(d.tokens));
        // Quarters: pre-activations around GELU's bend, not only its linear tails.
        const Tensor x = small_integers({d.tokens, d.in}, 21).to(dtype);
        Tensor w = small_integers({d.out, d.in}, 22);
        for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] *= 0.25f;
        const Tensor w_d = w.to(dtype), b = small_integers({d.out}, 23).to(dtype);
        Tensor pre = Tensor::full({d.tokens, d.out}, 99.0f).to(dtype), y = pre.clone();
        kernels::cpu::linear_gelu_forward(x, w_d, with_bias ? &b : nullptr, pre, y);
        Tensor pre_alone = pre.clone(), y_alone = pre.clone();
        if (with_bias) {
          kernels::cpu::linear_forward(x, w_d, b, pre_alone);
        } else {
          kernels::cpu::gemm(Trans::kNo, Trans::kYes, 1.0f, x, w_d, 0.0f, pre_alone);
        }
        kernels::cpu::gelu_forward(kernels::GeluForm::kTanh, pre_alone, y_alone);
        EXPECT_TRUE(same_bytes(pre, pre_alone)) << "pre-activation";
        EXPECT_TRUE(same_bytes(y, y_alone)) << "activation";
      }
    }
  }
}

// dx = gelu_tanh'(pre) * (dy w), computed in place over the product: the same
// bits as the product and the GELU backward into separate buffers.
TEST(CpuLinearTest, GeluInputGradIsTheProductThroughTheTanhGeluDerivative) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& d : kDims) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", tokens " + std::to_string(d.tokens));
      const Tensor dy = small_integers({d.tokens, d.out}, 24).to(dtype);
      const Tensor w = small_integers({d.out, d.in}, 25).to(dtype);
      Tensor pre = small_integers({d.tokens, d.in}, 26);
      for (int64_t i = 0; i < pre.numel(); ++i) pre.data()[i] *= 0.5f;  // in [-1.5, 1.5]
      const Tensor pre_d = pre.to(dtype);
      Tensor dx = Tensor::full({d.tokens, d.in}, 99.0f).to(dtype);
      kernels::cpu::gelu_input_grad(dy, w, pre_d, dx);
      Tensor product = dx.clone(), dx_alone = dx.clone();
      kernels::cpu::gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, product);
      kernels::cpu::gelu_backward(kernels::GeluForm::kTanh, pre_d, product, dx_alone);
      EXPECT_TRUE(same_bytes(dx, dx_alone));
    }
  }
}

TEST(CpuLinearTest, DtypeRules) {
  const Tensor x = Tensor::zeros({4, 6}).to(DType::kBF16),
               w = Tensor::zeros({5, 6}).to(DType::kBF16);
  const Tensor b = Tensor::zeros({5});  // fp32 bias with bf16 operands
  Tensor y = Tensor::empty({4, 5}, Device::cpu(), DType::kBF16), y32 = Tensor::empty({4, 5});
  EXPECT_THROW(kernels::cpu::linear_forward(x, w, b, y), InternalError);
  EXPECT_THROW(kernels::cpu::linear_forward(x, w, b.to(DType::kBF16), y32), InternalError);
  Tensor dw = Tensor::zeros({5, 6}), db = Tensor::zeros({5});
  Tensor dw_half = dw.to(DType::kBF16), db_half = db.to(DType::kBF16);
  EXPECT_THROW(kernels::cpu::linear_weight_grads(y, x, dw_half, db), InternalError);
  EXPECT_THROW(kernels::cpu::linear_weight_grads(y, x, dw, db_half), InternalError);
  EXPECT_NO_THROW(kernels::cpu::linear_weight_grads(y, x, dw, db));
}

}  // namespace
}  // namespace colrow
