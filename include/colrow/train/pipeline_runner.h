// PipelineRunner: one pipeline stage's share of a training step or an
// evaluation. It runs the 1F1B schedule (train/pipeline_schedule.h) over the
// micro-batches: activations go forward and their gradients backward as
// point-to-point messages of [boundary_rows, d_model] between the matching tp
// ranks of neighbouring stages (tag kActivations, kGradients). Each micro-batch
// in flight needs its own activations, so the stage keeps replicas of its model
// that share the parameters (GptModel::make_replica): min(pp - stage, m) in
// all, 1F1B's bound. With pp = 1 the same code runs forward, backward,
// forward, backward, ... without communication, as gradient accumulation.
// With tied word embeddings the first and last stages each hold the table;
// train_step sums their gradients, so the two copies take the same update.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "colrow/data/token_dataset.h"
#include "colrow/dist/communicator.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/train/step_graph.h"

namespace colrow {

class PipelineRunner {
 public:
  static constexpr int kActivations = 0;  // tag: stage s -> s + 1
  static constexpr int kGradients = 1;    // tag: stage s + 1 -> s

  // `model` is this rank's stage (model.stage().index == pp.rank(), count ==
  // pp.size()). Collective over pp: the stages holding tied embeddings form
  // their group here.
  PipelineRunner(GptModel& model, Communicator& pp);

  // Forward and backward of micro-batches 0 .. micro_batches-1 (`batch(j)`;
  // every stage reads the ids or targets it needs), accumulating every
  // gradient; then the tied embeddings' gradients are summed over the first
  // and last stage. Returns the sum of the micro-batches' mean losses on the
  // last stage, 0 elsewhere. `on_grads_ready`, when set, hears the last
  // micro-batch's backward report the gradients it finishes
  // (GptModel::set_on_grads_ready): the step's final values, except the
  // tied embeddings', which are summed afterwards and never reported.
  double train_step(int micro_batches, const std::function<Batch(int)>& batch,
                    const GptModel::GradsReady& on_grads_ready = {});

  // --cuda-graph (train/step_graph.h): each micro-batch's forward and
  // backward is staged, then run through a StepGraph, replayed once warm.
  // ConfigError off a GPU or at pp > 1 (a stage's sends and receives wait on
  // the host); train_step then refuses on_grads_ready (a graph's backward
  // reports nothing, so the dp reduction follows it).
  void use_cuda_graphs(bool on);
  const StepGraph* step_graph() const { return graph_.get(); }

  // Forward only. Returns {sum of per-token losses (in double, token by
  // token), tokens counted} on the
  // last stage, {0, 0} elsewhere.
  std::pair<double, double> evaluate(const std::vector<Batch>& batches);

  // The last train_step on this stage when timed (pp > 1; zeros otherwise):
  // its wall time, and the part spent computing (forwards and backwards). The
  // rest is waiting for a neighbour, plus the transfers themselves.
  // pipeline_bubble_share() below turns every stage's timing into the
  // schedule's bubble. On a GPU the host clock sees a forward only once it is
  // synchronized, which costs the overlap of host and device: time there
  // only the steps that are profiled.
  void time_steps(bool on) { time_steps_ = on; }
  struct StepTiming {
    double seconds = 0.0;
    double busy_seconds = 0.0;
  };
  const StepTiming& last_step_timing() const { return timing_; }

 private:
  struct Slot {
    GptModel* model = nullptr;
    Tensor input;                                           // the received activations
    std::vector<std::unique_ptr<PendingCollective>> sends;  // of this slot's buffers
    void finish_sends();
  };
  // The slot micro_batch's activations live in: its own, or a free one
  // (a new replica when every slot is in flight).
  Slot& slot_for(int micro_batch);
  void sum_tied_embedding_grads();
  // train_step at pp = 1 through graph_: each micro-batch's losses into
  // step_losses_ at its loss_offset, its counted targets into `counted`.
  void run_graphed(const std::vector<Batch>& batches, const std::vector<int64_t>& loss_offset,
                   std::vector<int64_t>& counted);
  // The last stage's step loss: each micro-batch's mean (mean_loss) read from
  // step_losses_, added in micro-batch order.
  double step_loss(const std::vector<int64_t>& loss_offset, const std::vector<int64_t>& counted);

  GptModel& model_;
  Communicator& pp_;
  std::unique_ptr<Communicator> embedding_group_;  // first and last stage, tied embeddings
  std::vector<std::unique_ptr<GptModel>> replicas_;
  std::vector<Slot> slots_;
  std::vector<int> slot_of_;  // micro-batch -> slot, -1 when not in flight
  Tensor grad_input_;         // the received gradient, used by the backward right after
  Tensor step_losses_;        // [the step's tokens]: every micro-batch's losses (last stage)
  StepTiming timing_;
  bool time_steps_ = true;
  std::unique_ptr<StepGraph> graph_;
  Tensor graph_losses_;  // the loss layer's per-token losses, where each region leaves them
};

// The bubble of one step, measured as the 1F1B formula counts it: the share
// of the pipeline's time (its slowest stage's) that stages spend not
// computing, 1 - mean(busy) / max(seconds) over `timings` (every stage's,
// any order). Equal stages give (pp - 1) / (m + pp - 1); uneven ones more.
double pipeline_bubble_share(const std::vector<PipelineRunner::StepTiming>& timings);

}  // namespace colrow
