// `colrow train` flags.
#include "train.h"

#include "device_flags.h"

namespace colrow::apps {

CLI::App* add_train(CLI::App& app, TrainOptions& o) {
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
  t->add_option("--out", o.out, "Run directory for checkpoints (step-N/ and latest)");
  t->add_option("--save-every", o.save_every, "Save every N steps (0 = only at the end)")
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
  t->add_option("--threads", o.threads, "Threads per rank (0 = cores / ranks on this node)")
      ->capture_default_str();
  t->add_flag("--sequence-parallel", o.sequence_parallel,
              "Megatron's sequence parallelism: norms and residual adds on batch x seq / tp "
              "token rows (all-gather and reduce-scatter instead of all-reduce)");
  t->add_option("--profile", o.profile,
                "Time every kernel operation over N steps after the first and print each "
                "phase's and operation's share of the step")
      ->capture_default_str();
  add_device_flags(*t, o.device);
  return t;
}

}  // namespace colrow::apps
