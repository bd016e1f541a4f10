// The element types of the tensors a kernel takes in either dtype: a kernel
// templated on E (float, or uint16_t for the bits of a bf16) reads with
// widen() and writes with narrow<E>() (core/bfloat16.h), so each output is its
// fp32 result rounded once: kernels/mixed_precision.h's rule, without the
// widened copies. The host side of either backend picks the instantiation:
// with_elements from one tensor's dtype (a kernel whose other operands have
// fixed dtypes), with_element_type from the dtype that the activations of one
// call share (checked).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include "colrow/core/error.h"
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

// The dtype `shared` have in common; mixed dtypes are an InternalError.
template <typename Tensors>
DType shared_dtype(const char* what, const Tensors& shared) {
  const DType dtype = (*std::begin(shared))->dtype();
  for (const Tensor* t : shared) {
    if (t->dtype() != dtype) {
      std::string dtypes;
      for (const Tensor* u : shared) {
        dtypes += std::string(dtypes.empty() ? "" : ", ") + dtype_name(u->dtype());
      }
      throw InternalError(std::string("[kernels] ") + what + ": operands of dtypes " + dtypes +
                          " must share one (fp32 or bf16); convert with to(DType) first");
    }
  }
  return dtype;
}
inline DType shared_dtype(const char* what, std::initializer_list<const Tensor*> shared) {
  return shared_dtype<std::initializer_list<const Tensor*>>(what, shared);
}

// fn(E{}) with E the element type of `shared`: the operands of one call that
// carry activations or the weights' compute copies, all fp32 or all bf16 (the
// model's norm statistics, attention's probabilities and every gradient of a
// parameter stay fp32, and the kernels read those with data()). Mixed dtypes
// are a bug of the caller: an InternalError naming them, never a silent
// conversion.
//   with_element_type("gelu_forward", {&x, &y}, [&](auto e) {
//     using E = decltype(e);
//     kernel(elements<E>(x), elements<E>(y));
//   });
template <typename Tensors, typename Fn>
void with_element_type(const char* what, const Tensors& shared, Fn&& fn) {
  if (shared_dtype(what, shared) == DType::kBF16) {
    fn(uint16_t{});
  } else {
    fn(float{});
  }
}
template <typename Fn>
void with_element_type(const char* what, std::initializer_list<const Tensor*> shared, Fn&& fn) {
  with_element_type<std::initializer_list<const Tensor*>>(what, shared, std::forward<Fn>(fn));
}

// t's elements as E, the type with_element_type chose for it.
template <typename E>
const E* elements(const Tensor& t) {
  return static_cast<const E*>(t.raw_data());
}
template <typename E>
E* elements(Tensor& t) {
  return static_cast<E*>(t.raw_data());
}

}  // namespace colrow::kernels
