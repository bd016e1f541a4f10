// Activation buffers shared by every layer (see shared_buffer.h).
#include "colrow/nn/shared_buffer.h"

#include <algorithm>

#include <map>
#include <tuple>

namespace colrow {

Tensor& shared_buffer(const std::string& role, const Shape& shape, Device device, DType dtype) {
  // std::map nodes never move: references stay valid as buffers are added.
  static std::map<std::tuple<std::string, Shape, std::string, DType>, Tensor> buffers;
  Tensor& t = buffers[{role, shape, device.str(), dtype}];
  if (!t.owns_storage()) t = Tensor::empty(shape, device, dtype);
  return t;
}

Tensor& layer_buffer(Tensor& t, bool shared, const std::string& role, const Shape& shape,
                     Device device, DType dtype) {
  if (!shared) {
    ensure_shape(t, shape, device, dtype);
    return t;
  }
  static std::map<std::tuple<std::string, std::string, DType>, Tensor> storages;  // flat
  Tensor& storage = storages[{role, device.str(), dtype}];
  const int64_t n = shape_numel(shape);
  // Grown, not kept beside: a layer still holding the old one lets it go at its next call.
  if (!storage.owns_storage() || storage.numel() < n) storage = Tensor::empty({n}, device, dtype);
  if (t.raw_data() != storage.raw_data() || t.shape() != shape || !t.is_contiguous() ||
      t.device() != device || t.dtype() != dtype) {
    t = storage.slice(0, 0, n).view(shape);  // a handle: no copy, no allocation
  }
  return t;
}

Tensor leading_rows(Tensor& storage, const Shape& shape, Device device, DType dtype) {
  const Shape held = storage.owns_storage() ? storage.shape() : Shape{};
  const bool fits = held.size() == shape.size() && !held.empty() && storage.device() == device &&
                    storage.dtype() == dtype && held[0] >= shape[0] &&
                    std::equal(held.begin() + 1, held.end(), shape.begin() + 1);
  if (!fits) storage = Tensor::empty(shape, device, dtype);
  return storage.slice(0, 0, shape[0]);
}

}  // namespace colrow
