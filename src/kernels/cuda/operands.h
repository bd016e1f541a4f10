// Host-side helpers of the CUDA kernels for their operands: which GPU they
// live on (refusing host tensors, which a kernel would read as device
// memory), and host data uploaded for a launch (token ids, segment tables).
// Plain C++: no CUDA types, so it reads the same in .cu and .cpp files.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// The index of the GPU the operands live on: that of the first non-empty one,
// which must be a CUDA tensor, with every other non-empty one on the same GPU
// (require_device). Null pointers and empty tensors hold no memory and are not
// checked, unless every operand is empty: then the first one's device counts.
inline int cuda_device_of(const char* what, std::initializer_list<const Tensor*> operands) {
  const Tensor* first = nullptr;
  for (const Tensor* t : operands) {
    if (t == nullptr) continue;
    if (first == nullptr || (first->numel() == 0 && t->numel() > 0)) first = t;
  }
  if (first == nullptr) {
    throw InternalError(std::string("[device] ") + what + ": no operands");
  }
  const Device device = first->device();
  if (!device.is_cuda()) {
    throw InternalError(std::string("[device] ") + what + ": an operand lives on " + device.str() +
                        ", not on a GPU. Move it with to() first: the CUDA kernels read device "
                        "memory only.");
  }
  require_device(what, device, operands);
  return device.index;
}

// values as the bits of a float tensor [values.size()] on `device` (exact;
// returns once the host buffer has been read). int32_data reads them back.
inline Tensor upload_int32(const std::vector<int32_t>& values, Device device) {
  Tensor host = Tensor::empty({static_cast<int64_t>(values.size())});
  std::memcpy(host.data(), values.data(), values.size() * sizeof(int32_t));
  return host.to(device);
}

inline const int32_t* int32_data(const Tensor& t) {
  return reinterpret_cast<const int32_t*>(t.data());
}

// A table of trivially copyable rows (8-byte fields only, so host and device
// agree on the layout) as the bytes of a float tensor on `device`, returned
// once the host buffer has been read. Device storage is 256-byte aligned, so
// reinterpret_cast<const Row*>(table.data()) is aligned in a kernel.
template <typename Row>
Tensor upload_table(const std::vector<Row>& rows, Device device) {
  static_assert(std::is_trivially_copyable_v<Row> && sizeof(Row) % sizeof(double) == 0,
                "table rows are copied as bytes and hold 8-byte fields only");
  const size_t bytes = rows.size() * sizeof(Row);
  Tensor host = Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))});
  std::memcpy(host.data(), rows.data(), bytes);
  return host.to(device);
}

}  // namespace colrow::kernels::cuda
