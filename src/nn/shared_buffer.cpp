// Activation buffers shared by every layer (see shared_buffer.h).
#include "colrow/nn/shared_buffer.h"

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

}  // namespace colrow
