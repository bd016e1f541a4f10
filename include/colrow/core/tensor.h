// Tensor: an n-d array of one element type (fp32, or bf16 under mixed
// precision) with a shape and strides over shared storage on one device. Copies
// are shallow (like torch.Tensor): a slice or view shares the storage and keeps
// it alive; Tensor::wrap() views host memory colrow does not own (an mmap, a
// caller's buffer). Shards are slices along one dimension, so a rank's column
// block of a row-major matrix is a strided view that BLAS (or cuBLAS) reads
// through its leading dimension, never a copy. Storage comes from the device's
// allocator (core/allocator.h). Data moves between devices only through to()
// and copy_from(), never implicitly; data() of a GPU tensor is a device
// pointer.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/device.h"
#include "colrow/core/dtype.h"

namespace colrow {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Owning, from the device's allocator, uninitialized, of either dtype;
  // data() is for fp32 tensors only (InternalError otherwise), bf16_data()
  // for bf16 ones.
  static Tensor empty(const Shape& shape, Device device = Device::cpu(), DType dtype = DType::kF32);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu(), DType dtype = DType::kF32);
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu(),
                     DType dtype = DType::kF32);
  // On the CPU.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  // Non-owning view of host memory `data` (contiguous); the caller keeps it alive.
  static Tensor wrap(float* data, const Shape& shape);

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool owns_storage() const { return storage_ != nullptr; }

  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Negative dims count from the end (-1 = last).
  int64_t size(int dim) const { return shape_[normalize_dim(dim)]; }
  int64_t stride(int dim) const { return strides_[normalize_dim(dim)]; }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t bytes() const { return numel() * dtype_bytes(dtype_); }
  bool is_contiguous() const;
  // For 2-d views: the distance between rows (BLAS's leading dimension).
  int64_t row_stride() const { return stride(0); }

  // The elements of an fp32 tensor.
  float* data() {
    if (dtype_ != DType::kF32) wrong_dtype(DType::kF32);
    return static_cast<float*>(data_);
  }
  const float* data() const {
    if (dtype_ != DType::kF32) wrong_dtype(DType::kF32);
    return static_cast<const float*>(data_);
  }
  // The elements of a bf16 tensor, as their bits (core/bfloat16.h).
  uint16_t* bf16_data() {
    if (dtype_ != DType::kBF16) wrong_dtype(DType::kBF16);
    return static_cast<uint16_t*>(data_);
  }
  const uint16_t* bf16_data() const {
    if (dtype_ != DType::kBF16) wrong_dtype(DType::kBF16);
    return static_cast<const uint16_t*>(data_);
  }
  // The first element's bytes, any dtype (copies, communication, files).
  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }

  // 2-d element access on the CPU (tests, references, small loops; kernels use
  // raw pointers).
  float& operator()(int64_t i, int64_t j) { return data()[i * strides_[0] + j * strides_[1]]; }
  float operator()(int64_t i, int64_t j) const { return data()[i * strides_[0] + j * strides_[1]]; }

  // View of [start, start + length) along `dim`; shares storage.
  Tensor slice(int dim, int64_t start, int64_t length) const;
  // Part `index` of `count` equal parts along `dim` (size must divide).
  Tensor shard(int dim, int index, int count) const;
  // Same storage, new shape; requires contiguity.
  Tensor view(const Shape& shape) const;
  // A contiguous owning copy on the same device.
  Tensor clone() const;
  // A contiguous owning copy on `device`; this tensor itself when it already
  // lives there (shallow, like torch's .to()).
  Tensor to(Device device) const;
  // A contiguous copy in `dtype` on the same device (convert_from's rounding);
  // this tensor itself when it already has that dtype (shallow, like torch).
  Tensor to(DType dtype) const;
  // The elements in row-major order, copied to the host from any device
  // (bf16 widened to fp32, exactly).
  std::vector<float> to_vector() const;

  // Element-wise copy from a tensor of the same shape and dtype (either may be
  // strided: any view on the CPU, 2-d views with a contiguous last dim across
  // devices), from any device to any device. Changing dtype rounds:
  // convert_from.
  void copy_from(const Tensor& src);
  // Every element = value (rounded to nearest even in a bf16 tensor).
  void fill(float value);
  // Element-wise from a tensor of the same shape, both contiguous and on one
  // device, across dtypes: fp32 -> bf16 rounds to nearest even
  // (core/bfloat16.h, the GPU bit for bit), bf16 -> fp32 is exact, the same
  // dtype copies. What ops::convert and the collectives' bf16 wire run.
  void convert_from(const Tensor& src);
  void zero() { fill(0.0f); }

 private:
  int normalize_dim(int dim) const;
  [[noreturn]] void wrong_dtype(DType wanted) const;

  std::shared_ptr<void> storage_;  // null for wrapped memory
  void* data_ = nullptr;
  Device device_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::vector<int64_t> strides_;
};

// Ensures `t` is an owning contiguous tensor of `shape` and `dtype` on
// `device`, reallocating only when one changes: layers keep their activation
// buffers across steps so the step loop does not allocate.
void ensure_shape(Tensor& t, const Shape& shape, Device device, DType dtype = DType::kF32);

// Throws InternalError unless every defined, non-empty tensor lives on
// `device`; `what` names the operation for the message.
void require_device(const char* what, Device device, std::initializer_list<const Tensor*> tensors);

}  // namespace colrow
