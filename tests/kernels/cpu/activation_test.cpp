// GELU (tanh form), SiLU and SwiGLU kernels against the same formulas in double:
// forward values, and backward against both the analytic double derivative and
// central finite differences of the double formula. Shapes up to 2^15 elements
// (the serial path) and past it (the OpenMP + simd path); inputs over [-8, 8]
// plus saturating values out to +-1000; inputs past expf's overflow
// (x < -88.72); SwiGLU on column blocks of a fused gate_up tensor (rows
// longer than one element block, fp32 and bf16); shape and contiguity errors.
#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "kernels/cpu/parallel.h"
#include "nn/layer_test_helpers.h"
#include "support/activation_error_model.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;

using namespace activation_error_model;

// Central differences of the double formula with h = 1e-5: truncation
// h^2/6 max|f'''| <= 1.7e-11 * 0.78 (GELU; 0.31 for SiLU), rounding about
// 10 eps |f| / h = 1.1e-10 |f| with eps = 2^-53. fd_bound() is at least 9x
// above both.
constexpr double kFdStep = 1e-5;
double central_difference(const std::function<double(double)>& f, double x) {
  return (f(x + kFdStep) - f(x - kFdStep)) / (2 * kFdStep);
}
double fd_bound(double f_value) {
  return 1e-9 * (1.0 + std::fabs(f_value));
}

// Deterministic inputs: [-8, 8] evenly, then values where tanh and the sigmoid
// saturate written over scattered entries of large tensors (down to -88, where
// expf(-x) is still finite; past that see SaturatedInputsGiveZeroNotNaN).
Tensor spread_inputs(const Shape& shape, const std::vector<float>& extremes = {
                                             0.0f, 1e-20f, -1e-20f, 12.0f, -12.0f, 20.0f, -20.0f,
                                             50.0f, -50.0f, 88.0f, -88.0f, 100.0f, 1000.0f}) {
  Tensor t = Tensor::empty(shape);
  const int64_t n = t.numel();
  float* p = t.data();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = n == 1 ? -3.3f : static_cast<float>(-8.0 + 16.0 * i / (n - 1));
  }
  const int64_t count = static_cast<int64_t>(extremes.size());
  if (n >= 1000) {
    for (int64_t i = 0; i < count; ++i) p[i * 37] = extremes[i];
  }
  return t;
}

// Uniform in [-1, 1): upstream gradients and the SwiGLU up-projection.
Tensor uniform(const Shape& shape, const std::string& name) {
  Tensor t = Tensor::empty(shape);
  const uint64_t stream = name_stream(name);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0f * uniform01(99, stream, i) - 1.0f;
  return t;
}

Tensor nans(const Shape& shape) {
  return Tensor::full(shape, std::numeric_limits<float>::quiet_NaN());
}

// Checks |got[i] - want(i)| <= bound(i) for every i, reporting the first few misses.
void expect_close(const Tensor& got, const std::function<double(int64_t)>& want,
                  const std::function<double(int64_t)>& bound, const Tensor& x,
                  const std::string& what) {
  int failures = 0;
  const float* g = got.data();
  for (int64_t i = 0; i < got.numel() && failures < 5; ++i) {
    const double err = std::fabs(g[i] - want(i));
    if (!(err <= bound(i))) {  // also fails on NaN
      ADD_FAILURE() << what << " at " << i << " (x = " << x.data()[i] << "): got " << g[i]
                    << ", want " << want(i) << ", |err| " << err << " > " << bound(i);
      ++failures;
    }
  }
}

// Up to 2^15 elements the kernels take their serial path (tiny shapes, and 400
// elements); 97 x 413 = 40061 > 2^15 takes the OpenMP + simd path.
const Shape kShapes[] = {{1, 1}, {1, 7}, {3, 5}, {4, 100}, {97, 413}};

TEST(ActivationTest, ReferenceDerivativesMatchFiniteDifferences) {
  // Guards the test's own formulas: the analytic double derivatives used below
  // are checked against central differences of the double functions.
  for (int i = -1000; i <= 1000; ++i) {
    const double x = i * 0.01 + (i % 7) * 1e-4;  // [-10, 10], off the grid
    EXPECT_NEAR(gelu_grad(x), central_difference(gelu, x), fd_bound(gelu(x))) << x;
    EXPECT_NEAR(silu_grad(x), central_difference(silu, x), fd_bound(silu(x))) << x;
  }
}

TEST(ActivationTest, GeluForward) {
  for (const Shape& shape : kShapes) {
    const Tensor x = spread_inputs(shape);
    Tensor y = nans(shape);
    cpu::gelu_forward(kernels::GeluForm::kTanh, x, y);
    const float* in = x.data();
    expect_close(
        y, [&](int64_t i) { return gelu(in[i]); },
        [&](int64_t i) { return kMargin * gelu_bound(in[i]); }, x,
        "gelu " + shape_to_string(shape));
  }
}

TEST(ActivationTest, GeluBackward) {
  for (const Shape& shape : kShapes) {
    const Tensor x = spread_inputs(shape);
    const Tensor dy = uniform(shape, "dy");
    Tensor dx = nans(shape);  // backward overwrites
    cpu::gelu_backward(kernels::GeluForm::kTanh, x, dy, dx);
    const float* in = x.data();
    const float* g = dy.data();
    // dx = dy * gelu': the local bound scaled by |dy|, and one more rounding.
    auto bound = [&](int64_t i) {
      return kMargin *
             (std::fabs(g[i]) * gelu_grad_bound(in[i]) + kU * std::fabs(g[i] * gelu_grad(in[i])));
    };
    expect_close(
        dx, [&](int64_t i) { return g[i] * gelu_grad(in[i]); }, bound, x,
        "gelu' analytic " + shape_to_string(shape));
    expect_close(
        dx, [&](int64_t i) { return g[i] * central_difference(gelu, in[i]); },
        [&](int64_t i) { return bound(i) + std::fabs(g[i]) * fd_bound(gelu(in[i])); }, x,
        "gelu' finite differences " + shape_to_string(shape));
  }
}

TEST(ActivationTest, ExactGeluReferenceDerivativeMatchesFiniteDifferences) {
  for (int i = -1000; i <= 1000; ++i) {
    const double x = i * 0.01 + (i % 7) * 1e-4;
    EXPECT_NEAR(gelu_erf_grad(x), central_difference(gelu_erf, x), fd_bound(gelu_erf(x))) << x;
  }
}

// The exact (erf) form, Hugging Face's "gelu": forward and backward, and far
// enough from the tanh form that the test tells them apart.
TEST(ActivationTest, GeluErfForwardAndBackward) {
  for (const Shape& shape : kShapes) {
    const Tensor x = spread_inputs(shape);
    const Tensor dy = uniform(shape, "dy");
    Tensor y = nans(shape), dx = nans(shape);
    cpu::gelu_forward(kernels::GeluForm::kErf, x, y);
    cpu::gelu_backward(kernels::GeluForm::kErf, x, dy, dx);
    const float* in = x.data();
    const float* g = dy.data();
    const std::string where = shape_to_string(shape);
    expect_close(
        y, [&](int64_t i) { return gelu_erf(in[i]); },
        [&](int64_t i) { return kMargin * gelu_erf_bound(in[i]); }, x, "gelu erf " + where);
    expect_close(
        dx, [&](int64_t i) { return g[i] * gelu_erf_grad(in[i]); },
        [&](int64_t i) {
          return kMargin * (std::fabs(g[i]) * gelu_erf_grad_bound(in[i]) +
                            kU * std::fabs(g[i] * gelu_erf_grad(in[i])));
        },
        x, "gelu erf' " + where);
  }
  // At x = 1 the two forms differ by 1.5e-4, over 50 times the two bounds together.
  const double gap = std::fabs(gelu_erf(1.0) - gelu(1.0));
  EXPECT_GT(gap, 50 * kMargin * (gelu_erf_bound(1.0) + gelu_bound(1.0)));
}

TEST(ActivationTest, SiluForward) {
  for (const Shape& shape : kShapes) {
    const Tensor x = spread_inputs(shape);
    Tensor y = nans(shape);
    cpu::silu_forward(x, y);
    const float* in = x.data();
    expect_close(
        y, [&](int64_t i) { return silu(in[i]); },
        [&](int64_t i) { return kMargin * silu_bound(in[i]); }, x,
        "silu " + shape_to_string(shape));
  }
}

TEST(ActivationTest, SiluBackward) {
  for (const Shape& shape : kShapes) {
    const Tensor x = spread_inputs(shape);
    const Tensor dy = uniform(shape, "dy");
    Tensor dx = nans(shape);
    cpu::silu_backward(x, dy, dx);
    const float* in = x.data();
    const float* g = dy.data();
    auto bound = [&](int64_t i) {
      return kMargin *
             (std::fabs(g[i]) * silu_grad_bound(in[i]) + kU * std::fabs(g[i] * silu_grad(in[i])));
    };
    expect_close(
        dx, [&](int64_t i) { return g[i] * silu_grad(in[i]); }, bound, x,
        "silu' analytic " + shape_to_string(shape));
    expect_close(
        dx, [&](int64_t i) { return g[i] * central_difference(silu, in[i]); },
        [&](int64_t i) { return bound(i) + std::fabs(g[i]) * fd_bound(silu(in[i])); }, x,
        "silu' finite differences " + shape_to_string(shape));
  }
}

TEST(ActivationTest, SwigluForward) {
  for (const Shape& shape : kShapes) {
    const Tensor gate = spread_inputs(shape);
    const Tensor up = uniform(shape, "up");
    Tensor h = nans(shape);
    cpu::swiglu_forward(gate, up, h);
    const float* a = gate.data();
    const float* b = up.data();
    // h = silu(gate) * up: silu's bound scaled by |up|, plus one rounding.
    expect_close(
        h, [&](int64_t i) { return silu(a[i]) * b[i]; },
        [&](int64_t i) {
          return kMargin * (std::fabs(b[i]) * silu_bound(a[i]) + kU * std::fabs(silu(a[i]) * b[i]));
        },
        gate, "swiglu " + shape_to_string(shape));
  }
}

TEST(ActivationTest, SwigluBackward) {
  for (const Shape& shape : kShapes) {
    const Tensor gate = spread_inputs(shape);
    const Tensor up = uniform(shape, "up");
    const Tensor dh = uniform(shape, "dh");
    Tensor dgate = nans(shape), dup = nans(shape);
    cpu::swiglu_backward(gate, up, dh, dgate, dup);
    const float* a = gate.data();
    const float* b = up.data();
    const float* g = dh.data();
    // dgate = dh * up * silu'(gate); dup = dh * silu(gate). Two more roundings
    // on dgate, one on dup.
    auto dgate_bound = [&](int64_t i) {
      const double scale = std::fabs(g[i] * b[i]);
      return kMargin *
             (scale * silu_grad_bound(a[i]) + 2 * kU * scale * std::fabs(silu_grad(a[i])));
    };
    auto dup_bound = [&](int64_t i) {
      return kMargin * (std::fabs(g[i]) * silu_bound(a[i]) + kU * std::fabs(g[i] * silu(a[i])));
    };
    const std::string where = shape_to_string(shape);
    expect_close(
        dgate, [&](int64_t i) { return g[i] * b[i] * silu_grad(a[i]); }, dgate_bound, gate,
        "swiglu dgate analytic " + where);
    expect_close(
        dup, [&](int64_t i) { return g[i] * silu(a[i]); }, dup_bound, gate,
        "swiglu dup analytic " + where);
    // Finite differences of f(gate, up) = silu(gate) * up in each argument.
    expect_close(
        dgate,
        [&](int64_t i) {
          const double bi = b[i];
          return g[i] * central_difference([bi](double v) { return silu(v) * bi; }, a[i]);
        },
        [&](int64_t i) { return dgate_bound(i) + std::fabs(g[i]) * fd_bound(silu(a[i]) * b[i]); },
        gate, "swiglu dgate finite differences " + where);
    expect_close(
        dup,
        [&](int64_t i) {
          const double ai = a[i];
          return g[i] * central_difference([ai](double v) { return silu(ai) * v; }, b[i]);
        },
        [&](int64_t i) { return dup_bound(i) + std::fabs(g[i]) * fd_bound(silu(a[i]) * b[i]); },
        gate, "swiglu dup finite differences " + where);
  }
}

TEST(ActivationTest, SaturatedInputsGiveZeroNotNaN) {
  // Once expf(-x) overflows to inf (x < -88.72) the sigmoid is 0 and silu, its
  // derivative and SwiGLU are (-)0: off from the exact value by less than
  // |x| 2^-126 (see kTiny), never NaN. Gate pre-activations this negative occur
  // in large models; one NaN would poison a whole training step. GELU is checked
  // at the same points (tanh saturates to -1 long before).
  const std::vector<float> beyond = {-88.8f, -89.0f, -100.0f, -1000.0f, -1e4f};
  for (const Shape& shape : kShapes) {
    Tensor x = spread_inputs(shape, beyond);
    // Tiny shapes get the values at their first entries (simd tail code).
    for (int64_t i = 0; x.numel() < 1000 && i < x.numel() && i < 5; ++i) x.data()[i] = beyond[i];
    const Tensor dy = uniform(shape, "dy");
    Tensor y = nans(shape), dx = nans(shape), h = nans(shape), dgate = nans(shape),
           dup = nans(shape);
    const float* in = x.data();
    const float* g = dy.data();
    const std::string where = shape_to_string(shape);
    cpu::gelu_forward(kernels::GeluForm::kTanh, x, y);
    expect_close(
        y, [&](int64_t i) { return gelu(in[i]); },
        [&](int64_t i) { return kMargin * gelu_bound(in[i]); }, x, "gelu " + where);
    cpu::gelu_backward(kernels::GeluForm::kTanh, x, dy, dx);
    expect_close(
        dx, [&](int64_t i) { return g[i] * gelu_grad(in[i]); },
        [&](int64_t i) {
          return kMargin * std::fabs(g[i]) *
                 (gelu_grad_bound(in[i]) + kU * std::fabs(gelu_grad(in[i])));
        },
        x, "gelu' " + where);
    cpu::silu_forward(x, y);
    expect_close(
        y, [&](int64_t i) { return silu(in[i]); },
        [&](int64_t i) { return kMargin * silu_bound(in[i]); }, x, "silu " + where);
    cpu::silu_backward(x, dy, dx);
    expect_close(
        dx, [&](int64_t i) { return g[i] * silu_grad(in[i]); },
        [&](int64_t i) {
          return kMargin * std::fabs(g[i]) *
                 (silu_grad_bound(in[i]) + kU * std::fabs(silu_grad(in[i])));
        },
        x, "silu' " + where);
    // SwiGLU with up = dy (any finite values will do).
    cpu::swiglu_forward(x, dy, h);
    expect_close(
        h, [&](int64_t i) { return silu(in[i]) * g[i]; },
        [&](int64_t i) {
          return kMargin * std::fabs(g[i]) * (silu_bound(in[i]) + kU * std::fabs(silu(in[i])));
        },
        x, "swiglu " + where);
    cpu::swiglu_backward(x, dy, dy, dgate, dup);
    expect_close(
        dgate, [&](int64_t i) { return g[i] * g[i] * silu_grad(in[i]); },
        [&](int64_t i) {
          return kMargin * g[i] * g[i] *
                 (silu_grad_bound(in[i]) + 2 * kU * std::fabs(silu_grad(in[i])));
        },
        x, "swiglu dgate " + where);
    expect_close(
        dup, [&](int64_t i) { return g[i] * silu(in[i]); },
        [&](int64_t i) {
          return kMargin * std::fabs(g[i]) * (silu_bound(in[i]) + kU * std::fabs(silu(in[i])));
        },
        x, "swiglu dup " + where);
  }
}

// SwiGLU reads gate and up as column blocks of the fused gate_up
// projection's output and writes dgate and dup into column blocks of its
// gradient, a row at a time: the bits of each row's contiguous copy run
// alone (the element blocks start at each row, and -ffast-math's vector expf
// may round an element apart from the scalar one the block's tail uses), in
// fp32 and bf16 (widened per block), with rows of more than one element
// block, and nothing outside the blocks written.
TEST(ActivationTest, SwigluTakesColumnBlocksOfFusedTensors) {
  const int64_t rows = 5, f = kernels::cpu::kElementBlock + 9;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor gate_up = testing::random_tensor({rows, 2 * f + 3}, 3).to(dtype);
    const Tensor gate = gate_up.slice(1, 0, f), up = gate_up.slice(1, f, f);
    const Tensor dh = testing::random_tensor({rows, f}, 4).to(dtype);
    Tensor h = Tensor::empty({rows, f}, Device::cpu(), dtype);
    cpu::swiglu_forward(gate, up, h);
    Tensor grads = Tensor::full({rows, 2 * f + 3}, 7.0f, Device::cpu(), dtype);
    Tensor dgate = grads.slice(1, 0, f), dup = grads.slice(1, f, f);
    cpu::swiglu_backward(gate, up, dh, dgate, dup);
    for (int64_t r = 0; r < rows; ++r) {
      const Tensor gate_r = gate.slice(0, r, 1).clone(), up_r = up.slice(0, r, 1).clone();
      Tensor h_r = Tensor::empty({1, f}, Device::cpu(), dtype);
      Tensor dgate_r = Tensor::empty({1, f}, Device::cpu(), dtype);
      Tensor dup_r = Tensor::empty({1, f}, Device::cpu(), dtype);
      cpu::swiglu_forward(gate_r, up_r, h_r);
      cpu::swiglu_backward(gate_r, up_r, dh.slice(0, r, 1), dgate_r, dup_r);
      EXPECT_EQ(h.slice(0, r, 1).to_vector(), h_r.to_vector()) << "forward, row " << r;
      EXPECT_EQ(dgate.slice(0, r, 1).clone().to_vector(), dgate_r.to_vector()) << "dgate " << r;
      EXPECT_EQ(dup.slice(0, r, 1).clone().to_vector(), dup_r.to_vector()) << "dup " << r;
    }
    for (float v : grads.slice(1, 2 * f, 3).clone().to_vector()) ASSERT_EQ(v, 7.0f);
  }
}

TEST(ActivationTest, ShapeAndContiguityErrors) {
  const Tensor x = Tensor::zeros({4, 6});
  Tensor wrong = Tensor::zeros({6, 4});
  Tensor ok = Tensor::zeros({4, 6});
  EXPECT_THROW(cpu::gelu_forward(kernels::GeluForm::kTanh, x, wrong), InternalError);
  EXPECT_THROW(cpu::gelu_backward(kernels::GeluForm::kTanh, x, wrong, ok), InternalError);
  EXPECT_THROW(cpu::gelu_backward(kernels::GeluForm::kTanh, x, ok, wrong), InternalError);
  EXPECT_THROW(cpu::silu_forward(x, wrong), InternalError);
  EXPECT_THROW(cpu::silu_backward(x, ok, wrong), InternalError);
  EXPECT_THROW(cpu::swiglu_forward(x, wrong, ok), InternalError);
  EXPECT_THROW(cpu::swiglu_forward(x, ok, wrong), InternalError);
  Tensor ok2 = Tensor::zeros({4, 6});
  EXPECT_THROW(cpu::swiglu_backward(x, ok, ok, ok2, wrong), InternalError);
  EXPECT_THROW(cpu::swiglu_backward(x, ok, wrong, ok2, ok), InternalError);
  // GELU and SiLU walk flat arrays: a column block (strided view) is refused.
  Tensor wide = Tensor::zeros({4, 12});
  Tensor block = wide.slice(-1, 0, 6);
  EXPECT_THROW(cpu::gelu_forward(kernels::GeluForm::kTanh, block, ok), InternalError);
  EXPECT_THROW(cpu::silu_forward(x, block), InternalError);
  EXPECT_NO_THROW(cpu::swiglu_forward(block, x, ok)) << "SwiGLU takes column blocks";
}

}  // namespace
}  // namespace colrow
