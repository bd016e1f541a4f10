// Which GELU an MLP uses, shared by every backend (formulas in kernels/cpu/activation.h).
#pragma once

namespace colrow::kernels {

// kTanh: GPT-2's tanh approximation (Hugging Face's "gelu_new").
// kErf:  the exact x Phi(x) (Hugging Face's "gelu", torch's default GELU).
enum class GeluForm { kTanh, kErf };

}  // namespace colrow::kernels
