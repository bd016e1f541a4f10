// Tensor storage, views and copies (see include/colrow/core/tensor.h).
#include "colrow/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "colrow/core/error.h"

namespace colrow {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; what AVX-512 loads like

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

std::shared_ptr<float> allocate(int64_t count) {
  const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(float);
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    throw BackendError("[tensor] allocation of " + std::to_string(bytes) +
                       " bytes failed. Reduce the model or batch size, or add ranks.");
  }
  return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
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

Tensor Tensor::empty(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) throw InternalError("[tensor] negative dimension in " + shape_to_string(shape));
  }
  Tensor t;
  t.storage_ = allocate(shape_numel(shape));
  t.data_ = t.storage_.get();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::zeros(const Shape& shape) {
  return full(shape, 0.0f);
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape)) {
    throw InternalError("[tensor] " + std::to_string(values.size()) + " values do not fill shape " +
                        shape_to_string(shape));
  }
  Tensor t = empty(shape);
  std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::wrap(float* data, const Shape& shape) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
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
  t.data_ = data_ + start * strides_[d];
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
  Tensor t = empty(shape_);
  t.copy_from(*this);
  return t;
}

std::vector<float> Tensor::to_vector() const {
  const Tensor c = is_contiguous() ? *this : clone();
  return std::vector<float>(c.data_, c.data_ + c.numel());
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_) {
    throw InternalError("[tensor] copy from shape " + shape_to_string(src.shape_) + " into " +
                        shape_to_string(shape_));
  }
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(data_, src.data_, static_cast<size_t>(numel()) * sizeof(float));
    return;
  }
  float* dst = data_;
  const float* s = src.data_;
  for_each_index(shape_, strides_, src.strides_, [dst, s](int64_t a, int64_t b) { dst[a] = s[b]; });
}

void Tensor::fill(float value) {
  float* dst = data_;
  for_each_index(shape_, strides_, strides_, [dst, value](int64_t a, int64_t) { dst[a] = value; });
}

void ensure_shape(Tensor& t, const Shape& shape) {
  if (t.owns_storage() && t.shape() == shape && t.is_contiguous()) return;
  t = Tensor::empty(shape);
}

}  // namespace colrow
