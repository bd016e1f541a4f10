// 1F1B schedule (Megatron-LM's forward_backward_pipelining_without_interleaving):
// warm-up forwards, a steady state of one forward and one backward, cool-down
// backwards. Megatron's fused send_forward_recv_backward and
// send_backward_recv_forward are written here as a send followed by a receive.
#include "colrow/train/pipeline_schedule.h"

#include <algorithm>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InternalError("[pipeline_schedule] " + message);
}

const char* prefix(PipelineOp op) {
  switch (op) {
    case PipelineOp::kRecvForward:
      return "RF";
    case PipelineOp::kForward:
      return "F";
    case PipelineOp::kSendForward:
      return "SF";
    case PipelineOp::kRecvBackward:
      return "RB";
    case PipelineOp::kBackward:
      return "B";
    case PipelineOp::kSendBackward:
      return "SB";
  }
  return "?";
}

}  // namespace

std::vector<PipelineAction> one_f_one_b(int stages, int stage, int micro_batches) {
  require(stages >= 1, "stages (" + std::to_string(stages) + ") must be >= 1.");
  require(stage >= 0 && stage < stages, "stage (" + std::to_string(stage) +
                                            ") must lie in [0, stages (" + std::to_string(stages) +
                                            ")).");
  require(micro_batches >= 1,
          "micro_batches (" + std::to_string(micro_batches) + ") must be >= 1.");

  const bool first = stage == 0;
  const bool last = stage == stages - 1;
  // Stage s must run stages - s - 1 forwards ahead before the first gradient
  // can come back from the last stage; fewer if the step has fewer micro-batches.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;

  std::vector<PipelineAction> actions;
  actions.reserve(6 * static_cast<size_t>(micro_batches));
  auto forward = [&](int j) {
    if (!first) actions.push_back({PipelineOp::kRecvForward, j});
    actions.push_back({PipelineOp::kForward, j});
    if (!last) actions.push_back({PipelineOp::kSendForward, j});
  };
  auto backward = [&](int i) {
    if (!last) actions.push_back({PipelineOp::kRecvBackward, i});
    actions.push_back({PipelineOp::kBackward, i});
    if (!first) actions.push_back({PipelineOp::kSendBackward, i});
  };

  for (int j = 0; j < warmup; ++j) forward(j);
  // Steady state: forward warmup + i, then backward i. Each send is issued
  // before this stage blocks on its next receive, so nothing a neighbour waits
  // for is held back behind that wait.
  for (int i = 0; i < steady; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int i = steady; i < micro_batches; ++i) backward(i);
  return actions;
}

std::string to_string(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) {
    if (!out.empty()) out += ' ';
    out += prefix(a.op);
    out += std::to_string(a.micro_batch);
  }
  return out;
}

int max_in_flight(const std::vector<PipelineAction>& actions) {
  int in_flight = 0;
  int peak = 0;
  for (const PipelineAction& a : actions) {
    if (a.op == PipelineOp::kForward) peak = std::max(peak, ++in_flight);
    if (a.op == PipelineOp::kBackward) --in_flight;
  }
  return peak;
}

double pipeline_bubble_share(int stages, int micro_batches) {
  require(stages >= 1, "stages (" + std::to_string(stages) + ") must be >= 1.");
  require(micro_batches >= 1,
          "micro_batches (" + std::to_string(micro_batches) + ") must be >= 1.");
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace colrow
