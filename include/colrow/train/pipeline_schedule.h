// The 1F1B pipeline schedule (PipeDream-Flush, "one forward one backward") as
// pure data: the ordered compute and point-to-point actions one pipeline stage
// performs in a training step. Mirrors Megatron-LM's
// forward_backward_pipelining_without_interleaving; an executor runs the list
// with blocking receives and non-blocking sends, and tests assert it.
#pragma once

#include <string>
#include <vector>

namespace colrow {

// Forward traffic flows stage s -> s + 1 (activations), backward traffic
// s + 1 -> s (activation gradients).
enum class PipelineOp {
  kRecvForward,   // activations of micro_batch from stage - 1 (blocks)
  kForward,       // forward of micro_batch; keeps its activations
  kSendForward,   // activations to stage + 1 (non-blocking)
  kRecvBackward,  // output gradient of micro_batch from stage + 1 (blocks)
  kBackward,      // backward of micro_batch; frees its activations
  kSendBackward,  // input gradient to stage - 1 (non-blocking)
};

struct PipelineAction {
  PipelineOp op;
  int micro_batch;
};

// The actions of stage `stage` (0-based: stage 0 holds the embeddings and has
// no RecvForward/SendBackward; stage stages - 1 holds the loss and has no
// SendForward/RecvBackward) for one step of `micro_batches` micro-batches:
//   warm-up:   w = min(stages - stage - 1, micro_batches) times RF F SF
//   steady:    micro_batches - w times RF j, F j, SF j, RB i, B i, SB i
//   cool-down: w times RB i, B i, SB i
// Every receive sits right before the compute that needs it, and every send is
// issued before the next receive, so the peer is never left waiting on a send
// that sits behind a receive: no deadlock with blocking receives. Any
// micro_batches >= 1 works; fewer than `stages` only widens the bubble.
// InternalError unless stages >= 1, 0 <= stage < stages, micro_batches >= 1.
std::vector<PipelineAction> one_f_one_b(int stages, int stage, int micro_batches);

// Compact form for tests and debug messages: "RF0 F0 SF0 RB0 B0 SB0 ...".
std::string to_string(const std::vector<PipelineAction>& actions);

// The most micro-batches whose forward has run and whose backward has not: the
// activation sets the stage holds at its peak. For one_f_one_b it is
// min(stages - stage, micro_batches), independent of micro_batches once that
// reaches stages: 1F1B's memory advantage over all-forward-then-all-backward.
int max_in_flight(const std::vector<PipelineAction>& actions);

// (stages - 1) / (micro_batches + stages - 1): the idle fraction of each
// stage's time in an ideal 1F1B step where every stage takes the same time
// per forward and per backward and communication is free (Narayanan et al.
// 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", section 2.2.1). 0 for one stage. InternalError unless
// stages >= 1 and micro_batches >= 1.
double pipeline_bubble_share(int stages, int micro_batches);

}  // namespace colrow
