// The operations queued through kernels/ops.h, recorded while an OpTrace is
// open: each one's name and its tensor operands' addresses, shapes, strides
// and dtypes. A CUDA graph replays the launches of the region it captured
// with the operands of the capture (train/step_graph.h), so a region may be
// captured only if the work it queues depends on nothing but what the graph
// is kept by (the micro-batch's size and counted targets). Two traces of one
// warm region on different data then agree entry by entry, which a test
// checks on the CPU (tests/train/step_graph_test.cpp). Scalars passed to the
// kernels are not recorded: nn/ derives none from the data but the mean's
// 1 / counted. Operations are issued from one thread, as everywhere in colrow.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels {

class OpTrace {
 public:
  OpTrace();  // records until destroyed; InternalError if another is open
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // One line per operation: "name(address shape strides dtype, ...)".
  const std::vector<std::string>& operations() const { return operations_; }

 private:
  friend void trace_op(const char* op, std::initializer_list<const Tensor*> tensors);
  std::vector<std::string> operations_;
};

// Adds an operation to the open trace, if any (kernels/ops.cpp calls it).
void trace_op(const char* op, std::initializer_list<const Tensor*> tensors);

}  // namespace colrow::kernels
