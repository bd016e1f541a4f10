// The native bf16 kernels of kernels/ops.h against the rule of
// kernels/mixed_precision.h, on any device (attention's plain kernels
// follow it through widened copies, the fused CUDA one natively): every operation runs once with
// bf16 activations and once with fp32 ones holding the same (bf16-exact)
// values; each bf16 output must be the fp32 output rounded once, and each
// fp32 output (statistics, parameter gradients) the fp32 output itself, bit
// for bit. Both runs execute the same fp32 arithmetic on the same values in
// the same order (the kernels widen as they read), so nothing looser than
// equality is justified. Shapes: a small odd one, and one of 37 x 1000
// elements, above the CPU's parallel threshold and ending in a partial
// element block. Used by kernels/mixed_precision_test.cpp (CPU) and
// kernels/cuda/native_bf16_test.cpp (GPU).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/ops.h"

namespace colrow::testing {

// Where a case runs and in which dtype its activations are.
struct Bf16CaseRun {
  Device device;
  DType dtype;

  // Random N(0, 1) values rounded to bf16: exact in either dtype.
  Tensor act(const Shape& shape, uint32_t seed) const {
    return fp32_values(shape, seed, true).to(dtype).to(device);
  }
  // An output: filled with a value per dtype, so an element a kernel fails
  // to write differs between the runs.
  Tensor empty_act(const Shape& shape) const {
    return Tensor::full(shape, dtype == DType::kBF16 ? 1.0f : 2.0f, device, dtype);
  }
  // An operand that stays fp32 in either run (statistics, gradients).
  Tensor fp32(const Shape& shape, uint32_t seed) const {
    return fp32_values(shape, seed, false).to(device);
  }

  static Tensor fp32_values(const Shape& shape, uint32_t seed, bool bf16_exact) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (float& x : v) x = bf16_exact ? bf16_to_float(float_to_bf16(normal(gen))) : normal(gen);
    return Tensor::from_vector(shape, v);
  }
};

// One operation on one shape: its outputs, in a fixed order.
using Bf16Case = std::function<std::vector<Tensor>(const Bf16CaseRun&)>;

inline std::vector<std::pair<std::string, Bf16Case>> native_bf16_cases(int64_t tokens, int64_t d) {
  using R = const Bf16CaseRun&;
  const int64_t heads = 2, head_dim = 2 * (d / 4);  // rope: width 2 head_dim <= d
  const int64_t seq = tokens % 2 == 0 ? tokens / 2 : tokens, vocab = 11;
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) ids.push_back(static_cast<int32_t>((t * 7) % (vocab + 3)));
  const int64_t vocab_start = 2;  // ids below 2 and above 12 belong to other ranks
  std::vector<std::pair<std::string, Bf16Case>> cases;
  auto add = [&](std::string name, Bf16Case c) {
    cases.emplace_back(std::move(name), std::move(c));
  };
  for (const ops::GeluForm form : {ops::GeluForm::kTanh, ops::GeluForm::kErf}) {
    const std::string f = form == ops::GeluForm::kTanh ? " tanh" : " erf";
    add("gelu_forward" + f, [=](R r) {
      Tensor y = r.empty_act({tokens, d});
      ops::gelu_forward(form, r.act({tokens, d}, 1), y);
      return std::vector<Tensor>{y};
    });
    add("gelu_backward" + f, [=](R r) {
      Tensor dx = r.empty_act({tokens, d});
      ops::gelu_backward(form, r.act({tokens, d}, 1), r.act({tokens, d}, 2), dx);
      return std::vector<Tensor>{dx};
    });
  }
  add("silu_forward", [=](R r) {
    Tensor y = r.empty_act({tokens, d});
    ops::silu_forward(r.act({tokens, d}, 3), y);
    return std::vector<Tensor>{y};
  });
  add("silu_backward", [=](R r) {
    Tensor dx = r.empty_act({tokens, d});
    ops::silu_backward(r.act({tokens, d}, 3), r.act({tokens, d}, 4), dx);
    return std::vector<Tensor>{dx};
  });
  add("swiglu_forward", [=](R r) {
    Tensor h = r.empty_act({tokens, d});
    ops::swiglu_forward(r.act({tokens, d}, 5), r.act({tokens, d}, 6), h);
    return std::vector<Tensor>{h};
  });
  add("swiglu_backward", [=](R r) {
    Tensor dgate = r.empty_act({tokens, d}), dup = r.empty_act({tokens, d});
    ops::swiglu_backward(r.act({tokens, d}, 5), r.act({tokens, d}, 6), r.act({tokens, d}, 7), dgate,
                         dup);
    return std::vector<Tensor>{dgate, dup};
  });
  add("add", [=](R r) {
    Tensor out = r.empty_act({tokens, d});
    ops::add(r.act({tokens, d}, 8), r.act({tokens, d}, 9), out);
    return std::vector<Tensor>{out};
  });
  add("add_into", [=](R r) {
    Tensor out = r.act({tokens, d}, 8);
    ops::add_into(out, r.act({tokens, d}, 9));
    return std::vector<Tensor>{out};
  });
  add("add_bias", [=](R r) {
    Tensor y = r.act({tokens, d}, 10);
    ops::add_bias(y, r.act({d}, 11));
    return std::vector<Tensor>{y};
  });
  add("accumulate_bias_grad", [=](R r) {
    Tensor db = r.fp32({d}, 12);
    ops::accumulate_bias_grad(r.act({tokens, d}, 13), db);
    return std::vector<Tensor>{db};
  });
  add("layer_norm", [=](R r) {
    const Tensor x = r.act({tokens, d}, 14), gamma = r.act({d}, 15);
    Tensor y = r.empty_act({tokens, d}), dx = r.empty_act({tokens, d});
    Tensor mean = r.fp32({tokens}, 0), rstd = r.fp32({tokens}, 0);
    Tensor dgamma = r.fp32({d}, 16), dbeta = r.fp32({d}, 17);
    ops::layer_norm_forward(x, gamma, r.act({d}, 18), 1e-5f, y, mean, rstd);
    ops::layer_norm_backward(x, gamma, mean, rstd, r.act({tokens, d}, 19), dx, dgamma, dbeta);
    return std::vector<Tensor>{y, mean, rstd, dx, dgamma, dbeta};
  });
  add("rms_norm", [=](R r) {
    const Tensor x = r.act({tokens, d}, 20), weight = r.act({d}, 21);
    Tensor y = r.empty_act({tokens, d}), dx = r.empty_act({tokens, d});
    Tensor rstd = r.fp32({tokens}, 0), dweight = r.fp32({d}, 22);
    ops::rms_norm_forward(x, weight, 1e-6f, y, rstd);
    ops::rms_norm_backward(x, weight, rstd, r.act({tokens, d}, 23), dx, dweight);
    return std::vector<Tensor>{y, rstd, dx, dweight};
  });
  add("rope", [=](R r) {
    const int64_t width = heads * head_dim;
    Tensor cos = Tensor::empty({seq, head_dim / 2}, r.device);
    Tensor sin = Tensor::empty({seq, head_dim / 2}, r.device);
    ops::rope_table(seq, std::vector<double>(static_cast<size_t>(head_dim / 2), 0.3), cos, sin);
    Tensor y = r.empty_act({tokens, width});
    ops::rope_forward(r.act({tokens, width}, 24), cos, sin, y);
    Tensor dx = r.act({tokens, width}, 25);
    ops::rope_backward(dx, cos, sin, dx);  // in place, as the model does
    return std::vector<Tensor>{y, dx};
  });
  add("embedding", [=](R r) {
    Tensor y = r.empty_act({tokens, d}), dtable = r.fp32({vocab, d}, 26);
    ops::embedding_forward(ids, vocab_start, r.act({vocab, d}, 27), y);
    ops::embedding_backward(ids, vocab_start, r.act({tokens, d}, 28), dtable);
    return std::vector<Tensor>{y, dtable};
  });
  add("position_embedding", [=](R r) {
    Tensor x = r.act({tokens, d}, 29), dtable = r.fp32({seq + 1, d}, 30);
    ops::position_embedding_forward(x, r.act({seq + 1, d}, 31), seq);
    ops::position_embedding_backward(r.act({tokens, d}, 32), seq, dtable);
    return std::vector<Tensor>{x, dtable};
  });
  add("attention", [=](R r) {
    // One sequence of `tokens` positions, 4 query heads on 2 KV heads (GQA);
    // the fused CUDA kernel where it applies, the plain ones elsewhere. Head
    // dims 8 and 72 (not multiples of 32): CUDA's bf16 tensor-core kernel,
    // which rounds P and dS to bf16 and so follows no such rule, has its own
    // bounds in kernels/cuda/flash_attention_test.cpp.
    const ops::AttentionSize size{1, 4, tokens, d < 64 ? 8 : 72, r.dtype};
    const int64_t width = size.n_head * size.head_dim, kv_width = 2 * size.head_dim;
    const Tensor q = r.act({tokens, width}, 33), k = r.act({tokens, kv_width}, 34),
                 v = r.act({tokens, kv_width}, 35), dout = r.act({tokens, width}, 36);
    Tensor saved = Tensor::empty(ops::attention_saved_shape(r.device, size), r.device);
    Tensor out = r.empty_act({tokens, width}), dq = r.empty_act({tokens, width});
    Tensor dk = r.empty_act({tokens, kv_width}), dv = r.empty_act({tokens, kv_width});
    Tensor scratch = Tensor::zeros(ops::attention_backward_scratch_shape(r.device, size), r.device);
    ops::attention_forward(q, k, v, /*window=*/0, saved, out);
    // The fused backward reads out (D = dO . O): both runs give it the bf16 values.
    const Tensor out_bf16_values = out.to(DType::kBF16).to(r.dtype);
    ops::attention_backward(q, k, v, out_bf16_values, saved, dout, 0, dq, dk, dv, scratch);
    return std::vector<Tensor>{out, saved, dq, dk, dv};
  });
  return cases;
}

// Every case on `device`: bf16 outputs equal the fp32 run's rounded once,
// fp32 outputs equal it.
inline void expect_native_bf16_is_fp32_rounded_once(Device device) {
  struct Size {
    int64_t tokens, d;
  };
  for (const Size size : {Size{3, 5}, Size{37, 1000}}) {
    for (const auto& [name, run] : native_bf16_cases(size.tokens, size.d)) {
      SCOPED_TRACE(name + " at " + std::to_string(size.tokens) + " x " + std::to_string(size.d));
      const std::vector<Tensor> bf16 = run({device, DType::kBF16});
      const std::vector<Tensor> fp32 = run({device, DType::kF32});
      ASSERT_EQ(bf16.size(), fp32.size());
      for (size_t i = 0; i < bf16.size(); ++i) {
        SCOPED_TRACE("output " + std::to_string(i));
        const Tensor want = fp32[i].to(Device::cpu()).to(bf16[i].dtype());
        const std::vector<float> got = bf16[i].to(Device::cpu()).to_vector();
        const std::vector<float> expected = want.to_vector();
        ASSERT_EQ(got.size(), expected.size());
        int64_t mismatches = 0;
        for (size_t k = 0; k < got.size(); ++k) {
          if (float_bits(got[k]) != float_bits(expected[k]) && mismatches++ < 3) {
            ADD_FAILURE() << "element " << k << ": " << got[k] << " != " << expected[k];
          }
        }
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

// Activations of two dtypes in one call are a caller's bug: an InternalError,
// never a silent conversion.
inline void expect_mixed_dtypes_refused(Device device) {
  const Tensor x16 = Tensor::zeros({2, 4}, device, DType::kBF16);
  Tensor y32 = Tensor::zeros({2, 4}, device);
  EXPECT_THROW(ops::gelu_forward(ops::GeluForm::kTanh, x16, y32), InternalError);
  EXPECT_THROW(ops::add_into(y32, x16), InternalError);
  const Tensor gamma32 = Tensor::full({4}, 1.0f, device),
               beta16 = Tensor::zeros({4}, device, DType::kBF16);
  Tensor y16 = Tensor::zeros({2, 4}, device, DType::kBF16);
  Tensor mean = Tensor::zeros({2}, device), rstd = Tensor::zeros({2}, device);
  EXPECT_THROW(ops::layer_norm_forward(x16, gamma32, beta16, 1e-5f, y16, mean, rstd),
               InternalError);
  // Parameter gradients stay fp32.
  Tensor db16 = Tensor::zeros({4}, device, DType::kBF16);
  EXPECT_THROW(ops::accumulate_bias_grad(x16, db16), InternalError);
  // Attention, whichever kernel the device picks, refuses by the dtypes
  // themselves (every shape here is valid): a bf16 out for fp32 q, k, v, and
  // an fp32 dq among bf16 gradients.
  const ops::AttentionSize size{1, 2, 3, 64};
  const int64_t width = size.n_head * size.head_dim;
  const Tensor q = Tensor::zeros({3, width}, device), k = q, v = q;
  Tensor saved = Tensor::empty(ops::attention_saved_shape(device, size), device);
  Tensor out16 = Tensor::zeros({3, width}, device, DType::kBF16);
  auto expect_dtype_refusal = [](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " took mixed dtypes";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("operands of dtypes"), std::string::npos) << e.what();
    }
  };
  expect_dtype_refusal([&] { ops::attention_forward(q, k, v, 0, saved, out16); },
                       "attention_forward");
  const Tensor q16 = q.to(DType::kBF16), k16 = q16, v16 = q16, dout16 = q16;
  Tensor out = Tensor::zeros({3, width}, device, DType::kBF16);
  ops::attention_forward(q16, k16, v16, 0, saved, out);
  Tensor dq32 = Tensor::zeros({3, width}, device), dk16 = out16.clone(), dv16 = out16.clone();
  Tensor scratch = Tensor::zeros(ops::attention_backward_scratch_shape(device, size), device);
  expect_dtype_refusal(
      [&] {
        ops::attention_backward(q16, k16, v16, out, saved, dout16, 0, dq32, dk16, dv16, scratch);
      },
      "attention_backward");
}

}  // namespace colrow::testing
