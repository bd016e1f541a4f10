// train's checks on its flags alone (training_plan.h).
#include "colrow/train/training_plan.h"

#include <string>

#include "colrow/core/error.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/train/step_graph.h"

namespace colrow {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError("[train] " + message);
}

// PyTorch DDP's bucket_cap_mb (25 MiB), in fp32 gradients.
constexpr int64_t kDefaultOverlapBucketSize = (int64_t{25} << 20) / 4;

// --logits-chunk-mib's largest value: 1 TiB, far past any device, in bytes
// without overflow.
constexpr int64_t kMaxLogitsChunkMib = int64_t{1} << 20;

}  // namespace

TrainingPlan plan_training(const TrainOptions& o, const ModelConfig& config, int world_size) {
  TrainingPlan plan;
  plan.tp = ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world_size);
  ProcessMesh::validate(plan.tp, o.pp, o.dp, world_size);
  validate(config, plan.tp);
  plan.stage_layers = pipeline_layer_counts(config.n_layer, o.pp, o.pp_layers);
  require(o.steps >= 1, "steps (" + std::to_string(o.steps) + ") must be at least 1.");
  require(o.seq_len >= 1 && o.seq_len <= config.max_position_embeddings,
          "seq_len (" + std::to_string(o.seq_len) + ") must be between 1 and the model's " +
              "max_position_embeddings (" + std::to_string(config.max_position_embeddings) + ").");
  require(o.batch >= 1, "batch (" + std::to_string(o.batch) + ") must be at least 1.");
  require(o.grad_accum >= 1,
          "grad_accum (" + std::to_string(o.grad_accum) + ") must be at least 1.");
  int64_t& tokens_per_step = plan.tokens_per_step;  // without overflow
  require(!__builtin_mul_overflow(o.batch, o.seq_len, &tokens_per_step) &&
              !__builtin_mul_overflow(tokens_per_step, o.grad_accum, &tokens_per_step) &&
              !__builtin_mul_overflow(tokens_per_step, int64_t{o.dp}, &tokens_per_step),
          "batch x seq_len x grad_accum x dp (" + std::to_string(o.batch) + " x " +
              std::to_string(o.seq_len) + " x " + std::to_string(o.grad_accum) + " x " +
              std::to_string(o.dp) + ") must fit in 64 bits: the tokens of one step.");
  require(!o.sequence_parallel || (o.batch * o.seq_len) % plan.tp == 0,
          "batch x seq_len (" + std::to_string(o.batch) + " x " + std::to_string(o.seq_len) +
              ") must be divisible by tp (" + std::to_string(plan.tp) +
              ") with --sequence-parallel: each rank holds batch x seq_len / tp token rows.");
  require(o.save_every >= 0 && o.eval_every >= 0 && o.eval_windows >= 0 && o.stop_after >= 0 &&
              o.profile >= 0,
          "save_every, eval_every, eval_windows, stop_after and profile must not be negative.");
  require(o.logits_chunk_mib >= 0 && o.logits_chunk_mib <= kMaxLogitsChunkMib,
          "logits_chunk_mib (" + std::to_string(o.logits_chunk_mib) + ") must be from 0 (all " +
              "tokens' logits at once) to " + std::to_string(kMaxLogitsChunkMib) +
              " (1 TiB). The default, 256, keeps GPT-2's bf16 logits to 2.6k tokens a chunk.");
  // --cuda-graph (train/step_graph.h): what a captured micro-batch cannot do.
  if (o.cuda_graph) StepGraph::require_one_stage(o.pp);
  require(!o.cuda_graph || o.profile == 0,
          "--cuda-graph replays a micro-batch as one launch, which --profile cannot time "
          "operation by operation. Profile without --cuda-graph.");
  require(!o.cuda_graph || !o.overlap_grad_reduce || o.dp == 1,
          "--cuda-graph and --overlap-grad-reduce exclude each other: a captured backward "
          "cannot start the dp reductions as it goes. Leave out one of them.");
  require(o.resume.empty() || o.init.empty(),
          "resume (" + o.resume + ") and init (" + o.init +
              ") exclude each other: --resume "
              "continues a run, --init starts a new one from a model.");
  plan.save_dtype = parse_dtype("--save-dtype", o.save_dtype);
  LrSchedule& schedule = plan.schedule;
  schedule.lr = o.lr;
  schedule.min_lr = o.min_lr >= 0.0 ? o.min_lr : o.lr / 10.0;
  schedule.warmup_steps = o.warmup >= 0 ? o.warmup : o.steps / 20;
  schedule.total_steps = o.steps;
  validate(schedule);
  AdamWConfig& adam = plan.adam;
  adam.weight_decay = static_cast<float>(o.weight_decay);
  adam.grad_clip = static_cast<float>(o.grad_clip);
  adam.zero = o.zero >= 0 ? o.zero : (o.dp > 1 ? 1 : 0);
  adam.grad_reduce_dtype = parse_dtype("--grad-reduce-dtype", o.grad_reduce_dtype);
  adam.overlap_grad_reduce = o.overlap_grad_reduce;
  require(o.ddp_bucket_size >= -1,
          "ddp_bucket_size (" + std::to_string(o.ddp_bucket_size) +
              ") must be a count of elements, or 0 for one bucket of every gradient.");
  adam.bucket_size = o.ddp_bucket_size >= 0  ? o.ddp_bucket_size
                     : o.overlap_grad_reduce ? kDefaultOverlapBucketSize
                                             : 0;
  validate(adam);
  return plan;
}

}  // namespace colrow
