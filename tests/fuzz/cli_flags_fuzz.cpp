// Fuzzes the CLI's flags as `colrow train` declares them (apps/train.cpp's
// add_train, with device_flags.h) and parses them (CLI11, under main()'s
// policy: a flag given twice takes its last value): the input is a command
// line, split at white space (e.g. "train --tp 2 --lr 3e-4 --pp-layers 1,1").
// Values that parse then go through the pure checks train runs on them before
// anything is allocated: the mesh (ProcessMesh::resolve_tp and validate, at
// several world sizes), the preset's divisibility rules at that tp
// (validate(config, tp)) and the pipeline split (pipeline_layer_counts).
// Expected for bad input: CLI::ParseError (main turns it into a ConfigError)
// and ConfigError. A finding: a crash, an ASan or UBSan report (an overflow
// in a check of a huge value, say), any other exception, a hang.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/model_config.h"
#include "colrow/nn/pipeline_stage.h"
#include "train.h"

namespace colrow::fuzz {
namespace {

std::vector<std::string> split_words(const uint8_t* data, size_t size) {
  std::vector<std::string> words = {"colrow"};
  std::string word;
  for (size_t i = 0; i <= size; ++i) {
    const char c = i < size ? static_cast<char>(data[i]) : ' ';
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  return words;
}

// The checks run_training makes first, on the values as parsed.
void check_train(const TrainOptions& o) {
  const std::vector<std::string> presets = model_preset_names();
  const bool preset = std::find(presets.begin(), presets.end(), o.model) != presets.end();
  for (const int world_size : {1, 2, 3, 4, 8}) {
    try {
      const int tp = ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world_size);
      ProcessMesh::validate(tp, o.pp, o.dp, world_size);
      if (!preset) continue;  // a directory: not read here
      const ModelConfig config = model_preset(o.model);
      validate(config, tp);
      pipeline_layer_counts(config.n_layer, o.pp, o.pp_layers);
    } catch (const ConfigError&) {
    }
  }
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  std::vector<std::string> words = fuzz::split_words(data, size);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  // As apps/colrow.cpp's main() sets the app up. Built once (building it
  // costs more than parsing); parse() clears what the last input parsed, and
  // the options the flags write to start from their defaults again.
  static TrainOptions options;
  static CLI::App app{"colrow"};
  static CLI::App* const train = [] {
    app.require_subcommand(1);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    return apps::add_train(app, options);
  }();
  options = TrainOptions();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  if (train->parsed()) fuzz::check_train(options);
  return 0;
}
