// A warm training step allocates nothing: once the first step has made every
// buffer, a step (the runner's forwards and backwards, AdamW's reduction,
// norm and update, zero_grad) takes no memory from the allocator, as llm.c
// allocates everything once. What a CUDA graph of the step needs (its
// replays reuse the addresses it recorded), and no allocator work on the
// step's path. Every mesh the world allows: tp alone, with sequence
// parallelism, dp with ZeRO-0 and ZeRO-1 and overlapped bucket reductions, pp
// with micro-batches in flight; gpt2 and llama with replicated KV heads
// (their gradient stash), with and without activation recomputation, the
// output head in chunks of uneven sizes (3, 3, 3, 3, 3 and 1 rows). fp32:
// on the CPU a bf16 GEMM widens its operands to fp32 copies for sgemm (the
// CPU's bf16 is the GPU's reference, not its speed path).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/train/adamw.h"
#include "colrow/train/pipeline_runner.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::random_ids;
using testing::world;

constexpr int64_t kRows = 2, kSeq = 8;

struct MeshCase {
  std::string name;
  int tp, pp, dp;
  int micro_batches = 1;
  bool sequence_parallel = false;
  int zero = 0;
  bool overlap = false;
  bool recompute = false;
  bool chunked_head = false;
};

std::vector<MeshCase> mesh_cases(int w) {
  std::vector<MeshCase> cases;
  auto add = [&cases](const std::string& name, int tp, int pp, int dp, int micro_batches) {
    cases.push_back({name, tp, pp, dp, micro_batches});
    return &cases.back();
  };
  add("tp", w, 1, 1, 1);
  add("tp, 2 micro-batches, recomputed activation", w, 1, 1, 2)->recompute = true;
  if (kRows * kSeq % w == 0) add("tp, sequence parallel", w, 1, 1, 1)->sequence_parallel = true;
  add("tp, 2 micro-batches, the head in chunks", w, 1, 1, 2)->chunked_head = true;
  if (w > 1) {
    add("dp, ZeRO-1", 1, 1, w, 1)->zero = 1;
    add("dp, overlapped buckets", 1, 1, w, 2)->overlap = true;
    add("pp", 1, w, 1, 3);
    add("pp, the head in chunks", 1, w, 1, 3)->chunked_head = true;
  }
  return cases;
}

Batch micro_batch(int step, int j, int64_t vocab) {
  Batch b;
  b.rows = kRows;
  b.seq_len = kSeq;
  b.ids = random_ids(100 * step + j, kRows * kSeq, vocab);
  b.targets = random_ids(100 * step + j + 50, kRows * kSeq, vocab);
  return b;
}

TEST(StepAllocations, AWarmTrainingStepAllocatesNothing) {
  const Allocator& host = allocator_for(Device::cpu());
  for (const MeshCase& m : mesh_cases(world().size())) {
    ProcessMesh mesh(world(), m.tp, m.pp, m.dp);
    for (ModelConfig config :
         {testing::small_gpt2_config(), testing::small_llama_config(4, 2, 32, false)}) {
      config.n_layer = 4;  // a stage for each of up to 4 ranks
      SCOPED_TRACE(m.name + ", " + config.model_type);
      if (!testing::valid_at(config, m.tp)) continue;
      GptModel model(mesh.tp(), config,
                     pipeline_stage(config.n_layer, m.pp, mesh.pp_rank(), /*layers=*/{}),
                     /*seed=*/5, m.sequence_parallel);
      model.set_recompute_activation(m.recompute);
      // Chunks of 3 of a micro-batch's 16 tokens: the last one is shorter.
      if (m.chunked_head) model.set_logits_chunk_bytes(3 * model.vocab_size_local() * 4);
      AdamWConfig adam;
      adam.zero = m.zero;
      adam.overlap_grad_reduce = m.overlap;
      if (m.overlap) adam.bucket_size = 2000;  // several buckets
      AdamW optimizer(mesh.tp(), mesh.dp(), model.parameters(), adam,
                      m.pp > 1 ? &mesh.pp() : nullptr);
      PipelineRunner runner(model, mesh.pp());
      GptModel::GradsReady grads_ready;
      if (m.overlap) {
        grads_ready = [&optimizer](const std::vector<size_t>& ready) {
          optimizer.grads_ready(ready);
        };
      }
      auto step = [&](int s) {
        runner.train_step(
            m.micro_batches, [&](int j) { return micro_batch(s, j, config.vocab_size); },
            grads_ready);
        optimizer.step(1e-3f, m.micro_batches);
        optimizer.zero_grad();
      };
      step(0);  // makes the buffers
      const size_t warm = host.allocation_count();
      step(1);
      EXPECT_EQ(host.allocation_count() - warm, 0u) << "allocations in a warm step";
    }
  }
}

}  // namespace
}  // namespace colrow
