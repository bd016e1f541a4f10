// StepGraph on a GPU (train/step_graph.h): training through graphs gives the
// eager run's losses and gradients bit for bit, step after step, fp32 and
// bf16, with a micro-batch whose ignored targets need a graph of their own,
// and with the output head in chunks (3, 3, 3, 3, 3 and 1 rows).
// Where a micro-batch cannot be captured (ranks sharing one GPU go through
// the host; the plain attention kernel makes buffers per call) capturing
// stops with a reason and the run goes on eagerly with the same bits. The CPU
// side: tests/train/step_graph_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/train/adamw.h"
#include "colrow/train/pipeline_runner.h"
#include "colrow/train/step_graph.h"
#include "kernels/backend.h"
#include "nn/model_test_cases.h"
#include "support/gpu.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::random_batch;
using testing::world;

constexpr int64_t kRows = 2, kSeq = 8;

// The model groups of the world on this rank's GPU: NCCL where each rank has
// its own GPU; ranks sharing one go host-staged, which a capture cannot hold.
struct GpuGroups {
  std::unique_ptr<Communicator> tp, dp, pp;
  GpuGroups() {
    Communicator& w = world();
    const Device gpu = testing::test_gpu();
    tp = make_device_communicator(w.split(0, w.rank(), "tp"), gpu, CommKind::kAuto);
    dp = make_device_communicator(w.split(w.rank(), 0, "dp"), gpu, CommKind::kAuto);
    pp = make_device_communicator(w.split(w.rank(), 0, "pp"), gpu, CommKind::kAuto);
  }
  bool capturable() const { return tp->size() == 1 || tp->capturable(); }
};

ModelConfig model_case(const std::string& name) {
  for (const testing::ModelCase& c : testing::model_cases()) {
    if (name == c.name) return c.config;
  }
  throw InternalError("no model case " + name);
}

struct Outcome {
  StepGraph::Counts counts;
  std::string failure;
};

// Two models alike on the GPU, trained side by side for 6 steps of 2
// micro-batches: one through its runner's StepGraph, one eagerly. Losses and
// every gradient bitwise equal at every step; AdamW updates both, so a replay
// must read the updated weights. Step 3's second micro-batch ignores some
// targets: another key.
Outcome train_side_by_side(GpuGroups& groups, const ModelConfig& config, DType dtype,
                           bool chunked_head = false) {
  Communicator &tp = *groups.tp, &dp = *groups.dp;
  GptModel graphed(tp, config, /*seed=*/9), eager(tp, config, /*seed=*/9);
  graphed.to(testing::test_gpu());
  eager.to(testing::test_gpu());
  if (chunked_head) {  // chunks of 3 of a micro-batch's 16 tokens
    for (GptModel* m : {&graphed, &eager}) {
      m->set_logits_chunk_bytes(3 * m->vocab_size_local() * dtype_bytes(dtype));
    }
  }
  AdamW graphed_adam(tp, dp, graphed.parameters(), AdamWConfig{});
  AdamW eager_adam(tp, dp, eager.parameters(), AdamWConfig{});
  graphed.set_compute_dtype(dtype);
  eager.set_compute_dtype(dtype);
  PipelineRunner graphed_runner(graphed, *groups.pp), eager_runner(eager, *groups.pp);
  graphed_runner.use_cuda_graphs(true);
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    auto batch = [&](int j) {
      return random_batch(100 * step + j, kRows, kSeq, config.vocab_size,
                          step == 3 && j == 1 ? 4 : 0);
    };
    const double loss = graphed_runner.train_step(2, batch);
    EXPECT_EQ(loss, eager_runner.train_step(2, batch));
    const std::vector<Parameter*> g = graphed.parameters(), e = eager.parameters();
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g[i]->grad.to(Device::cpu()).to_vector(), e[i]->grad.to(Device::cpu()).to_vector())
          << g[i]->name;
    }
    graphed_adam.step(1e-3f, 2);
    eager_adam.step(1e-3f, 2);
    graphed_adam.zero_grad();
    eager_adam.zero_grad();
  }
  return {graphed_runner.step_graph()->counts(), graphed_runner.step_graph()->failure()};
}

TEST(StepGraph, ReplaysGiveTheEagerBits) {
  COLROW_REQUIRE_GPU();
  GpuGroups groups;
  for (const char* name : {"gpt2", "llama_replicated_kv"}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const bool chunked_head : {false, true}) {
        const ModelConfig config = model_case(name);
        if (!testing::valid_at(config, groups.tp->size())) continue;
        SCOPED_TRACE(std::string(name) + ", " + dtype_name(dtype) +
                     (chunked_head ? ", head in chunks" : ""));
        const Outcome out = train_side_by_side(groups, config, dtype, chunked_head);
        if (groups.capturable()) {
          EXPECT_EQ(out.failure, "");
          EXPECT_GE(out.counts.replayed, 4)
              << "captured " << out.counts.captured << ", eager " << out.counts.eager;
        } else {
          EXPECT_NE(out.failure, "") << "a host-staged capture";
          EXPECT_EQ(out.counts.replayed, 0);
        }
      }
    }
  }
}

// The plain attention kernel makes its pointer tables per call, so no eager
// run is warm: after three such runs capturing stops, saying why.
TEST(StepGraph, AMicroBatchThatAlwaysAllocatesRunsEagerly) {
  COLROW_REQUIRE_GPU();
  GpuGroups groups;
  if (!groups.capturable()) GTEST_SKIP() << "a host-staged tp group stops at its capture first";
  kernels::Backend& backend = kernels::backend_for(testing::test_gpu());
  backend.set_attention_kernel(kernels::AttentionKernel::kPlain);
  const Outcome out = train_side_by_side(groups, model_case("gpt2"), DType::kF32);
  backend.set_attention_kernel(kernels::AttentionKernel::kAuto);
  EXPECT_NE(out.failure.find("takes memory from the allocator"), std::string::npos) << out.failure;
  EXPECT_EQ(out.counts.replayed, 0);
  EXPECT_EQ(out.counts.eager, 12);
}

}  // namespace
}  // namespace colrow
