// `colrow generate`. Every rank validates the knobs and the model's config,
// loads its shards (of its pipeline stage's layers with --pp), and runs
// generate() (infer/generator.h); the dp replicas
// compute the same text redundantly (same seed, same draws) and rank 0 prints,
// per prompt, the prompt followed by the completion, bytes as they are, or
// one JSON object per line {prompt, completion, tokens (the new ids),
// stop_reason ("stop" at config.json's eos_token_id unless --ignore-eos,
// "max_new_tokens" or "length"), tp, pp, dp, seed, index (with --prompts)}.
#include "generate.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/data/tokenizer.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/infer/generator.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/runtime/threads.h"

namespace colrow::apps {
namespace {

// Ids past the tokenizer's vocabulary (a model with a larger one) have no
// text; they print as <|id|>.
std::string decode_bytes(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) {
    if (id >= 0 && id < tokenizer.vocab_size()) {
      text += tokenizer.decode({id});
    } else {
      text += "<|" + std::to_string(id) + "|>";
    }
  }
  return text;
}

// --prompt, or the non-empty lines of --prompts (one clear error if unreadable).
std::vector<std::string> prompt_texts(const GenerateOptions& o) {
  if (o.prompts.empty()) return {o.prompt};
  std::ifstream in(o.prompts);
  if (!in) {
    throw InvalidInputError("[generate] cannot read prompts file " + o.prompts + ": " +
                            std::strerror(errno) +
                            ". Give a readable text file, one prompt per "
                            "line.");
  }
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) {
    throw InvalidInputError("[generate] prompts file " + o.prompts +
                            " holds no prompt (every line is empty). Put one prompt per line.");
  }
  return texts;
}

}  // namespace

int run_generate(const GenerateOptions& o, const Launch& launch) {
  Communicator& world = launch.world;
  validate(o, world.size());
  const int tp_size = ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world.size());
  // GPT-2's BPE when the checkpoint has its files, else bytes.
  const std::unique_ptr<Tokenizer> tokenizer_owner = load_tokenizer(o.model);
  const Tokenizer& tokenizer = *tokenizer_owner;
  GenerationOptions generation;
  generation.max_new_tokens = o.max_new_tokens;
  generation.sampling = sampling_options(o);
  generation.seed = o.seed;
  const ModelConfig config = load_hf_config(o.model + "/config.json");
  validate(config, tp_size);
  const std::vector<int> stage_layers = pipeline_layer_counts(config.n_layer, o.pp, {});
  if (!o.ignore_eos) generation.stop_tokens = config.eos_token_ids;
  if (config.vocab_size < tokenizer.vocab_size()) {
    throw ConfigError("[generate] vocab_size (" + std::to_string(config.vocab_size) +
                      ") must be >= the " + tokenizer.name() + " tokenizer's " +
                      std::to_string(tokenizer.vocab_size()) +
                      " ids. Use a model trained with this tokenizer.");
  }
  const std::vector<std::string> texts = prompt_texts(o);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : texts) prompts.push_back(tokenizer.encode(text));
  validate_generation(generation, prompts, config);
  const Placement placement = resolve_placement(o.device, launch.local_rank);
  set_threads(threads_per_rank(o.threads, launch.local_ranks));

  std::optional<MemoryPhase> phase(std::in_place, "communicators");
  ProcessMesh mesh(world, tp_size, o.pp, o.dp, placement.device, placement.comm);
  phase.emplace("model parameters");
  GptModel model(mesh.tp(), config,
                 pipeline_stage(config.n_layer, o.pp, mesh.pp_rank(), stage_layers),
                 /*seed=*/0, /*sequence_parallel=*/false);
  load_checkpoint(model, o.model);
  model.to(placement.device);
  model.set_compute_dtype(placement.dtype);
  phase.emplace("generation (KV cache and activations)");
  const std::vector<Generation> generated =
      generate(model, mesh.tp(), mesh.pp(), prompts, generation);
  phase.reset();

  if (world.rank() != 0) return 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    // The completion's text leaves out the stop token (the ids keep it), as vLLM's does.
    std::vector<int32_t> shown = generated[i].tokens;
    if (generated[i].stop == StopReason::kStopToken) shown.pop_back();
    const std::string completion = decode_bytes(tokenizer, shown);
    const std::string stop = to_string(generated[i].stop);
    if (o.json) {
      nlohmann::json j = {{"prompt", texts[i]},
                          {"completion", completion},
                          {"tokens", generated[i].tokens},
                          {"stop_reason", stop},
                          {"tp", tp_size},
                          {"pp", o.pp},
                          {"dp", o.dp},
                          {"seed", o.seed}};
      if (!o.prompts.empty()) j["index"] = i;
      // Generated bytes need not be valid UTF-8: such bytes become U+FFFD here.
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    } else {
      std::cout << texts[i] << completion << std::endl;
      if (generated[i].stop == StopReason::kLength) {
        std::cout << "[stopped: the model's context of " << config.max_position_embeddings
                  << " tokens is full]" << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace colrow::apps
