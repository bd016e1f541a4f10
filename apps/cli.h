// colrow's command line: every verb and its flags, declared once (name,
// default, help, check) over CLI11, and the checks on each verb's flags alone.
// main() (apps/colrow.cpp) parses and runs the verb; the flag fuzzer
// (tests/fuzz/cli_flags_fuzz.cpp) parses and checks, so this file needs none
// of the kernels or the training code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "bench_comm.h"
#include "bench_decode.h"
#include "bench_mlp.h"
#include "bench_tp_profile.h"
#include "colrow/train/trainer.h"
#include "eval.h"
#include "generate.h"
#include "tokenize.h"

namespace colrow::apps {

// Every verb's options, each filled by its flags.
struct CliOptions {
  TrainOptions train;
  EvalOptions eval;
  GenerateOptions generate;
  TokenizeOptions tokenize;
  MlpBenchOptions bench_mlp;
  DecodeBenchOptions bench_decode;
  CommBenchOptions bench_comm;
  TpProfileOptions bench_tp_profile;
};

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses argv into options(), starting from the defaults each time. Throws
  // CLI::ParseError: a bad flag, or --help (exit code 0; see exit()).
  void parse(int argc, char** argv);
  // The verb parsed (after a parse() that returned): "train", "eval",
  // "generate", "tokenize", "bench mlp", "bench decode", "bench comm" or
  // "bench tp-profile".
  std::string verb() const;
  const CliOptions& options() const { return options_; }
  // Prints --help or a parse error as CLI11 does; returns its exit code.
  int exit(const CLI::ParseError& e) const { return app_.exit(e); }

 private:
  CliOptions options_;  // before app_: the flags write into it
  CLI::App app_;
  CLI::App* bench_ = nullptr;
};

// The checks on each verb's flags alone, at this world size: no file read,
// nothing allocated; ConfigError on a bad value. Each run_* makes them first;
// the flag fuzzer runs them on every command line that parses. (train's are
// run_training's own: ProcessMesh, the preset, the pipeline split.)
void validate(const EvalOptions& options, int world_size);
void validate(const GenerateOptions& options, int world_size);
void validate(const TokenizeOptions& options);
void validate(const MlpBenchOptions& options, int world_size);
void validate(const DecodeBenchOptions& options, int world_size);
void validate(const CommBenchOptions& options);
void validate(const TpProfileOptions& options);

}  // namespace colrow::apps
