// colrow: the command-line tool. Verbs: train, eval, generate, tokenize,
// bench mlp|decode|comm|tp-profile.
// Run under mpirun; every rank parses the same flags and validates the same configuration, so a
// bad flag or size fails on every rank alike with one clear line each.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "bench_comm.h"
#include "bench_decode.h"
#include "bench_mlp.h"
#include "bench_tp_profile.h"
#include "colrow/core/error.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/runtime/blas_kernels.h"
#include "device_flags.h"
#include "eval.h"
#include "generate.h"
#include "tokenize.h"
#include "train.h"

namespace {

constexpr double kFailureAgreementSeconds = 5.0;

// Prints the error on this rank, then ends the job: cleanly when every rank
// failed alike (a configuration error), by abort when some rank is elsewhere
// (possibly waiting in a collective), so no rank is ever left hanging.
int fail(colrow::MpiSession& mpi, const std::string& message) {
  colrow::Communicator& world = mpi.world();
  // One write per line: unbuffered stderr would interleave the ranks' pieces.
  const std::string line = "[rank " + std::to_string(world.rank()) + "/" +
                           std::to_string(world.size()) + "] " + message + "\n";
  std::cerr << line << std::flush;
  if (world.all_ranks_failing(kFailureAgreementSeconds)) return 1;
  world.abort(1);
  return 1;  // not reached: abort ends the process
}

void add_bench_mlp(CLI::App& bench, colrow::apps::MlpBenchOptions& o) {
  CLI::App* mlp = bench.add_subcommand(
      "mlp",
      "Verify, then time the tensor-parallel MLP (tp = world size / dp) against plain sgemm");
  mlp->add_option("--d-model", o.d_model, "Model width d_model")->capture_default_str();
  mlp->add_option("--tokens", o.tokens, "Tokens per step (batch x sequence)")
      ->capture_default_str();
  mlp->add_option("--ffn-hidden", o.ffn_hidden_size, "Hidden units (0 = 4 x d_model)")
      ->capture_default_str();
  mlp->add_option("--activation", o.activation,
                  "gelu (GPT-2, tanh form), gelu-erf (exact) or swiglu (LLaMA)")
      ->capture_default_str();
  mlp->add_flag("!--no-bias", o.bias, "Projections without bias");
  mlp->add_option("--tp", o.tp, "Tensor-parallel degree (0 = world size / dp)")
      ->capture_default_str();
  mlp->add_option("--dp", o.dp, "Data-parallel degree")->capture_default_str();
  mlp->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  mlp->add_option("--min-seconds", o.min_seconds, "Minimum timed seconds per measurement")
      ->capture_default_str();
  mlp->add_option("--min-iterations", o.min_iterations, "Minimum timed iterations")
      ->capture_default_str();
  mlp->add_option("--seed", o.seed, "Seed of weights and inputs")->capture_default_str();
  mlp->add_flag("--json", o.json, "Print one JSON object instead of text");
  colrow::apps::add_device_flags(*mlp, o.device);
}

void add_bench_comm(CLI::App& bench, colrow::apps::CommBenchOptions& o) {
  CLI::App* comm = bench.add_subcommand(
      "comm",
      "Time and check all_reduce, all_gather and reduce_scatter over every rank "
      "(nccl-tests' algbw and busbw), shared memory beside Open MPI");
  comm->add_option("--min-bytes", o.min_bytes, "Smallest size in bytes")->capture_default_str();
  comm->add_option("--max-bytes", o.max_bytes, "Largest size in bytes")->capture_default_str();
  comm->add_option("--step-factor", o.step_factor, "Size multiplier between rows")
      ->capture_default_str();
  comm->add_option("--ops", o.ops, "Collectives, comma-separated")->capture_default_str();
  comm->add_option("--comm", o.comm, "auto (shm and mpi side by side), shm or mpi")
      ->capture_default_str();
  comm->add_option("--iterations", o.iterations, "Timed calls per size")->capture_default_str();
  comm->add_option("--warmup", o.warmup, "Untimed calls per size first")->capture_default_str();
  comm->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  comm->add_flag("--json", o.json, "Print one JSON object instead of text");
}

void add_bench_tp_profile(CLI::App& bench, colrow::apps::TpProfileOptions& o) {
  CLI::App* profile = bench.add_subcommand(
      "tp-profile",
      "Measure t_comm / t_compute of the tensor-parallel MLP forward for R = 1, 2, 4, ... and "
      "d_model, beside the cost model (R-1)/d * lambda_compute / (4 lambda_comm)");
  profile->add_option("--min-d", o.min_d, "Smallest d_model (doubling up to --max-d)")
      ->capture_default_str();
  profile->add_option("--max-d", o.max_d, "Largest d_model")->capture_default_str();
  profile->add_option("--tokens", o.tokens, "Tokens per forward (batch x sequence)")
      ->capture_default_str();
  profile->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  profile->add_option("--iterations", o.iterations, "Timed iterations per measurement (median)")
      ->capture_default_str();
  profile->add_option("--comm", o.comm, "auto (shared memory on one node), shm or mpi")
      ->capture_default_str();
  profile->add_option("--out-json", o.out_json, "JSON file rank 0 writes (\"\" = none)")
      ->capture_default_str();
  profile->add_option("--out-svg", o.out_svg, "SVG plot rank 0 writes (\"\" = none)")
      ->capture_default_str();
  profile->add_flag("--json", o.json, "Print the JSON to stdout instead of the table");
}

void add_bench_decode(CLI::App& bench, colrow::apps::DecodeBenchOptions& o) {
  CLI::App* decode = bench.add_subcommand(
      "decode", "Time prefill and KV-cache decoding (tp = world size) against the bandwidth floor");
  decode->add_option("--model", o.model, "Preset (random weights) or checkpoint directory")
      ->capture_default_str();
  decode->add_option("--prompt-len", o.prompt_len, "Prompt tokens per sequence")
      ->capture_default_str();
  decode->add_option("--new-tokens", o.new_tokens, "Decoding steps")->capture_default_str();
  decode->add_option("--batch", o.batch, "Sequences decoded together")->capture_default_str();
  decode->add_option("--tp", o.tp, "Tensor-parallel degree (0 = world size)")
      ->capture_default_str();
  decode->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  decode->add_option("--seed", o.seed, "Seed of weights and prompts")->capture_default_str();
  decode->add_flag("--json", o.json, "Print one JSON object instead of text");
  colrow::apps::add_device_flags(*decode, o.device);
}

void add_eval(CLI::App& app, colrow::apps::EvalOptions& o) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Mean cross-entropy and perplexity of a checkpoint over a token file");
  eval->add_option("--model", o.model, "Checkpoint directory (config.json + model.safetensors)")
      ->required();
  eval->add_option("--tokens", o.tokens, "Token file: uint16 ids, raw or with llm.c's header")
      ->required();
  eval->add_option("--seq-len", o.seq_len, "Window length T")->required();
  eval->add_option("--batch", o.batch, "Windows per forward pass per dp rank")
      ->capture_default_str();
  eval->add_option("--tp", o.tp, "Tensor-parallel degree (0 = world size / (pp x dp))")
      ->capture_default_str();
  eval->add_option("--dp", o.dp, "Data-parallel degree")->capture_default_str();
  eval->add_option("--pp", o.pp,
                   "Pipeline stages (layers split evenly; windows pass stage to stage)")
      ->capture_default_str();
  eval->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  eval->add_flag("--json", o.json, "Print one JSON object instead of text");
  colrow::apps::add_device_flags(*eval, o.device);
}

void add_generate(CLI::App& app, colrow::apps::GenerateOptions& o) {
  CLI::App* gen = app.add_subcommand(
      "generate", "Continue prompts with a checkpoint and a KV cache, at any tp x pp x dp");
  gen->add_option("--model", o.model, "Checkpoint directory (config.json + model.safetensors)")
      ->required();
  gen->add_option("--prompt", o.prompt,
                  "Text to continue (tokenized with the checkpoint's tokenizer, else bytes)");
  gen->add_option("--prompts", o.prompts,
                  "File of prompts, one per line, decoded together (instead of --prompt)");
  gen->add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate")
      ->capture_default_str();
  gen->add_option("--temperature", o.temperature, "Softmax temperature (0 = greedy)")
      ->capture_default_str();
  gen->add_option("--top-k", o.top_k, "Sample among the k most likely tokens (0 = off)")
      ->capture_default_str();
  gen->add_option("--top-p", o.top_p, "Nucleus: smallest set with probability >= p (1 = off)")
      ->capture_default_str();
  gen->add_option("--seed", o.seed, "Seed of the draws")->capture_default_str();
  gen->add_flag("--ignore-eos", o.ignore_eos,
                "Do not stop at config.json's eos_token_id (stop_reason \"stop\")");
  gen->add_option("--tp", o.tp, "Tensor-parallel degree (0 = world size / (pp x dp))")
      ->capture_default_str();
  gen->add_option("--pp", o.pp,
                  "Pipeline stages (layers split evenly; each step passes stage to stage)")
      ->capture_default_str();
  gen->add_option("--dp", o.dp, "Data-parallel degree (replicas generate the same text)")
      ->capture_default_str();
  gen->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  gen->add_flag("--json", o.json, "Print one JSON object instead of text");
  colrow::apps::add_device_flags(*gen, o.device);
}

void add_tokenize(CLI::App& app, colrow::apps::TokenizeOptions& o) {
  CLI::App* tok = app.add_subcommand(
      "tokenize", "Turn a text file into a token file (GPT-2 BPE or bytes) for train and eval");
  tok->add_option("--tokenizer", o.tokenizer,
                  "Directory: tokenizer.json or vocab.json + merges.txt (else bytes)")
      ->required();
  tok->add_option("--input", o.input, "Text file, plain or gzip")->required();
  tok->add_option("--output", o.output, "Token file to write (replaced atomically)")->required();
  tok->add_option("--format", o.format, "raw (uint16 ids) or llmc (llm.c's header + uint16)")
      ->capture_default_str();
  tok->add_flag("--json", o.json, "Print one JSON object instead of text");
}

}  // namespace

int main(int argc, char** argv) {
  colrow::select_blas_kernels(argv);  // may restart the program once, before MPI starts
  colrow::MpiSession mpi(&argc, &argv);
  CLI::App app{"colrow: Megatron-style tensor-parallel Transformers in C++ (run under mpirun)"};
  app.require_subcommand(1);
  // A flag given twice takes its last value, as argparse does, so scripts can
  // override a shared set of flags by appending.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that verify, then time");
  bench->require_subcommand(1);
  colrow::apps::MlpBenchOptions mlp_options;
  add_bench_mlp(*bench, mlp_options);
  colrow::apps::DecodeBenchOptions decode_options;
  add_bench_decode(*bench, decode_options);
  colrow::apps::CommBenchOptions comm_options;
  add_bench_comm(*bench, comm_options);
  colrow::apps::TpProfileOptions tp_profile_options;
  add_bench_tp_profile(*bench, tp_profile_options);
  colrow::apps::EvalOptions eval_options;
  add_eval(app, eval_options);
  colrow::apps::GenerateOptions generate_options;
  add_generate(app, generate_options);
  colrow::apps::TokenizeOptions tokenize_options;
  add_tokenize(app, tokenize_options);
  colrow::TrainOptions train_options;
  colrow::apps::add_train(app, train_options);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {  // --help: printed once, by rank 0
        if (mpi.world().rank() == 0) app.exit(e);
        return 0;
      }
      throw colrow::ConfigError("[cli] " + std::string(e.what()) + ". Run 'colrow --help'.");
    }
    const colrow::Launch launch{mpi.world(), mpi.local_rank(), mpi.local_ranks()};
    if (bench->got_subcommand("mlp")) return colrow::apps::run_mlp_bench(mlp_options, launch);
    if (bench->got_subcommand("comm")) return colrow::apps::run_comm_bench(comm_options, launch);
    if (bench->got_subcommand("tp-profile")) {
      return colrow::apps::run_tp_profile_bench(tp_profile_options, launch);
    }
    if (bench->got_subcommand("decode")) {
      return colrow::apps::run_decode_bench(decode_options, launch);
    }
    if (app.got_subcommand("eval")) return colrow::apps::run_eval(eval_options, launch);
    if (app.got_subcommand("generate")) {
      return colrow::apps::run_generate(generate_options, launch);
    }
    if (app.got_subcommand("train")) return colrow::run_training(train_options, launch);
    if (app.got_subcommand("tokenize")) return colrow::apps::run_tokenize(tokenize_options, launch);
    return 0;
  } catch (const std::exception& e) {
    return fail(mpi, e.what());
  }
}
