// StepGraph (--cuda-graph): a micro-batch's forward and backward captured as
// a CUDA graph and replayed for later micro-batches. Checked here, on any
// machine: the property a replay relies on, that a warm micro-batch queues the
// same operations on the same buffers whatever its ids and targets (an OpTrace
// of two micro-batches on the CPU, at tp = world size, every model case,
// sequence parallel and recomputed activations included); and the refusals
// (the CPU, pipeline stages, host-staged tp groups). The replays themselves:
// tests/train/step_graph_cuda_test.cpp.
#include "colrow/train/step_graph.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/data/token_dataset.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/nn/pipeline_stage.h"
#include "colrow/train/pipeline_runner.h"
#include "kernels/op_trace.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::random_batch;
using testing::world;

constexpr int64_t kRows = 2, kSeq = 8;

// Each refusal in one ConfigError that says what to change; the runner
// refuses pipeline stages before it needs a GPU.
TEST(StepGraph, RefusesWhatItCannotCapture) {
  auto refusal = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal([] { StepGraph graph(Device::cpu(), world()); }).find("--device cuda"),
            std::string::npos);
  EXPECT_EQ(refusal([] { StepGraph::require_one_stage(1); }), "");
  EXPECT_NE(refusal([] { StepGraph::require_one_stage(2); }).find("--pp 2"), std::string::npos);
  // The world's MPI group records nothing a graph can hold; a group of one has nothing to record.
  const std::string staged = refusal([] { StepGraph::require_capturable(world()); });
  if (world().size() == 1) {
    EXPECT_EQ(staged, "");
  } else {
    EXPECT_NE(staged.find("host-staged"), std::string::npos) << staged;
    ProcessMesh mesh(world(), 1, world().size(), 1);
    ModelConfig config = testing::small_gpt2_config();
    config.n_layer = 4;  // a stage for each of up to 4 ranks
    GptModel model(mesh.tp(), config,
                   pipeline_stage(config.n_layer, world().size(), mesh.pp_rank(), {}),
                   /*seed=*/3, /*sequence_parallel=*/false);
    PipelineRunner runner(model, mesh.pp());
    EXPECT_NE(refusal([&] { runner.use_cuda_graphs(true); }).find("--pp"), std::string::npos);
  }
}

// What a captured region would record: the operations of one staged
// micro-batch's forward and backward, with their operands' addresses.
std::vector<std::string> traced_region(GptModel& model, const Batch& b) {
  model.stage_inputs(b.ids, b.targets, b.rows, b.seq_len);
  kernels::OpTrace trace;
  model.forward_stage(b.ids, nullptr, b.targets, b.rows, b.seq_len);
  model.backward_stage(nullptr);
  return trace.operations();
}

TEST(StepGraph, AWarmMicroBatchQueuesTheSameWorkForAnyData) {
  struct Variant {
    std::string name;
    bool sequence_parallel = false, recompute = false, chunked_head = false;
  };
  const int tp = world().size();
  for (const testing::ModelCase& c : testing::model_cases()) {
    if (!testing::valid_at(c.config, tp)) continue;
    for (const Variant& v :
         {Variant{"plain"}, Variant{"sequence parallel", true, false},
          Variant{"recomputed activation", false, true},
          Variant{"head in chunks of 3 rows", false, false, true},
          Variant{"sequence parallel, head in chunks of 3 rows", true, false, true}}) {
      if (v.sequence_parallel && (kRows * kSeq) % tp != 0) continue;
      SCOPED_TRACE(std::string(c.name) + ", " + v.name);
      GptModel model(world(), c.config, /*seed=*/3, v.sequence_parallel);
      model.set_recompute_activation(v.recompute);
      if (v.chunked_head) model.set_logits_chunk_bytes(3 * model.vocab_size_local() * 4);
      const int64_t vocab = c.config.vocab_size;
      traced_region(model, random_batch(1, kRows, kSeq, vocab));  // makes the buffers
      const size_t warm = allocator_for(Device::cpu()).allocation_count();
      const std::vector<std::string> a = traced_region(model, random_batch(2, kRows, kSeq, vocab));
      ASSERT_EQ(allocator_for(Device::cpu()).allocation_count(), warm) << "a warm region allocated";
      // Other ids and targets, a few of them ignored (the same key but for
      // counted, which the trace does not see: it scales a kernel's scalar).
      const std::vector<std::string> b =
          traced_region(model, random_batch(3, kRows, kSeq, vocab, 3));
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size()) << "the operations depend on the data";
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "operation " << i;
      // The trace sees what a graph would get wrong: another batch size
      // (another key) moves the buffers and changes the shapes.
      if (!v.sequence_parallel || kSeq % tp == 0) {
        EXPECT_TRUE(traced_region(model, random_batch(4, 1, kSeq, vocab)) != a);
      }
      model.zero_grad();
    }
  }
}

}  // namespace
}  // namespace colrow
