// `colrow train`: the loop, read top to bottom. Everything is validated before
// anything is allocated; every rank computes the same decisions (continue,
// stop, save) from all-reduced values, so no rank waits alone.
#include "colrow/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/data/text_corpus.h"
#include "colrow/data/token_dataset.h"
#include "colrow/data/token_source.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/vocab_parallel_cross_entropy.h"
#include "colrow/runtime/threads.h"
#include "colrow/train/adamw.h"
#include "colrow/train/injected_faults.h"
#include "colrow/train/lr_schedule.h"
#include "colrow/train/pipeline_runner.h"
#include "colrow/train/pipeline_schedule.h"
#include "colrow/train/train_checkpoint.h"
#include "colrow/train/training_log.h"
#include "colrow/train/training_plan.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "train/step_profile.h"

namespace colrow {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};  // the last stop signal received
extern "C" void on_interrupt(int sig) {
  g_signal = sig;
}

// The same value on every rank: the mean over the dp replicas.
double dp_mean(Communicator& dp, double value) {
  Tensor t = Tensor::full({1}, static_cast<float>(value));
  dp.all_reduce_sum(t);  // the replicas' values
  return static_cast<double>(t.data()[0]) / dp.size();
}

// Sequence parallelism splits batch x seq token rows over tp; a last, short
// validation batch may not split. Rows of ignored targets make it split
// without changing the loss (the mean counts the real targets only).
void pad_rows_for_sequence_parallel(Batch& b, int tp) {
  while ((b.rows * b.seq_len) % tp != 0) {
    b.ids.insert(b.ids.end(), b.seq_len, 0);
    b.targets.insert(b.targets.end(), b.seq_len, kIgnoreIndex);
    ++b.rows;
  }
}

// The last pipeline stage's value, on every stage.
double from_last_stage(Communicator& pp, double value) {
  if (pp.size() == 1) return value;
  Tensor t = Tensor::full({1}, pp.rank() == pp.size() - 1 ? static_cast<float>(value) : 0.0f);
  pp.all_reduce_sum(t);  // [pp] the loss lives on the last stage
  return t.data()[0];
}

// Mean loss over the held-out windows (capped), on every rank.
double validation_loss(PipelineRunner& runner, bool sequence_parallel, const TokenDataset& data,
                       ProcessMesh& mesh, const TrainOptions& o) {
  std::vector<Batch> batches =
      data.validation_batches(o.batch, mesh.dp_size(), mesh.dp_rank(), o.seq_len, o.eval_windows);
  if (sequence_parallel) {
    for (Batch& b : batches) pad_rows_for_sequence_parallel(b, mesh.tp_size());
  }
  const auto [sum, count] = runner.evaluate(batches);
  Tensor totals = Tensor::from_vector({2}, {static_cast<float>(sum), static_cast<float>(count)});
  mesh.pp().all_reduce_sum(totals);  // the last stage's; zeros from the others
  mesh.dp().all_reduce_sum(totals);  // loss sums and token counts of the replicas
  return totals.data()[0] / std::max(1.0f, totals.data()[1]);
}

// Forward + backward FLOPs per token, as llm.c and the PyTorch peer count
// them: 6 N for the matmuls of N parameters, 6 L d T for attention's scores
// and weighted sums (L layers, width d, context T).
double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return 6.0 * static_cast<double>(c.parameter_count()) +
         6.0 * c.n_layer * static_cast<double>(c.d_model) * static_cast<double>(seq_len);
}

std::string placement_text(const Placement& p, int threads) {
  const std::string mixed = p.dtype == DType::kBF16 ? ", bf16 compute (fp32 masters)" : "";
  if (p.device.is_cpu()) return std::to_string(threads) + " thread(s)/rank" + mixed;
  return p.device.str() + (p.tf32 ? " (TF32 allowed)" : " (fp32)") + mixed;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

}  // namespace

int run_training(const TrainOptions& o, const Launch& launch) {
  Communicator& world = launch.world;
  // ---- everything checked before anything is allocated, identically on every rank
  const ModelConfig config =
      resolve_model_config(o.model);  // a directory: fresh weights of its shape
  const TrainingPlan plan = plan_training(o, config, world.size());
  const int tp_size = plan.tp, zero = plan.adam.zero;
  const int64_t tokens_per_step = plan.tokens_per_step;
  // Before the corpus is read: a GPU that cannot be used fails in a second.
  const Placement placement = resolve_placement(o.device, launch.local_rank);
  const TokenDataset data(o.data.empty() ? std::make_unique<TextCorpus>()
                                         : open_token_source(o.data));
  data.require_windows(o.seq_len);
  data.require_ids_below(config.vocab_size);
  const FaultInjector faults = FaultInjector::from_environment(world.rank());
  const int threads = threads_per_rank(o.threads, launch.local_ranks);
  set_threads(threads);

  if (o.cuda_graph) StepGraph::require_gpu(placement.device);

  // ---- the run
  std::optional<MemoryPhase> phase(std::in_place, "communicators");
  ProcessMesh mesh(world, tp_size, o.pp, o.dp, placement.device, placement.comm);
  if (o.cuda_graph) StepGraph::require_capturable(mesh.tp());
  if (!o.out.empty()) make_directory(o.out, world);  // not writable: fail now, not at the end
  phase.emplace("model parameters and gradients");
  const PipelineStage stage =
      pipeline_stage(config.n_layer, o.pp, mesh.pp_rank(), plan.stage_layers);
  GptModel model(mesh.tp(), config, stage, o.seed, o.sequence_parallel);
  if (!o.init.empty()) load_checkpoint(model, o.init);
  model.to(placement.device);
  phase.emplace("AdamW moments");
  AdamW optimizer(mesh.tp(), mesh.dp(), model.parameters(), plan.adam,
                  o.pp > 1 ? &mesh.pp() : nullptr);
  phase.reset();
  PipelineRunner runner(model, mesh.pp());
  runner.use_cuda_graphs(o.cuda_graph);
  TrainState state;
  state.seed = o.seed;
  if (!o.resume.empty()) state = load_training_checkpoint(model, optimizer, o.resume);
  model.set_compute_dtype(placement.dtype);  // bf16: copies of the loaded or initial values
  model.set_recompute_activation(o.recompute_activation);
  model.set_overlap_tp_backward(o.overlap_tp_backward);
  model.set_logits_chunk_bytes(o.logits_chunk_mib << 20);
  TrainingLog log(world.rank() == 0, o.metrics, o.steps);

  const int64_t local_params = model.local_parameter_count();
  // The output head's chunks of a micro-batch's tokens (GptModel::set_logits_chunk_bytes).
  const int64_t head_tokens = o.batch * o.seq_len;
  const int64_t head_chunk_rows = model.logits_chunk_tokens(head_tokens);
  const int64_t head_chunks = (head_tokens + head_chunk_rows - 1) / head_chunk_rows;
  std::ostringstream about;
  about << "colrow train: " << to_string(config.family) << " (" << o.model << "), "
        << config.parameter_count() << " parameters, " << config.n_layer << " layers, d_model "
        << config.d_model << ", " << config.n_head << " heads (" << config.n_kv_head
        << " kv), vocab " << config.vocab_size << " (padded " << model.padded_vocab_size() << ")\n"
        << "  mesh tp " << tp_size << " x pp " << o.pp << " x dp " << o.dp << ", ZeRO-" << zero
        << (plan.adam.grad_reduce_dtype == DType::kBF16 && o.dp > 1 ? ", grads reduced in bf16"
                                                                    : "")
        << (plan.adam.overlap_grad_reduce && o.dp > 1
                ? ", grads reduced during backward in " + std::to_string(optimizer.bucket_count()) +
                      " bucket(s)"
            : optimizer.bucket_count() > 1
                ? ", grads reduced in " + std::to_string(optimizer.bucket_count()) + " bucket(s)"
                : "")
        << (o.sequence_parallel ? ", sequence parallel" : "")
        << (o.recompute_activation ? ", MLP activation recomputed" : "")
        << (head_chunks > 1 ? ", output head in " + std::to_string(head_chunks) + " chunks of " +
                                  std::to_string(head_chunk_rows) + " tokens"
                            : "")
        << (!o.overlap_tp_backward && tp_size > 1 ? ", tp sums of backward not overlapped" : "")
        << (o.cuda_graph ? ", micro-batches replayed as CUDA graphs" : "") << ", "
        << placement_text(placement, threads) << "; per rank: " << local_params
        << " parameters = " << mib(4.0 * local_params) << " weights + " << mib(4.0 * local_params)
        << " grads + " << mib(8.0 * optimizer.slice_size()) << " AdamW moments\n"
        << "  data " << (o.data.empty() ? std::string(kDefaultCorpus) : o.data) << ": "
        << data.train_size() << " train / " << data.val_size() << " validation tokens; "
        << tokens_per_step << " tokens per step (batch " << o.batch << " x seq " << o.seq_len
        << " x accum " << o.grad_accum << " x dp " << o.dp << ")\n"
        << "  unigram baseline (validation, nats): "
        << data.unigram_cross_entropy(config.vocab_size) << "\n  steps " << state.step << " -> "
        << o.steps << ", lr " << o.lr << " (warmup " << plan.schedule.warmup_steps << ", cosine to "
        << plan.schedule.min_lr << ")";
  if (!o.resume.empty()) about << ", resumed from " << resolve_checkpoint_dir(o.resume);
  log.line(about.str());

  // Ctrl-C (SIGINT), a polite kill (SIGTERM) or SIGUSR1, which mpirun
  // forwards to every rank: finish the step, save, stop.
  // Without SA_RESTART, so a write blocked on a launcher that stopped
  // reading (mpirun after Ctrl-C stops relaying output, then sends SIGTERM)
  // returns instead of hanging the rank.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &action, nullptr);
  const auto start = Clock::now();
  const std::vector<Parameter*> params = model.parameters();
  const double flops_per_token = training_flops_per_token(config, o.seq_len);
  const double peak = peak_flops(placement);
  StepProfile profile(o.profile);
  GptModel::GradsReady grads_ready;
  if (plan.adam.overlap_grad_reduce && o.dp > 1) {
    grads_ready = [&optimizer](const std::vector<size_t>& ready) { optimizer.grads_ready(ready); };
  }
  while (state.step < o.steps) {
    profile.begin_step(state.step + 1, o.steps);
    // The bubble needs each forward's and backward's time: free on the CPU;
    // on a GPU a synchronization each, so there only in profiled steps.
    const bool time_pipeline = o.pp > 1 && (placement.device.is_cpu() || kernels::op_profiling());
    runner.time_steps(time_pipeline);
    const auto t0 = Clock::now();
    const double lr = lr_at(plan.schedule, state.step);
    const MemoryPhase step_phase("train step " + std::to_string(state.step + 1));
    phase.emplace(o.grad_accum == 1 ? std::string("forward and backward pass")
                                    : "forward and backward passes of " +
                                          std::to_string(o.grad_accum) + " micro-batches");
    // Before backward, which adds to it: a gradient may cross dp during backward.
    faults.poison_gradient_if_due(state.step + 1, params);
    // 1F1B over the micro-batches (pp = 1: forward, backward, forward, ...);
    // with overlap, the last backward starts the buckets' dp reductions
    double loss = runner.train_step(
        static_cast<int>(o.grad_accum),
        [&](int micro) {
          return data.train_batch(state.seed, state.step * o.grad_accum + micro, o.batch,
                                  mesh.dp_size(), mesh.dp_rank(), o.seq_len);
        },
        grads_ready);
    faults.kill_if_due(FaultKind::kKillInStep, state.step + 1);
    faults.fail_if_due(state.step + 1);
    phase.emplace("optimizer step");
    // dp reduce (the rest of it), mean over micro-batches, clip, update; no
    // update anywhere when the norm is not finite
    const double grad_norm = optimizer.step(static_cast<float>(lr),
                                            static_cast<int>(o.grad_accum));  // compute copies too
    phase.reset();
    optimizer.zero_grad();
    ++state.step;
    loss = dp_mean(mesh.dp(), from_last_stage(mesh.pp(), loss) / o.grad_accum);
    // The norm is the same on every rank, so every rank decides alike.
    const bool skipped = !std::isfinite(grad_norm);
    if (skipped && !o.skip_nonfinite) {
      throw InvalidInputError(
          "[train] the gradient norm (" + std::to_string(grad_norm) + ") at step " +
          std::to_string(state.step) + " is not finite; training stopped before applying it" +
          (o.out.empty() ? std::string(".") : ", the last checkpoint in " + o.out + " is kept.") +
          " Lower --lr, or pass --skip-nonfinite to skip such steps.");
    }
    if (skipped) ++state.skipped_steps;
    if (!skipped && !std::isfinite(loss)) {
      throw InvalidInputError(
          "[train] loss (" + std::to_string(loss) + ") at step " + std::to_string(state.step) +
          " is not finite; training stopped" +
          (o.out.empty() ? std::string(".") : ", the last checkpoint in " + o.out + " is kept.") +
          " Lower --lr or raise --warmup.");
    }
    synchronize(placement.device);  // the step's GPU work is done: time it whole
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string profile_report = profile.end_step(seconds * 1e3);
    if (!profile_report.empty()) log.line(profile_report);
    StepMetrics m;
    m.step = state.step;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_ms = seconds * 1e3;
    m.skipped = skipped;
    m.skipped_steps = state.skipped_steps;
    m.tokens_per_s = tokens_per_step / seconds;
    if (time_pipeline) {  // every rank's time computing and in the schedule
      const PipelineRunner::StepTiming& mine = runner.last_step_timing();
      Tensor all = Tensor::empty({2 * static_cast<int64_t>(world.size())});
      world.all_gather(Tensor::from_vector({2}, {static_cast<float>(mine.seconds),
                                                 static_cast<float>(mine.busy_seconds)}),
                       all);
      std::vector<PipelineRunner::StepTiming> timings(world.size());
      for (int r = 0; r < world.size(); ++r) {
        timings[r] = {all.data()[2 * r], all.data()[2 * r + 1]};
      }
      m.pipeline_bubble = pipeline_bubble_share(timings);
      m.pipeline_bubble_ideal = pipeline_bubble_share(o.pp, static_cast<int>(o.grad_accum));
    }
    m.gflops_per_s = flops_per_token * m.tokens_per_s / world.size() / 1e9;
    if (peak > 0.0) m.mfu = m.gflops_per_s * 1e9 / peak;
    Tensor rss_all = Tensor::empty({world.size()});
    world.all_gather(Tensor::full({1}, static_cast<float>(peak_rss_mib())),
                     rss_all);  // every rank's
    for (int64_t r = 0; r < world.size(); ++r) {
      m.peak_rss_mib_per_rank.push_back(rss_all.data()[r]);
      m.peak_rss_mib = std::max(m.peak_rss_mib, m.peak_rss_mib_per_rank.back());
    }
    // Tensors alone, without the allocator's cache and the program: what
    // activation-memory formulas predict (docs/performance.md).
    Tensor host_peak = Tensor::full(
        {1}, static_cast<float>(allocator_for(Device::cpu()).peak_bytes_in_use() / 1048576.0));
    world.all_reduce_max(host_peak);
    m.peak_host_tensor_mib = host_peak.data()[0];
    if (!placement.device.is_cpu()) {
      const double peak_bytes = allocator_for(placement.device).peak_bytes_in_use();
      Tensor device_peak = Tensor::full({1}, static_cast<float>(peak_bytes / (1024.0 * 1024.0)));
      world.all_reduce_max(device_peak);  // the fullest GPU's
      m.peak_device_mib = device_peak.data()[0];
    }
    const bool last = state.step == o.steps;
    if (last || (o.eval_every > 0 && state.step % o.eval_every == 0)) {
      const MemoryPhase validation("validation");
      m.val_loss = validation_loss(runner, model.sequence_parallel(), data, mesh, o);
    }
    // The signal, if any rank got one: every rank stops after the same step.
    // SIGINT/SIGTERM: the launcher may no longer relay output, so the rest
    // of the run is silent on stdout (the metrics file still gets the step).
    const int signal_here = g_signal;
    Tensor signalled = Tensor::full({1}, static_cast<float>(signal_here));
    world.all_reduce_max(signalled);  // a stop signal on any rank stops every rank
    const int sig = static_cast<int>(signalled.data()[0]);
    if (sig == SIGINT || sig == SIGTERM) log.silence();
    const bool stop = sig != 0 || (o.stop_after > 0 && state.step == o.stop_after);
    log.step(m, std::chrono::duration<double>(Clock::now() - start).count());
    if (!o.out.empty() && (last || stop || (o.save_every > 0 && state.step % o.save_every == 0))) {
      const MemoryPhase saving("checkpoint save");
      const std::string dir =
          save_training_checkpoint(model, optimizer, state, o.out, mesh, plan.save_dtype, faults);
      if (last || stop) log.line("saved " + dir + " (also " + o.out + "/latest)");
    }
    if (stop) {
      log.line("stopped after step " + std::to_string(state.step) + " of " +
               std::to_string(o.steps) + "; continue with --resume " +
               (o.out.empty() ? std::string("(no --out: nothing saved)") : o.out) + ".");
      break;
    }
  }
  if (const StepGraph* graph = runner.step_graph()) {
    const StepGraph::Counts& c = graph->counts();
    log.line("cuda graphs: " + std::to_string(c.replayed) + " micro-batches replayed (" +
             std::to_string(c.captured) + " captured), " + std::to_string(c.eager) +
             " run eagerly" +
             (graph->failure().empty() ? "" : "; capturing stopped: " + graph->failure()));
  }
  return 0;
}

}  // namespace colrow
