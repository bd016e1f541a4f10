// Tensor storage, views and copies (see include/colrow/core/tensor.h).
#include "colrow/core/tensor.h"

#include <cstring>
#include <sstream>

#include "colrow/core/allocator.h"
#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/device_runtime.h"
#include "core/parallel_threshold.h"

namespace colrow {
namespace {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

std::shared_ptr<void> allocate(int64_t count, DType dtype, Device device) {
  const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * dtype_bytes(dtype);
  Allocator& allocator = allocator_for(device);
  void* p = allocator.allocate(bytes);
  return std::shared_ptr<void>(p, [&allocator, bytes](void* q) { allocator.deallocate(q, bytes); });
}

// Calls fn(dst_offset, src_offset) for every element, row by row over the last dim.
template <typename Fn>
void for_each_index(const Shape& shape, const std::vector<int64_t>& a_strides,
                    const std::vector<int64_t>& b_strides, Fn fn) {
  const int nd = static_cast<int>(shape.size());
  if (shape_numel(shape) == 0) return;
  if (nd == 0) {
    fn(0, 0);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  while (true) {
    int64_t a = 0, b = 0;
    for (int d = 0; d < nd - 1; ++d) {
      a += idx[d] * a_strides[d];
      b += idx[d] * b_strides[d];
    }
    for (int64_t j = 0; j < shape[nd - 1]; ++j) {
      fn(a + j * a_strides[nd - 1], b + j * b_strides[nd - 1]);
    }
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Element-wise copy between two host views of one shape and element type.
template <typename T>
void copy_elements(const Shape& shape, const std::vector<int64_t>& dst_strides,
                   const std::vector<int64_t>& src_strides, T* dst, const T* src) {
  for_each_index(shape, dst_strides, src_strides,
                 [dst, src](int64_t a, int64_t b) { dst[a] = src[b]; });
}

template <typename T>
void fill_elements(const Shape& shape, const std::vector<int64_t>& strides, T* dst, T value) {
  for_each_index(shape, strides, strides, [dst, value](int64_t a, int64_t) { dst[a] = value; });
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, Device device, DType dtype) {
  for (int64_t d : shape) {
    if (d < 0) throw InternalError("[tensor] negative dimension in " + shape_to_string(shape));
  }
  Tensor t;
  t.device_ = device;
  t.dtype_ = dtype;
  t.storage_ = allocate(shape_numel(shape), dtype, device);
  t.data_ = t.storage_.get();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device device, DType dtype) {
  return full(shape, 0.0f, device, dtype);
}

Tensor Tensor::full(const Shape& shape, float value, Device device, DType dtype) {
  Tensor t = empty(shape, device, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape)) {
    throw InternalError("[tensor] " + std::to_string(values.size()) + " values do not fill shape " +
                        shape_to_string(shape));
  }
  Tensor t = empty(shape);
  // memcpy's pointers must not be null, even for no bytes (an empty vector's may be)
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::wrap(float* data, const Shape& shape) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

void Tensor::wrong_dtype(DType wanted) const {
  throw InternalError(std::string("[tensor] a ") + dtype_name(dtype_) + " tensor " +
                      shape_to_string(shape_) + " read as " + dtype_name(wanted) +
                      ": convert it with to(DType) first");
}

int Tensor::normalize_dim(int dim) const {
  const int nd = ndim();
  const int d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    throw InternalError("[tensor] dim " + std::to_string(dim) + " out of range for shape " +
                        shape_to_string(shape_));
  }
  return d;
}

bool Tensor::is_contiguous() const {
  return strides_ == contiguous_strides(shape_);
}

Tensor Tensor::slice(int dim, int64_t start, int64_t length) const {
  const int d = normalize_dim(dim);
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    throw InternalError("[tensor] slice [" + std::to_string(start) + ", " +
                        std::to_string(start + length) + ") of dim " + std::to_string(dim) +
                        " exceeds shape " + shape_to_string(shape_));
  }
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * dtype_bytes(dtype_);
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::shard(int dim, int index, int count) const {
  const int64_t n = size(dim);
  if (count <= 0 || n % count != 0 || index < 0 || index >= count) {
    throw InternalError("[tensor] cannot take part " + std::to_string(index) + " of " +
                        std::to_string(count) + " along dim " + std::to_string(dim) + " of shape " +
                        shape_to_string(shape_));
  }
  const int64_t part = n / count;
  return slice(dim, index * part, part);
}

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous() || shape_numel(shape) != numel()) {
    throw InternalError("[tensor] cannot view " + shape_to_string(shape_) + " as " +
                        shape_to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, device_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, device, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, device_, dtype);
  t.convert_from(is_contiguous() ? *this : clone());
  return t;
}

std::vector<float> Tensor::to_vector() const {
  // to() of a GPU tensor is already a contiguous host copy, and widening one.
  Tensor c = to(Device::cpu()).to(DType::kF32);
  if (!c.is_contiguous()) c = c.clone();
  return std::vector<float>(c.data(), c.data() + c.numel());
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_) {
    throw InternalError("[tensor] copy from shape " + shape_to_string(src.shape_) + " into " +
                        shape_to_string(shape_));
  }
  if (src.dtype_ != dtype_) {
    throw InternalError(std::string("[tensor] copy from ") + dtype_name(src.dtype_) + " into " +
                        dtype_name(dtype_) + " " + shape_to_string(shape_) +
                        ": a copy keeps the dtype; convert_from changes it");
  }
  if (!device_.is_cpu() || !src.device_.is_cpu()) {
    device_runtime::copy(src, *this);
    return;
  }
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(data_, src.data_, static_cast<size_t>(bytes()));
    return;
  }
  if (dtype_ == DType::kF32) {
    copy_elements(shape_, strides_, src.strides_, data(), src.data());
  } else {
    copy_elements(shape_, strides_, src.strides_, bf16_data(), src.bf16_data());
  }
}

void Tensor::fill(float value) {
  if (!device_.is_cpu()) {
    device_runtime::fill(*this, value);
    return;
  }
  if (dtype_ == DType::kF32) {
    fill_elements(shape_, strides_, data(), value);
  } else {
    fill_elements(shape_, strides_, bf16_data(), float_to_bf16(value));
  }
}

void Tensor::convert_from(const Tensor& src) {
  if (src.shape_ != shape_ || !src.is_contiguous() || !is_contiguous() || src.device_ != device_) {
    throw InternalError("[tensor] convert from " + shape_to_string(src.shape_) + " on " +
                        src.device_.str() + " into " + shape_to_string(shape_) + " on " +
                        device_.str() + ": one shape, contiguous, one device");
  }
  if (src.dtype_ == dtype_) {
    copy_from(src);
    return;
  }
  if (!device_.is_cpu()) {
    device_runtime::convert(src, *this);
    return;
  }
  const int64_t n = numel();
  if (src.dtype_ == DType::kF32) {
    const float* x = src.data();
    uint16_t* y = bf16_data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
  } else {
    const uint16_t* x = src.bf16_data();
    float* y = data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
  }
}

void ensure_shape(Tensor& t, const Shape& shape, Device device, DType dtype) {
  if (t.owns_storage() && t.shape() == shape && t.is_contiguous() && t.device() == device &&
      t.dtype() == dtype)
    return;
  t = Tensor::empty(shape, device, dtype);
}

void require_device(const char* what, Device device, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    // An undefined tensor (an optional operand left out, e.g. AdamW's compute
    // copy in fp32) has no device: Tensor() reads as one cpu element.
    if (t == nullptr || !t->defined() || t->numel() == 0 || t->device() == device) continue;
    throw InternalError(std::string("[device] ") + what + ": an operand lives on " +
                        t->device().str() + ", the others on " + device.str() +
                        ". Move it with to() first: colrow never copies between devices "
                        "implicitly.");
  }
}

}  // namespace colrow
