// The trace of queued operations (kernels/op_trace.h).
#include "kernels/op_trace.h"

#include <cstdio>

#include "colrow/core/error.h"

namespace colrow::kernels {
namespace {

OpTrace* g_open = nullptr;

std::string describe(const Tensor& t) {
  char address[32];
  std::snprintf(address, sizeof address, "%p", t.raw_data());
  std::string strides;
  for (int d = 0; d < t.ndim(); ++d) strides += (d ? "," : "") + std::to_string(t.stride(d));
  return std::string(address) + " " + shape_to_string(t.shape()) + " [" + strides + "] " +
         dtype_name(t.dtype()) + " " + t.device().str();
}

}  // namespace

OpTrace::OpTrace() {
  if (g_open != nullptr) throw InternalError("[op_trace] a trace is already open");
  g_open = this;
}

OpTrace::~OpTrace() {
  g_open = nullptr;
}

void trace_op(const char* op, std::initializer_list<const Tensor*> tensors) {
  if (g_open == nullptr) return;
  std::string line = std::string(op) + "(";
  bool first = true;
  for (const Tensor* t : tensors) {
    line += (first ? "" : ", ") + (t != nullptr ? describe(*t) : std::string("-"));
    first = false;
  }
  g_open->operations_.push_back(line + ")");
}

}  // namespace colrow::kernels
