// `colrow eval`. Window k feeds tokens [kT, kT + T) and predicts tokens
// [kT + 1, kT + T + 1); every full window counts and every predicted position
// weighs the same. Windows are dealt round-robin over the dp replicas; the
// loss sums are added over dp at the end (in double).
#include "eval.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/data/token_dataset.h"
#include "colrow/data/token_file.h"
#include "colrow/data/token_source.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/runtime/threads.h"
#include "colrow/train/pipeline_runner.h"

namespace colrow::apps {
namespace {

// Every id must index the real vocabulary; checked on every rank over the
// whole file before any work, so all ranks fail alike.
void require_ids_in_vocab(const TokenFile& file, int64_t vocab_size) {
  for (int64_t i = 0; i < file.size(); ++i) {
    const int64_t id = file.token(i);
    if (id >= vocab_size) {
      throw InvalidInputError("[eval] token id (" + std::to_string(id) + ") at position " +
                              std::to_string(i) + " of " + file.path() + " must be < vocab_size (" +
                              std::to_string(vocab_size) +
                              "). Was the file made with this model's tokenizer?");
    }
  }
}

}  // namespace

int run_eval(const EvalOptions& o, const Launch& launch) {
  Communicator& world = launch.world;
  validate(o, world.size());
  const int tp_size = ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world.size());
  const ModelConfig config = load_hf_config(o.model + "/config.json");
  validate(config, tp_size);
  const std::vector<int> stage_layers = pipeline_layer_counts(config.n_layer, o.pp, {});
  if (o.seq_len < 1 || o.seq_len > config.max_position_embeddings) {
    throw ConfigError("[eval] seq_len (" + std::to_string(o.seq_len) +
                      ") must be between 1 and max_position_embeddings (" +
                      std::to_string(config.max_position_embeddings) + ").");
  }
  const Placement placement = resolve_placement(o.device, launch.local_rank);
  const TokenFile file(o.tokens);
  const int64_t windows = (file.size() - 1) / o.seq_len;
  if (windows < 1) {
    throw InvalidInputError("[eval] token file " + o.tokens + " holds " +
                            std::to_string(file.size()) + " tokens, fewer than one window of " +
                            std::to_string(o.seq_len) + " plus the token it predicts. Use a " +
                            "longer file or a smaller --seq-len.");
  }
  require_ids_in_vocab(file, config.vocab_size);
  set_threads(threads_per_rank(o.threads, launch.local_ranks));
  // The whole file is the evaluation set: TokenDataset's validation windows
  // over it are exactly the windows described above.
  const TokenDataset data = TokenDataset::for_evaluation(open_token_source(o.tokens));

  std::optional<MemoryPhase> phase(std::in_place, "communicators");
  ProcessMesh mesh(world, tp_size, o.pp, o.dp, placement.device, placement.comm);
  phase.emplace("model parameters");
  GptModel model(mesh.tp(), config,
                 pipeline_stage(config.n_layer, o.pp, mesh.pp_rank(), stage_layers),
                 /*seed=*/0, /*sequence_parallel=*/false);
  load_checkpoint(model, o.model);
  model.to(placement.device);
  model.set_compute_dtype(placement.dtype);
  phase.emplace("evaluation forward pass (batch " + std::to_string(o.batch) + " x seq " +
                std::to_string(o.seq_len) + ")");

  // The windows pass through the stages (pp = 1: one forward each); the last
  // stage sums the per-token losses in double.
  PipelineRunner runner(model, mesh.pp());
  const double loss_sum =
      runner.evaluate(data.validation_batches(o.batch, mesh.dp_size(), mesh.dp_rank(), o.seq_len))
          .first;
  // Sum over the last stage and the dp replicas in double. Tensors are fp32,
  // so each rank's double sum travels as two floats (hi + lo, exact to ~2^-48
  // relative; zeros on the other stages) and every rank adds the gathered
  // parts in double, in rank order.
  const auto gathered_sum = [](Communicator& group, double value) {
    Tensor part = Tensor::zeros({2});
    part.data()[0] = static_cast<float>(value);
    part.data()[1] = static_cast<float>(value - static_cast<double>(part.data()[0]));
    Tensor parts = Tensor::zeros({2 * static_cast<int64_t>(group.size())});
    group.all_gather(part, parts);
    double total = 0.0;
    for (int64_t i = 0; i < parts.numel(); ++i) total += parts.data()[i];
    return total;
  };
  const double total = gathered_sum(mesh.dp(), gathered_sum(mesh.pp(), loss_sum));
  const int64_t positions = windows * o.seq_len;
  const double loss = total / positions;
  if (world.rank() != 0) return 0;
  if (o.json) {
    nlohmann::json j = {{"loss", loss},         {"perplexity", std::exp(loss)},
                        {"tokens", positions},  {"windows", windows},
                        {"seq_len", o.seq_len}, {"tp", tp_size},
                        {"pp", o.pp},           {"dp", o.dp},
                        {"model", o.model}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "eval %s on %s: %ld windows of %ld tokens (%ld predicted positions), tp %d x pp %d x dp "
        "%d\n",
        o.model.c_str(), o.tokens.c_str(), static_cast<long>(windows), static_cast<long>(o.seq_len),
        static_cast<long>(positions), tp_size, o.pp, o.dp);
    std::printf("  loss %.6f   perplexity %.4f\n", loss, std::exp(loss));
  }
  return 0;
}

}  // namespace colrow::apps
