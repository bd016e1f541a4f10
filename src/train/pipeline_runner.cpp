// One pipeline stage's training step and evaluation: the schedule's actions,
// run in order.
#include "colrow/train/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "colrow/core/device.h"
#include "colrow/core/error.h"
#include "colrow/train/pipeline_schedule.h"

namespace colrow {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

void PipelineRunner::Slot::finish_sends() {
  for (auto& send : sends) send->wait();
  sends.clear();
}

PipelineRunner::PipelineRunner(GptModel& model, Communicator& pp) : model_(model), pp_(pp) {
  const PipelineStage& stage = model.stage();
  if (stage.index != pp.rank() || stage.count != pp.size()) {
    throw InternalError("[pipeline] stage " + std::to_string(stage.index) + " of " +
                        std::to_string(stage.count) + " runs on pp rank " +
                        std::to_string(pp.rank()) + " of " + std::to_string(pp.size()));
  }
  if (pp.size() > 1 && model.config().tie_word_embeddings) {
    const bool holds_table = stage.is_first() || stage.is_last();
    embedding_group_ = pp.split(holds_table ? 0 : 1, pp.rank(), "embedding");
  }
  slots_.push_back(Slot{&model_, {}, {}});
}

PipelineRunner::Slot& PipelineRunner::slot_for(int micro_batch) {
  if (slot_of_[micro_batch] >= 0) return slots_[slot_of_[micro_batch]];
  std::vector<bool> busy(slots_.size(), false);
  for (int s : slot_of_) {
    if (s >= 0) busy[s] = true;
  }
  size_t free = 0;
  while (free < slots_.size() && busy[free]) ++free;
  if (free == slots_.size()) {  // one more micro-batch in flight than ever before
    replicas_.push_back(model_.make_replica());
    slots_.push_back(Slot{replicas_.back().get(), {}, {}});
  }
  slot_of_[micro_batch] = static_cast<int>(free);
  Slot& slot = slots_[free];
  slot.finish_sends();  // its buffers are about to be overwritten
  return slot;
}

double PipelineRunner::train_step(int micro_batches, const std::function<Batch(int)>& batch,
                                  const GptModel::GradsReady& on_grads_ready) {
  const PipelineStage& stage = model_.stage();
  const int prev = pp_.rank() - 1, next = pp_.rank() + 1;
  std::vector<Batch> batches;
  for (int j = 0; j < micro_batches; ++j) batches.push_back(batch(j));
  slot_of_.assign(micro_batches, -1);
  std::vector<const Tensor*> sent(micro_batches, nullptr);  // forward outputs, then input grads
  // The last stage keeps each micro-batch's per-token losses on its device
  // and reads them once every backward is queued: no wait for the GPU
  // between a forward and its backward.
  std::vector<int64_t> loss_offset(micro_batches + 1, 0), counted(micro_batches, 0);
  for (int j = 0; j < micro_batches; ++j) {
    loss_offset[j + 1] = loss_offset[j] + batches[j].rows * batches[j].seq_len;
  }
  if (stage.is_last()) ensure_shape(step_losses_, {loss_offset.back()}, model_.device());
  if (graph_) {
    if (on_grads_ready) {
      throw InternalError(
          "[pipeline] a captured backward reports no gradients: "
          "--cuda-graph runs without on_grads_ready");
    }
    run_graphed(batches, loss_offset, counted);
    return step_loss(loss_offset, counted);
  }
  const bool timed = time_steps_ && pp_.size() > 1;
  const auto step_start = Clock::now();
  timing_ = StepTiming{};
  for (const PipelineAction& action : one_f_one_b(pp_.size(), pp_.rank(), micro_batches)) {
    const int j = action.micro_batch;
    const Batch& b = batches[j];
    const int64_t rows = model_.boundary_rows(b.rows, b.seq_len);
    const bool computes = action.op == PipelineOp::kForward || action.op == PipelineOp::kBackward;
    const auto action_start = Clock::now();
    switch (action.op) {
      case PipelineOp::kRecvForward: {
        Tensor& input = slot_for(j).input;
        // Activations and their gradients cross in the compute dtype (the blocks
        // keep their input's dtype, forward and backward); bf16 travels as bf16.
        ensure_shape(input, {rows, model_.config().d_model}, model_.device(),
                     model_.compute_dtype());
        pp_.recv(input, prev, kActivations);
        break;
      }
      case PipelineOp::kForward: {
        Slot& slot = slot_for(j);
        const GptModel::StageForward out = slot.model->forward_stage(
            b.ids, stage.is_first() ? nullptr : &slot.input, b.targets, b.rows, b.seq_len);
        if (stage.is_last()) {  // a copy in stream order (InternalError on a size mismatch)
          step_losses_.slice(0, loss_offset[j], loss_offset[j + 1] - loss_offset[j])
              .copy_from(out.loss.losses);
          counted[j] = out.loss.counted;
        }
        sent[j] = out.output;
        break;
      }
      case PipelineOp::kSendForward:
        slots_[slot_of_[j]].sends.push_back(pp_.start_send(*sent[j], next, kActivations));
        break;
      case PipelineOp::kRecvBackward:
        ensure_shape(grad_input_, {rows, model_.config().d_model}, model_.device(),
                     model_.compute_dtype());
        pp_.recv(grad_input_, next, kGradients);
        break;
      case PipelineOp::kBackward: {
        GptModel& model = *slots_[slot_of_[j]].model;
        // The last backward finishes the gradients: their reduction may start.
        const bool reports = on_grads_ready && j == micro_batches - 1;
        if (reports) model.set_on_grads_ready(on_grads_ready);
        sent[j] = model.backward_stage(stage.is_last() ? nullptr : &grad_input_);
        if (reports) model.set_on_grads_ready({});
        if (stage.is_first()) slot_of_[j] = -1;  // its activations are spent
        break;
      }
      case PipelineOp::kSendBackward:
        slots_[slot_of_[j]].sends.push_back(pp_.start_send(*sent[j], prev, kGradients));
        slot_of_[j] = -1;
        break;
    }
    if (timed && computes) {
      synchronize(model_.device());  // a GPU's queued kernels: their time, not the next wait's
      timing_.busy_seconds += seconds_since(action_start);
    }
  }
  for (Slot& slot : slots_) slot.finish_sends();
  if (timed) timing_.seconds = seconds_since(step_start);
  sum_tied_embedding_grads();
  return stage.is_last() ? step_loss(loss_offset, counted) : 0.0;
}

double PipelineRunner::step_loss(const std::vector<int64_t>& loss_offset,
                                 const std::vector<int64_t>& counted) {
  // Each micro-batch's mean as the loss layer defines it (mean_loss), added
  // in micro-batch order: the same bits as asking each forward's output.
  const Tensor losses = step_losses_.to(Device::cpu());  // waits for the last backward's GPU work
  double loss = 0.0;
  for (size_t j = 0; j < counted.size(); ++j) {
    loss +=
        mean_loss(losses.slice(0, loss_offset[j], loss_offset[j + 1] - loss_offset[j]), counted[j]);
  }
  return loss;
}

void PipelineRunner::use_cuda_graphs(bool on) {
  if (!on) {
    graph_.reset();
    return;
  }
  StepGraph::require_one_stage(pp_.size());
  graph_ = std::make_unique<StepGraph>(model_.device(), model_.tp());
}

void PipelineRunner::run_graphed(const std::vector<Batch>& batches,
                                 const std::vector<int64_t>& loss_offset,
                                 std::vector<int64_t>& counted) {
  for (size_t j = 0; j < batches.size(); ++j) {
    const Batch& b = batches[j];
    // Once capturing has stopped every micro-batch runs eagerly, and its
    // forward checks and uploads the inputs itself: no staging twice.
    const bool staged = graph_->failure().empty();
    if (staged) counted[j] = model_.stage_inputs(b.ids, b.targets, b.rows, b.seq_len);
    graph_->run({b.rows, b.seq_len, counted[j]}, [&] {
      // A replay runs no region: graph_losses_ stays the loss layer's buffer
      // from the last run, one buffer for every key while graphs are kept (a
      // new shape allocates, which drops them all).
      const GptModel::StageForward out =
          model_.forward_stage(b.ids, nullptr, b.targets, b.rows, b.seq_len);
      graph_losses_ = out.loss.losses;
      if (!staged) counted[j] = out.loss.counted;
      model_.backward_stage(nullptr);
    });
    step_losses_.slice(0, loss_offset[j], loss_offset[j + 1] - loss_offset[j])
        .copy_from(graph_losses_);  // in stream order
  }
}

void PipelineRunner::sum_tied_embedding_grads() {
  Parameter* table = model_.word_embeddings();
  if (!embedding_group_ || table == nullptr || embedding_group_->size() < 2) return;
  // The first stage's gradient (from the embedding lookups) plus the last's
  // (from the output head): what the one tied weight gets at pp = 1.
  embedding_group_->all_reduce_sum(table->grad);
}

double pipeline_bubble_share(const std::vector<PipelineRunner::StepTiming>& timings) {
  double busy = 0.0, makespan = 0.0;
  for (const PipelineRunner::StepTiming& t : timings) {
    busy += t.busy_seconds;
    makespan = std::max(makespan, t.seconds);
  }
  if (timings.empty() || makespan <= 0.0) return 0.0;
  return std::max(0.0, 1.0 - busy / static_cast<double>(timings.size()) / makespan);
}

std::pair<double, double> PipelineRunner::evaluate(const std::vector<Batch>& batches) {
  const PipelineStage& stage = model_.stage();
  Slot& slot = slots_.front();
  double sum = 0.0, count = 0.0;
  for (const Batch& b : batches) {
    slot.finish_sends();  // the output buffer is about to be overwritten
    if (!stage.is_first()) {
      ensure_shape(slot.input, {model_.boundary_rows(b.rows, b.seq_len), model_.config().d_model},
                   model_.device(), model_.compute_dtype());
      pp_.recv(slot.input, pp_.rank() - 1, kActivations);
    }
    const GptModel::StageForward out =
        slot.model->forward_stage(b.ids, stage.is_first() ? nullptr : &slot.input, b.targets,
                                  b.rows, b.seq_len, GptModel::Pass::kEvaluate);
    if (stage.is_last()) {
      sum += loss_sum(out.loss.losses);  // double, in token order
      count += static_cast<double>(out.loss.counted);
    } else {
      slot.sends.push_back(pp_.start_send(*out.output, pp_.rank() + 1, kActivations));
    }
  }
  slot.finish_sends();
  return {sum, count};
}

}  // namespace colrow
