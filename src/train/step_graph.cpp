// Captured and replayed micro-batches (train/step_graph.h).
#include "colrow/train/step_graph.h"

#include <cstdio>
#include <exception>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "core/device_runtime.h"

namespace colrow {
namespace {

// Eager runs in a row that took memory before a region is taken to allocate
// every time (a kernel's fallback that makes its own buffers, say).
constexpr int kColdRunsBeforeGivingUp = 3;
// Graphs kept at once: one per key, and keys differ only by counted targets.
constexpr size_t kMaxGraphs = 8;

}  // namespace

void StepGraph::require_gpu(Device device) {
  if (device.is_cuda()) return;
  throw ConfigError("[train] --cuda-graph captures GPU work, but --device is " + device.str() +
                    ". Use --device cuda, or leave out --cuda-graph.");
}

void StepGraph::require_one_stage(int pipeline_stages) {
  if (pipeline_stages == 1) return;
  throw ConfigError(
      "[train] --cuda-graph captures a micro-batch's whole forward and backward, "
      "but --pp " +
      std::to_string(pipeline_stages) +
      " splits it over stages whose messages wait on the host. Use --pp 1, or "
      "leave out --cuda-graph.");
}

void StepGraph::require_capturable(const Communicator& tp) {
  if (tp.size() == 1 || tp.capturable()) return;
  throw ConfigError(
      "[train] --cuda-graph records the tp collectives, which only NCCL queues "
      "without the host; this tp group of " +
      std::to_string(tp.size()) +
      " ranks is host-staged (ranks share a GPU, or --comm staged). Give each "
      "rank its own GPU with --comm nccl, or leave out --cuda-graph.");
}

StepGraph::StepGraph(Device device, Communicator& tp)
    : device_(device), tp_(tp), flag_(Tensor::zeros({1})) {
  require_gpu(device);
  epoch_ = allocations();
}

StepGraph::~StepGraph() {
  drop_graphs();
}

size_t StepGraph::allocations() const {
  return allocator_for(device_).allocation_count();
}

void StepGraph::drop_graphs() {
  for (auto& [key, graph] : graphs_) device_runtime::destroy_graph(graph);
  graphs_.clear();
}

bool StepGraph::on_any_rank(bool mine) {
  if (tp_.size() == 1) return mine;
  flag_.data()[0] = mine ? 1.0f : 0.0f;
  tp_.all_reduce_max(flag_);  // a host tensor: the group's MPI
  return flag_.data()[0] > 0.0f;
}

void StepGraph::forget_memory() {
  drop_graphs();
  warm_.clear();
  epoch_ = allocations();
}

void StepGraph::stop(const std::string& why) {
  failure_ = why;
  drop_graphs();
  std::fprintf(stderr,
               "colrow: note: --cuda-graph on %s: %s; micro-batches run eagerly from here, with "
               "the same results.\n",
               device_.str().c_str(), why.c_str());
}

void StepGraph::run(const Key& key, const std::function<void()>& region) {
  if (!failure_.empty()) {
    region();
    ++counts_.eager;
    return;
  }
  // Every decision below is taken alike on every tp rank: a graph's NCCL
  // collectives must meet graphs on the other ranks, never eager calls.
  if (on_any_rank(allocations() != epoch_)) forget_memory();  // a buffer may have moved
  const auto found = graphs_.find(key);
  if (found != graphs_.end()) {
    device_runtime::replay(device_.index, found->second);
    ++counts_.replayed;
    return;
  }
  if (warm_.count(key) == 0) {
    region();
    ++counts_.eager;
    if (!on_any_rank(allocations() != epoch_)) {
      warm_.insert(key);
      cold_runs_ = 0;
      return;
    }
    forget_memory();  // this run moved buffers: what was warm may not be
    if (++cold_runs_ == kColdRunsBeforeGivingUp) {
      stop(
          "every micro-batch takes memory from the allocator, so none can be captured "
          "(--attention plain makes buffers per call)");
    }
    return;
  }
  if (graphs_.size() >= kMaxGraphs) drop_graphs();
  device_runtime::Graph graph = nullptr;
  std::string why;
  try {
    device_runtime::begin_capture(device_.index);
    region();  // recorded, not run
    graph = device_runtime::end_capture(device_.index);
  } catch (const std::exception& e) {
    device_runtime::abandon_capture(device_.index);
    why = e.what();
  }
  if (on_any_rank(graph == nullptr)) {
    device_runtime::destroy_graph(graph);
    stop("capturing a micro-batch failed (" +
         (why.empty() ? std::string("on another tp rank") : why) + ")");
    region();
    ++counts_.eager;
    return;
  }
  graphs_[key] = graph;
  ++counts_.captured;
  device_runtime::replay(device_.index, graph);
  ++counts_.replayed;
}

}  // namespace colrow
