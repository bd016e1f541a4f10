// The element types of the tensors a kernel takes in either dtype: a kernel
// templated on E (float, or uint16_t for the bits of a bf16) reads with
// widen() and writes with narrow<E>() (core/bfloat16.h); with_elements picks
// the instantiation from a tensor's dtype, on the host side of either backend.
#pragma once

#include <cstdint>
#include <type_traits>

#include "colrow/core/tensor.h"

namespace colrow::kernels {

// fn(p) with t's elements: const float* for fp32, const uint16_t* for bf16.
template <typename Fn>
void with_elements(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::kBF16) {
    fn(static_cast<const uint16_t*>(t.raw_data()));
  } else {
    fn(static_cast<const float*>(t.raw_data()));
  }
}

// E of the pointer with_elements passes: element_of<decltype(p)>.
template <typename Pointer>
using element_of = std::remove_const_t<std::remove_pointer_t<Pointer>>;

}  // namespace colrow::kernels
