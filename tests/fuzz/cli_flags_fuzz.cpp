// Fuzzes colrow's command line as main() declares and parses it
// (apps/cli.h's CommandLine: every verb's flags over CLI11, a flag given twice
// taking its last value): the input is a command line, split at white space
// (e.g. "train --tp 2 --lr 3e-4 --pp-layers 1,1", "bench decode --batch 8").
// Values that parse then go through the checks the verb runs on them before
// anything is read or allocated, at several world sizes: each verb's
// validate() (apps/cli.h), the device flags' parsers, and for train
// plan_training, the checks run_training makes first (the mesh, the preset's
// divisibility at that tp, the pipeline split, the tokens of one step, the
// schedule, AdamW).
// Expected for bad input: CLI::ParseError (main turns it into a ConfigError)
// and ConfigError. A finding: a crash, an ASan or UBSan report (an overflow
// in a check of a huge value, say), any other exception, a hang.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli.h"
#include "colrow/core/device.h"
#include "colrow/core/error.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/model_config.h"
#include "colrow/train/training_plan.h"
#include "finding.h"

namespace colrow::fuzz {
namespace {

constexpr int kWorldSizes[] = {1, 2, 3, 4, 8};

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

// Runs one check: refusing the values (ConfigError) is the expected outcome
// of bad flags; anything else escapes to libFuzzer as a finding.
void run_check(const std::function<void()>& check) {
  try {
    check();
  } catch (const ConfigError&) {
  }
}

void check_device(const DeviceOptions& o) {
  run_check([&] { check_comm_kind(parse_comm_kind(o.comm), parse_device(o.device)); });
}

// The checks run_training makes first, on the values as parsed.
void check_train(const TrainOptions& o) {
  const std::vector<std::string> presets = model_preset_names();
  const bool preset = std::find(presets.begin(), presets.end(), o.model) != presets.end();
  for (const int world_size : kWorldSizes) {
    run_check([&] {
      if (preset) {
        plan_training(o, model_preset(o.model), world_size);
        return;
      }
      // A directory, not read here: the mesh alone.
      const int tp = ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world_size);
      ProcessMesh::validate(tp, o.pp, o.dp, world_size);
    });
  }
  check_device(o.device);
}

template <typename Options>
void check_at_world_sizes(const Options& o) {
  for (const int world_size : kWorldSizes) {
    run_check([&] { apps::validate(o, world_size); });
  }
}

void check(const std::string& verb, const apps::CliOptions& o) {
  if (verb == "train") {
    check_train(o.train);
  } else if (verb == "eval") {
    check_at_world_sizes(o.eval);
    check_device(o.eval.device);
  } else if (verb == "generate") {
    check_at_world_sizes(o.generate);
    check_device(o.generate.device);
  } else if (verb == "bench mlp") {
    check_at_world_sizes(o.bench_mlp);
    check_device(o.bench_mlp.device);
  } else if (verb == "bench decode") {
    check_at_world_sizes(o.bench_decode);
    check_device(o.bench_decode.device);
  } else if (verb == "tokenize") {
    run_check([&] { apps::validate(o.tokenize); });
  } else if (verb == "bench comm") {
    run_check([&] { apps::validate(o.bench_comm); });
  } else if (verb == "bench tp-profile") {
    run_check([&] { apps::validate(o.bench_tp_profile); });
  } else {
    report_finding("cli_flags_fuzz", "a verb parsed that the fuzzer does not know: ", verb.c_str());
  }
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  std::vector<std::string> words = fuzz::split_words(data, size);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  // Built once (declaring every flag costs more than parsing); parse()
  // starts each input from the defaults.
  static apps::CommandLine cli;
  try {
    cli.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  fuzz::check(cli.verb(), cli.options());
  return 0;
}
