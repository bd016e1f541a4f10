// StepGraph: a micro-batch's forward and backward as one CUDA graph
// (`colrow train --cuda-graph`), as Megatron's --enable-cuda-graph and
// torch.cuda.graphs capture a training step: one launch per micro-batch in
// place of hundreds, where launch overhead shows (small batches, small
// models). A graph replays the launches it captured with their arguments, so
// the region must queue the same work on the same memory for every batch:
//  - It runs warm: it takes nothing from the allocator (every buffer is the
//    model's own, at fixed addresses: tests/train/step_allocations_test.cpp)
//    and waits for nothing (device_runtime::host_wait_count). A region is
//    captured only after an eager run of its key allocated nothing, and every
//    graph is dropped once the allocator hands out memory again (a buffer may
//    then have moved: an evaluation's shorter batch, say). Three eager runs
//    in a row that allocate end the attempt (a fallback kernel that makes
//    its own buffers).
//  - Its data is staged before it runs (GptModel::stage_inputs): ids, the
//    embedding gradient's plan and the targets go to fixed device buffers,
//    and no launch depends on their values (kernels/cuda/embedding.cu).
//  - A graph is kept per Key: what the queued work depends on besides the
//    data (tests/train/step_graph_test.cpp traces it on the CPU). Data whose
//    ignored targets vary makes a key per count; at most 8 graphs are kept.
//  - Its collectives are NCCL's, queued on the compute stream (a group of one
//    has none); host-staged ones wait on the host and cannot be captured
//    (the trainer refuses them with --cuda-graph).
//  - The tp ranks decide together (one host all-reduce of a flag over the
//    tp group per decision): NCCL requires that a collective is captured on
//    every rank or on none, so a graph never meets an eager peer.
// A capture that fails on any tp rank (an allocation, an upload or a host
// wait inside it) says why in one line on stderr and leaves every later
// region to run eagerly, on every tp rank: the same results at the eager
// speed. Replays give the same bits as eager runs
// (tests/train/step_graph_cuda_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "colrow/core/device.h"
#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

class StepGraph {
 public:
  // ConfigError unless `device` is a GPU. `tp`: the model's tensor-parallel
  // group, whose ranks replay together.
  StepGraph(Device device, Communicator& tp);

  // What --cuda-graph cannot capture, one ConfigError each (value, rule,
  // fix), for the trainer to refuse before it allocates: a model off the GPU,
  // pipeline stages (their messages wait on the host), and tp collectives
  // that are not capturable (host-staged).
  static void require_gpu(Device device);
  static void require_one_stage(int pipeline_stages);
  static void require_capturable(const Communicator& tp);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // A micro-batch's size and the targets that count (the loss gradient's
  // 1 / counted): all a warm region's launches depend on besides the data.
  struct Key {
    int64_t rows = 0, seq = 0, counted = 0;
    bool operator<(const Key& o) const {
      return std::tie(rows, seq, counted) < std::tie(o.rows, o.seq, o.counted);
    }
  };
  // Runs `region` (queues its work): eagerly, or captured into the key's
  // graph and replayed, or by replaying that graph without calling it.
  void run(const Key& key, const std::function<void()>& region);

  // How the regions ran so far.
  struct Counts {
    int64_t eager = 0, captured = 0, replayed = 0;
  };
  const Counts& counts() const { return counts_; }
  // Why capturing stopped, or "" while it goes on.
  const std::string& failure() const { return failure_; }

 private:
  void drop_graphs();
  // Drops the graphs and what was warm, from this allocation count on.
  void forget_memory();
  // Gives up capturing, with a line saying why.
  void stop(const std::string& why);
  size_t allocations() const;
  // Whether `mine` holds on any rank of tp (the same answer on every one).
  bool on_any_rank(bool mine);

  Device device_;
  Communicator& tp_;
  Tensor flag_;                  // [1] on the host: the agreement's operand
  std::map<Key, void*> graphs_;  // device_runtime::Graph
  std::set<Key> warm_;           // keys whose last eager run allocated nothing
  size_t epoch_ = 0;             // allocation count the graphs and warm_ hold for
  int cold_runs_ = 0;            // eager runs in a row that allocated
  Counts counts_;
  std::string failure_;
};

}  // namespace colrow
