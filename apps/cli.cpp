// colrow's command line: the flags of every verb and the checks on them.
#include "cli.h"

#include <stdexcept>

#include "colrow/core/error.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/runtime/threads.h"
#include "device_flags.h"

namespace colrow::apps {
namespace {

// The benchmarks' ranges (mlp, tp-profile): beyond them a run would not fit a
// node's memory or time, and a typo (a missing "k") is caught before it starts.
constexpr int64_t kMaxD = 65536;
constexpr int64_t kMaxTokens = int64_t{1} << 20;
constexpr int kMaxIterations = 1000;

// --tokens of bench mlp and bench tp-profile.
void check_bench_tokens(int64_t tokens) {
  if (tokens < 1 || tokens > kMaxTokens) {
    throw ConfigError("[bench] tokens (" + std::to_string(tokens) + ") must be in [1, " +
                      std::to_string(kMaxTokens) + "]. Pass e.g. --tokens 2048.");
  }
}

void add_train(CLI::App& app, TrainOptions& o) {
  CLI::App* t = app.add_subcommand("train",
                                   "Train a GPT-2 or LLaMA-style model with tensor x pipeline x "
                                   "data parallelism (under mpirun)");
  t->add_option("--model", o.model,
                "Preset (gpt2-tiny, gpt2-124m, llama-tiny, ...) or a directory "
                "with config.json (fresh weights of that shape)")
      ->capture_default_str();
  t->add_option(
      "--data", o.data,
      "Token file (.bin, llm.c header) or text file (.txt, .gz); default: the Jargon File");
  t->add_option("--steps", o.steps, "Optimizer steps, counted from the start (also on --resume)")
      ->capture_default_str();
  t->add_option("--stop-after", o.stop_after,
                "Save and stop after this step, as if interrupted (0 = run to --steps)");
  t->add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str();
  t->add_option("--batch", o.batch, "Sequences per dp rank per micro-batch")->capture_default_str();
  t->add_option("--grad-accum", o.grad_accum, "Micro-batches per step")->capture_default_str();
  t->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  t->add_option("--min-lr", o.min_lr, "Final learning rate of the cosine (default lr / 10)");
  t->add_option("--warmup", o.warmup, "Linear warmup steps (default steps / 20)");
  t->add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (matrices only)")
      ->capture_default_str();
  t->add_option("--grad-clip", o.grad_clip, "Clip the global gradient norm (0 = off)")
      ->capture_default_str();
  t->add_option("--seed", o.seed, "Seed of initialization and data order")->capture_default_str();
  t->add_option("--tp", o.tp, "Tensor-parallel degree (0 = world size / (pp x dp))")
      ->capture_default_str();
  t->add_option("--pp", o.pp,
                "Pipeline stages (1F1B over the --grad-accum micro-batches; world = tp x pp x dp)")
      ->capture_default_str();
  t->add_option("--pp-layers", o.pp_layers,
                "Layers per pipeline stage, e.g. 5,7 (default: as even as it goes)")
      ->delimiter(',');
  t->add_option("--dp", o.dp, "Data-parallel degree")->capture_default_str();
  t->add_option("--zero", o.zero,
                "1: shard AdamW state over dp (ZeRO-1; default when dp > 1), 0: not")
      ->check(CLI::IsMember({0, 1}));
  t->add_option("--grad-reduce-dtype", o.grad_reduce_dtype,
                "What gradients cross the dp ranks as: fp32, or bf16 for half the bytes (each "
                "rank's gradients and their sum rounded to bf16; docs/architecture.md)")
      ->capture_default_str();
  t->add_flag("--overlap-grad-reduce", o.overlap_grad_reduce,
              "Start each gradient bucket's dp reduction while backward goes on (Megatron's "
              "flag; dp > 1)");
  t->add_option("--ddp-bucket-size", o.ddp_bucket_size,
                "Gradient elements per dp bucket (0 = one bucket; default: one bucket, or 25 "
                "MiB of fp32 with --overlap-grad-reduce)");
  t->add_option("--out", o.out, "Run directory for checkpoints (step-N/ and latest)");
  t->add_option("--save-every", o.save_every, "Save every N steps (0 = only at the end)")
      ->capture_default_str();
  t->add_option("--save-dtype", o.save_dtype,
                "dtype of each checkpoint's model.safetensors: fp32, or bf16 for a half-size "
                "model to serve (the fp32 master weights are kept beside it, so resume is exact)")
      ->capture_default_str();
  t->add_option("--eval-every", o.eval_every, "Validation loss every N steps (0 = at the end)")
      ->capture_default_str();
  t->add_option("--eval-windows", o.eval_windows, "Validation windows per evaluation (0 = all)")
      ->capture_default_str();
  t->add_option("--metrics", o.metrics, "Append one JSON object per step to this file");
  t->add_option("--resume", o.resume, "Continue the run in this directory (or step directory)");
  t->add_option("--init", o.init, "Start from this Hugging Face checkpoint (fine-tuning)");
  t->add_flag("--skip-nonfinite", o.skip_nonfinite,
              "Skip a step whose gradient holds a NaN or Inf on any rank (no update, counted in "
              "the log and metrics) instead of stopping the run");
  t->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  t->add_flag("--sequence-parallel", o.sequence_parallel,
              "Megatron's sequence parallelism: norms and residual adds on batch x seq / tp "
              "token rows (all-gather and reduce-scatter instead of all-reduce)");
  t->add_flag("--recompute-activation", o.recompute_activation,
              "Make the MLP's activation (GELU, SwiGLU) again in backward instead of keeping "
              "it: one [tokens, ffn/tp] activation per layer less, for one more activation pass "
              "(llm.c's recompute=1; same losses)");
  t->add_flag("--overlap-tp-comm,!--no-overlap-tp-comm", o.overlap_tp_backward,
              "Sum each tensor-parallel region's input gradient over tp (and re-gather its "
              "input with --sequence-parallel) during the weight-gradient GEMMs, as Megatron's "
              "asynchronous tp all-reduce does (default); --no-overlap-tp-comm waits for each "
              "where it starts (same losses)");
  t->add_option("--logits-chunk-mib", o.logits_chunk_mib,
                "Most MiB of [tokens, vocab/tp] logits the output head holds at once: a larger "
                "micro-batch runs the head and the loss in token chunks, each chunk's head "
                "gradients taken as its loss is known (Liger's fused linear cross-entropy; 0: all "
                "tokens at once)")
      ->capture_default_str();
  t->add_flag("--cuda-graph", o.cuda_graph,
              "Capture each micro-batch's forward and backward as a CUDA graph once warm and "
              "replay it: one launch instead of hundreds (GPUs with NCCL or tp 1, pp 1; same "
              "losses)");
  t->add_option("--profile", o.profile,
                "Time every kernel operation over N steps after the first and print each "
                "phase's and operation's share of the step and the FLOP/s or GB/s it achieved")
      ->capture_default_str();
  add_device_flags(*t, o.device);
}

void add_bench_mlp(CLI::App& bench, MlpBenchOptions& o) {
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
  mlp->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  mlp->add_option("--min-seconds", o.min_seconds, "Minimum timed seconds per measurement")
      ->capture_default_str();
  mlp->add_option("--min-iterations", o.min_iterations, "Minimum timed iterations")
      ->capture_default_str();
  mlp->add_option("--seed", o.seed, "Seed of weights and inputs")->capture_default_str();
  mlp->add_flag("--json", o.json, "Print one JSON object instead of text");
  add_device_flags(*mlp, o.device);
}

void add_bench_comm(CLI::App& bench, CommBenchOptions& o) {
  CLI::App* comm = bench.add_subcommand(
      "comm",
      "Time and check all_reduce, all_gather and reduce_scatter over every rank "
      "(nccl-tests' algbw and busbw), shared memory beside Open MPI");
  comm->add_option("--min-bytes", o.min_bytes, "Smallest size in bytes")->capture_default_str();
  comm->add_option("--max-bytes", o.max_bytes, "Largest size in bytes")->capture_default_str();
  comm->add_option("--step-factor", o.step_factor, "Size multiplier between rows")
      ->capture_default_str();
  comm->add_option("--ops", o.ops,
                   "Collectives, comma-separated (default: all_reduce,all_gather,reduce_scatter; "
                   "all_reduce,reduce_scatter in bf16)");
  comm->add_option("--dtype", o.dtype,
                   "fp32, or bf16: the sums with bf16 on the wire (--grad-reduce-dtype bf16's)")
      ->capture_default_str();
  comm->add_option("--comm", o.comm, "auto (shm and mpi side by side), shm or mpi")
      ->capture_default_str();
  comm->add_option("--iterations", o.iterations, "Timed calls per size")->capture_default_str();
  comm->add_option("--warmup", o.warmup, "Untimed calls per size first")->capture_default_str();
  comm->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  comm->add_flag("--json", o.json, "Print one JSON object instead of text");
}

void add_bench_tp_profile(CLI::App& bench, TpProfileOptions& o) {
  CLI::App* profile = bench.add_subcommand(
      "tp-profile",
      "Measure t_comm / t_compute of the tensor-parallel MLP forward for R = 1, 2, 4, ... and "
      "d_model, beside the cost model (R-1)/d * lambda_compute / (4 lambda_comm)");
  profile->add_option("--min-d", o.min_d, "Smallest d_model (doubling up to --max-d)")
      ->capture_default_str();
  profile->add_option("--max-d", o.max_d, "Largest d_model")->capture_default_str();
  profile->add_option("--tokens", o.tokens, "Tokens per forward (batch x sequence)")
      ->capture_default_str();
  profile->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
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

void add_bench_decode(CLI::App& bench, DecodeBenchOptions& o) {
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
  decode->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  decode->add_option("--seed", o.seed, "Seed of weights and prompts")->capture_default_str();
  decode->add_flag("--json", o.json, "Print one JSON object instead of text");
  add_device_flags(*decode, o.device);
}

void add_eval(CLI::App& app, EvalOptions& o) {
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
  eval->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  eval->add_flag("--json", o.json, "Print one JSON object instead of text");
  add_device_flags(*eval, o.device);
}

void add_generate(CLI::App& app, GenerateOptions& o) {
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
  gen->add_option("--threads", o.threads, kThreadsOptionHelp)->capture_default_str();
  gen->add_flag("--json", o.json, "Print one JSON object instead of text");
  add_device_flags(*gen, o.device);
}

void add_tokenize(CLI::App& app, TokenizeOptions& o) {
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

CommandLine::CommandLine()
    : app_("colrow: Megatron-style tensor-parallel Transformers in C++ (run under mpirun)") {
  app_.require_subcommand(1);
  // A flag given twice takes its last value, as argparse does, so scripts can
  // override a shared set of flags by appending.
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bench_ = app_.add_subcommand("bench", "Benchmarks that verify, then time");
  bench_->require_subcommand(1);
  add_bench_mlp(*bench_, options_.bench_mlp);
  add_bench_decode(*bench_, options_.bench_decode);
  add_bench_comm(*bench_, options_.bench_comm);
  add_bench_tp_profile(*bench_, options_.bench_tp_profile);
  add_eval(app_, options_.eval);
  add_generate(app_, options_.generate);
  add_tokenize(app_, options_.tokenize);
  add_train(app_, options_.train);
}

void CommandLine::parse(int argc, char** argv) {
  options_ = CliOptions();  // parse() clears CLI11's results, not the values a last parse set
  try {
    app_.parse(argc, argv);
  } catch (const std::out_of_range& e) {
    // CLI11 2.3 reads a flag's explicit value (--no-bias=N) with std::stoll,
    // whose range error is no ParseError (found by cli_flags_fuzz).
    throw CLI::ConversionError("a flag's value is past the range of a 64-bit integer (" +
                               std::string(e.what()) + ")");
  }
}

std::string CommandLine::verb() const {
  // parse() succeeded: exactly one verb, and under bench exactly one benchmark.
  const CLI::App* verb = app_.get_subcommands().front();
  if (verb != bench_) return verb->get_name();
  return "bench " + bench_->get_subcommands().front()->get_name();
}

void validate(const EvalOptions& o, int world_size) {
  ProcessMesh::validate(ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world_size), o.pp, o.dp,
                        world_size);
  if (o.batch < 1) {
    throw ConfigError("[eval] batch (" + std::to_string(o.batch) + ") must be positive.");
  }
}

void validate(const GenerateOptions& o, int world_size) {
  ProcessMesh::validate(ProcessMesh::resolve_tp(o.tp, o.pp, o.dp, world_size), o.pp, o.dp,
                        world_size);
  if (o.prompt.empty() == o.prompts.empty()) {
    throw ConfigError("[generate] give exactly one of --prompt TEXT and --prompts FILE.");
  }
  validate(sampling_options(o));
}

void validate(const TokenizeOptions& o) {
  if (o.format != "raw" && o.format != "llmc") {
    throw ConfigError("[tokenize] format (" + o.format +
                      ") must be raw (uint16 ids) or llmc (llm.c's header, then uint16 ids).");
  }
}

void validate(const MlpBenchOptions& o, int world_size) {
  // The sizes first: the default hidden width is 4 x d_model.
  if (o.d_model < 1 || o.d_model > kMaxD || o.ffn_hidden_size < 0 ||
      o.ffn_hidden_size > 4 * kMaxD) {
    throw ConfigError("[bench] d-model (" + std::to_string(o.d_model) + ") and ffn-hidden (" +
                      std::to_string(o.ffn_hidden_size) + ") must be in [1, " +
                      std::to_string(kMaxD) + "] and [0, " + std::to_string(4 * kMaxD) +
                      "]. Pass e.g. --d-model 1024 --ffn-hidden 0 (4 x d-model).");
  }
  check_bench_tokens(o.tokens);
  const int tp_size = ProcessMesh::resolve_tp(o.tp, /*pp=*/1, o.dp, world_size);
  ProcessMesh::validate(tp_size, /*pp=*/1, o.dp, world_size);
  validate(mlp_config(o), tp_size);
}

void validate(const DecodeBenchOptions& o, int world_size) {
  const int tp_size = o.tp > 0 ? o.tp : world_size;
  if (tp_size != world_size) {
    throw ConfigError("[bench] decode runs one tp group: tp (" + std::to_string(tp_size) +
                      ") must equal the world size (" + std::to_string(world_size) + ").");
  }
  if (o.prompt_len < 1 || o.new_tokens < 2 || o.batch < 1) {
    throw ConfigError("[bench] prompt_len (" + std::to_string(o.prompt_len) + "), new_tokens (" +
                      std::to_string(o.new_tokens) + ") and batch (" + std::to_string(o.batch) +
                      ") must be >= 1, >= 2 and >= 1.");
  }
}

void validate(const CommBenchOptions& o) {
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) {
    throw ConfigError("[bench] min-bytes (" + std::to_string(o.min_bytes) + ") and max-bytes (" +
                      std::to_string(o.max_bytes) + ") must satisfy 4 <= min-bytes <= max-bytes.");
  }
  if (o.step_factor < 2) {
    throw ConfigError("[bench] step-factor (" + std::to_string(o.step_factor) +
                      ") must be at least 2.");
  }
  if (o.iterations < 1 || o.warmup < 0) {
    throw ConfigError("[bench] iterations (" + std::to_string(o.iterations) + ") and warmup (" +
                      std::to_string(o.warmup) + ") must be >= 1 and >= 0.");
  }
  if (o.comm != "auto" && o.comm != "shm" && o.comm != "mpi") {
    throw ConfigError("[bench] comm (" + o.comm + ") must be auto (shm and mpi), shm or mpi.");
  }
}

void validate(const TpProfileOptions& o) {
  if (o.min_d < 1 || o.max_d < o.min_d || o.max_d > kMaxD) {
    throw ConfigError("[bench] min-d (" + std::to_string(o.min_d) + ") and max-d (" +
                      std::to_string(o.max_d) + ") must satisfy 1 <= min-d <= max-d <= " +
                      std::to_string(kMaxD) + ". Pass e.g. --min-d 256 --max-d 8192.");
  }
  check_bench_tokens(o.tokens);
  if (o.iterations < 1 || o.iterations > kMaxIterations) {
    throw ConfigError("[bench] iterations (" + std::to_string(o.iterations) + ") must be in [1, " +
                      std::to_string(kMaxIterations) + "]. Pass e.g. --iterations 5.");
  }
  if (o.comm != "auto" && o.comm != "shm" && o.comm != "mpi") {
    throw ConfigError("[bench] comm (" + o.comm +
                      ") must be auto (shared memory on one node), shm or mpi: tp-profile runs "
                      "on the CPU.");
  }
}

}  // namespace colrow::apps
