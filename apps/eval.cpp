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

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/data/token_dataset.h"
#include "colrow/data/token_file.h"
#include "colrow/data/token_source.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/runtime/threads.h"

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
  const int tp_size = o.tp > 0 ? o.tp : std::max(1, world.size() / std::max(1, o.dp));
  ProcessMesh::validate(tp_size, /*pp=*/1, o.dp, world.size());
  const ModelConfig config = load_hf_config(o.model + "/config.json");
  validate(config, tp_size);
  if (o.seq_len < 1 || o.seq_len > config.max_position_embeddings) {
    throw ConfigError("[eval] seq_len (" + std::to_string(o.seq_len) +
                      ") must be between 1 and max_position_embeddings (" +
                      std::to_string(config.max_position_embeddings) + ").");
  }
  if (o.batch < 1) {
    throw ConfigError("[eval] batch (" + std::to_string(o.batch) + ") must be positive.");
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
  set_threads(o.threads > 0 ? o.threads : default_threads_per_rank(launch.local_ranks));
  // The whole file is the evaluation set: TokenDataset's validation windows
  // over it are exactly the windows described above.
  const TokenDataset data = TokenDataset::for_evaluation(open_token_source(o.tokens));

  ProcessMesh mesh(world, tp_size, /*pp=*/1, o.dp, placement.device, placement.comm);
  std::optional<MemoryPhase> phase(std::in_place, "model parameters");
  GptModel model(mesh.tp(), config);
  load_checkpoint(model, o.model);
  model.to(placement.device);
  phase.emplace("evaluation forward pass (batch " + std::to_string(o.batch) + " x seq " +
                std::to_string(o.seq_len) + ")");

  double loss_sum = 0.0;
  for (const Batch& b :
       data.validation_batches(o.batch, mesh.dp_size(), mesh.dp_rank(), o.seq_len)) {
    const CrossEntropyOutput out = model.forward(b.ids, b.targets, b.rows, o.seq_len);
    const Tensor losses = out.losses.to(Device::cpu());  // no copy on the CPU
    for (int64_t i = 0; i < losses.numel(); ++i) loss_sum += losses.data()[i];  // double, in order
  }
  // Sum over the dp replicas in double. Tensors are fp32, so each replica's
  // double sum travels as two floats (hi + lo, exact to ~2^-48 relative) and
  // every rank adds the gathered parts in double.
  Tensor part = Tensor::zeros({2});
  part.data()[0] = static_cast<float>(loss_sum);
  part.data()[1] = static_cast<float>(loss_sum - static_cast<double>(part.data()[0]));
  Tensor parts = Tensor::zeros({2 * static_cast<int64_t>(mesh.dp_size())});
  mesh.dp().all_gather(part, parts);  // every replica's loss sum
  double total = 0.0;
  for (int64_t i = 0; i < parts.numel(); ++i) total += parts.data()[i];
  const int64_t positions = windows * o.seq_len;
  const double loss = total / positions;
  if (world.rank() != 0) return 0;
  if (o.json) {
    nlohmann::json j = {{"loss", loss},         {"perplexity", std::exp(loss)},
                        {"tokens", positions},  {"windows", windows},
                        {"seq_len", o.seq_len}, {"tp", tp_size},
                        {"dp", o.dp},           {"model", o.model}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "eval %s on %s: %ld windows of %ld tokens (%ld predicted positions), tp %d x dp %d\n",
        o.model.c_str(), o.tokens.c_str(), static_cast<long>(windows), static_cast<long>(o.seq_len),
        static_cast<long>(positions), tp_size, o.dp);
    std::printf("  loss %.6f   perplexity %.4f\n", loss, std::exp(loss));
  }
  return 0;
}

}  // namespace colrow::apps
