// GptModel on CUDA against the same model on the CPU, the reference, at tp =
// world size: 1, or 2 ranks sharing one GPU through the host-staged
// communicator (NCCL refuses two ranks on one GPU). gpt2 and llama with
// grouped, replicated and multi-query key/value heads. Checked: the loss and
// every gradient shard (with the fused attention and with the plain one), the exact collective
// sequence of a training pass, determinism, checkpoints moving between the devices bitwise, and a
// warm training step that allocates nothing; mixed precision (bf16 compute) against the CPU's bf16
// model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/allocator.h"
#include "colrow/core/device.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/train/adamw.h"
#include "core/device_runtime.h"
#include "kernels/backend.h"
#include "nn/model_test_cases.h"
#include "support/gpu.h"
#include "support/temp_dir.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::model_cases;
using testing::ModelCase;
using testing::random_ids;
using testing::shared_temp_dir;
using testing::valid_at;

constexpr uint64_t kSeed = 11;
constexpr int64_t kBatch = 2, kSeq = 8;

// The world's ranks as one tp group whose collectives take GPU tensors.
std::unique_ptr<Communicator> gpu_tp_group() {
  Communicator& world = testing::world();
  return make_device_communicator(world.split(0, world.rank(), "tp"), testing::test_gpu(),
                                  CommKind::kStaged);
}

// max |a - b| over max(|b|'s largest entry, floor).
double relative_error(const Tensor& a, const Tensor& b, double floor) {
  const std::vector<float> x = a.to(Device::cpu()).to_vector(), y = b.to(Device::cpu()).to_vector();
  EXPECT_EQ(x.size(), y.size());
  double err = 0.0, scale = floor;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return err / scale;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.to(Device::cpu()).to_vector() == b.to(Device::cpu()).to_vector();
}

// The backend's attention kernel for one scope, then auto again.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(kernels::AttentionKernel kernel) {
    kernels::backend_for(testing::test_gpu()).set_attention_kernel(kernel);
  }
  ~AttentionKernelScope() {
    kernels::backend_for(testing::test_gpu()).set_attention_kernel(kernels::AttentionKernel::kAuto);
  }
};

// Once with the fused attention (auto: every head_dim here takes it) and
// once with the plain kernels that store the probabilities.
TEST(GptModelCuda, LossAndEveryGradientShardMatchTheCpu) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  for (const auto kernel : {kernels::AttentionKernel::kFused, kernels::AttentionKernel::kPlain})
    for (const ModelCase& c : model_cases()) {
      const AttentionKernelScope scope(kernel);
      SCOPED_TRACE(std::string(c.name) +
                   (kernel == kernels::AttentionKernel::kFused ? ", fused" : ", plain") +
                   " attention");
      if (!valid_at(c.config, world.size())) continue;
      GptModel cpu(world, c.config, kSeed);
      GptModel gpu(*gpu_tp, c.config, kSeed);
      gpu.to(testing::test_gpu());
      const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
      std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
      targets[3] = -100;  // ignore_index: the same token is skipped on both devices
      const double cpu_loss = cpu.forward(ids, targets, kBatch, kSeq).mean();
      cpu.backward();
      const double gpu_loss = gpu.forward(ids, targets, kBatch, kSeq).mean();
      gpu.backward();
      // Both devices round every fp32 operation (u = 6e-8), summing in different
      // orders (cuBLAS tiles, tree reductions): a few sqrt(K) u per operation
      // with K <= 192, over a chain of about 20 operations, stays below 1e-5 of
      // a loss near ln(300); a wrong kernel is an O(1) error.
      EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss));
      const std::vector<Parameter*> on_gpu = gpu.parameters(), on_cpu = cpu.parameters();
      ASSERT_EQ(on_gpu.size(), on_cpu.size());
      // Gradients that are zero in exact arithmetic (key biases: softmax ignores
      // a shift of every score) are pure rounding: they are measured against
      // 1e-3 of the model's largest gradient entry.
      const double largest = testing::largest_gradient(on_cpu);
      for (size_t i = 0; i < on_gpu.size(); ++i) {
        ASSERT_EQ(on_gpu[i]->name, on_cpu[i]->name);
        EXPECT_EQ(on_gpu[i]->value.device(), testing::test_gpu()) << on_gpu[i]->name;
        EXPECT_TRUE(bitwise_equal(on_gpu[i]->value, on_cpu[i]->value))
            << on_gpu[i]->name << ": the initialization differs between devices";
        EXPECT_LE(relative_error(on_gpu[i]->grad, on_cpu[i]->grad, 1e-3 * largest), 1e-5)
            << on_gpu[i]->name;
      }
    }
}

// Mixed precision on both devices. With the plain attention kernels and the
// epilogues off (--attention plain --epilogues separate) the GPU follows the
// CPU's rule (kernels/mixed_precision.h) at the CPU's points, so only the
// order of fp32 sums and the last ulps of exp and tanh differ, and only a
// value that lands next to a bf16 rounding boundary rounds the other way.
// The forward's logits then equal the CPU's bf16 ones but for such flips: at
// most 5% of them (measured on an H200: none at tp 1, 0.3-3% at tp 2; a
// path that rounded at another point would move nearly every logit).
// Backward cannot be held to the CPU's bits that way: a flip in one
// activation gradient reaches every gradient computed after it, and each
// brings flips of its own, so by the first block the GPU's bf16 gradients are
// another rounding of the same values (measured: the last block's MLP
// gradients within 1e-7..6e-6 of the CPU's at tp 1, the first block's 1 to
// 3.5 times as far from the CPU's bf16 as those are from fp32). There, as for
// the defaults, the GPU is held against fp32 itself: no farther from it than
// the CPU's bf16 (twice, for the margin: both are rounding noise, and the
// largest of it over the parameters varies; a wrong kernel is an O(1)
// error), and still bf16.
// The defaults round at other points: the fused attention's backward takes
// D = dO . O from the bf16 output, and GPT-2's GELU pair in cuBLASLt takes
// GELU of the fp32 sum and rounds its derivative's product once, so only the
// test against fp32 applies to them.
TEST(GptModelCuda, Bf16MatchesTheCpusBf16) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  kernels::Backend& backend = kernels::backend_for(testing::test_gpu());
  struct DefaultsAfter {  // again, even when an assertion returns early
    kernels::Backend& backend;
    ~DefaultsAfter() {
      backend.set_fused_epilogues(true);
      backend.set_attention_kernel(kernels::AttentionKernel::kAuto);
    }
  } defaults_after{backend};
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, world.size())) continue;
    GptModel fp32(world, c.config, kSeed);
    GptModel cpu(world, c.config, kSeed);
    cpu.set_compute_dtype(DType::kBF16);
    const std::vector<int32_t> ids = random_ids(1, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(2, kBatch * kSeq, c.config.vocab_size);
    for (GptModel* m : {&fp32, &cpu}) m->forward(ids, targets, kBatch, kSeq);
    const Tensor cpu_logits = cpu.logits_local().clone();  // before backward reuses anything
    for (GptModel* m : {&fp32, &cpu}) m->backward();
    const std::vector<Parameter*> on_cpu = cpu.parameters(), reference = fp32.parameters();
    const double largest = testing::largest_gradient(reference);
    double bf16_from_fp32 = 0.0;
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      bf16_from_fp32 = std::max(
          bf16_from_fp32, relative_error(on_cpu[i]->grad, reference[i]->grad, 1e-3 * largest));
    }
    EXPECT_GT(bf16_from_fp32, 1e-3);  // the CPU model did compute in bf16
    for (bool fused : {false, true}) {
      SCOPED_TRACE(fused ? "fused attention and epilogues (the defaults)"
                         : "plain attention, separate epilogues (the CPU's rounding points)");
      backend.set_fused_epilogues(fused);
      backend.set_attention_kernel(fused ? kernels::AttentionKernel::kAuto
                                         : kernels::AttentionKernel::kPlain);
      GptModel gpu(*gpu_tp, c.config, kSeed);
      gpu.to(testing::test_gpu());
      gpu.set_compute_dtype(DType::kBF16);
      gpu.forward(ids, targets, kBatch, kSeq);
      EXPECT_EQ(gpu.logits_local().dtype(), DType::kBF16);
      // Where the two part: the forward's bf16 logits first (the share of
      // elements that rounded the other way), then the gradient furthest off.
      const std::vector<float> gl =
                                   gpu.logits_local().to(Device::cpu()).to(DType::kF32).to_vector(),
                               cl = cpu_logits.to(DType::kF32).to_vector();
      ASSERT_EQ(gl.size(), cl.size());
      size_t logits_apart = 0;
      for (size_t i = 0; i < gl.size(); ++i) logits_apart += gl[i] != cl[i];
      gpu.backward();
      const std::vector<Parameter*> on_gpu = gpu.parameters();
      double gpu_from_cpu = 0.0, gpu_from_fp32 = 0.0;
      // Per parameter, in backward's order (the last block's first): its
      // distance from the CPU's bf16 and from fp32, and the share of its
      // elements more than 1e-4 of the largest gradient from the CPU's.
      std::string table;
      for (size_t n = on_gpu.size(); n-- > 0;) {
        EXPECT_TRUE(bitwise_equal(on_gpu[n]->compute(), on_cpu[n]->compute())) << on_gpu[n]->name;
        const double from_cpu = relative_error(on_gpu[n]->grad, on_cpu[n]->grad, 1e-3 * largest);
        const double from_fp32 =
            relative_error(on_gpu[n]->grad, reference[n]->grad, 1e-3 * largest);
        gpu_from_cpu = std::max(gpu_from_cpu, from_cpu);
        gpu_from_fp32 = std::max(gpu_from_fp32, from_fp32);
        const std::vector<float> x = on_gpu[n]->grad.to(Device::cpu()).to_vector(),
                                 y = on_cpu[n]->grad.to(Device::cpu()).to_vector();
        size_t off = 0;
        for (size_t e = 0; e < x.size(); ++e) off += std::fabs(x[e] - y[e]) > 1e-4 * largest;
        char row[200];
        std::snprintf(row, sizeof row, "\n  %-40s from cpu %.2e  from fp32 %.2e  off %zu/%zu",
                      on_gpu[n]->name.c_str(), from_cpu, from_fp32, off, x.size());
        table += row;
      }
      const std::string where = "logits apart in " + std::to_string(logits_apart) + " of " +
                                std::to_string(gl.size()) + "; the CPU's bf16 from fp32 " +
                                std::to_string(bf16_from_fp32) + ", the GPU's from the CPU's " +
                                std::to_string(gpu_from_cpu) + "; per parameter:" + table;
      EXPECT_GT(gpu_from_fp32, 1e-3) << where;  // bf16 on the GPU too
      EXPECT_LE(gpu_from_fp32, 2.0 * bf16_from_fp32) << where;
      if (!fused) {
        EXPECT_LE(logits_apart, gl.size() / 20) << where;  // a flip is a sum at a boundary: rare
      }
    }
  }
}

TEST(GptModelCuda, CollectiveSequenceEqualsTheCpus) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, world.size())) continue;
    RecordingCommunicator cpu_record(world), gpu_record(*gpu_tp);
    GptModel cpu(cpu_record, c.config, kSeed);
    GptModel gpu(gpu_record, c.config, kSeed);
    gpu.to(testing::test_gpu());
    const std::vector<int32_t> ids = random_ids(3, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(4, kBatch * kSeq, c.config.vocab_size);
    cpu_record.clear();
    gpu_record.clear();
    cpu.forward(ids, targets, kBatch, kSeq);
    cpu.backward();
    gpu.forward(ids, targets, kBatch, kSeq);
    gpu.backward();
    ASSERT_FALSE(cpu_record.events().empty());  // the embedding all-reduces, even at tp 1
    EXPECT_EQ(gpu_record.events(), cpu_record.events());
  }
}

TEST(GptModelCuda, TwoPassesAreBitwiseIdentical) {
  COLROW_REQUIRE_GPU();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, gpu_tp->size())) continue;
    GptModel gpu(*gpu_tp, c.config, kSeed);
    gpu.to(testing::test_gpu());
    const std::vector<int32_t> ids = random_ids(5, kBatch * kSeq, c.config.vocab_size);
    const std::vector<int32_t> targets = random_ids(6, kBatch * kSeq, c.config.vocab_size);
    const float first = gpu.forward(ids, targets, kBatch, kSeq).mean();
    gpu.backward();
    std::vector<std::vector<float>> grads;
    for (Parameter* p : gpu.parameters()) grads.push_back(p->grad.to(Device::cpu()).to_vector());
    gpu.zero_grad();
    const float second = gpu.forward(ids, targets, kBatch, kSeq).mean();
    gpu.backward();
    EXPECT_EQ(first, second);
    const std::vector<Parameter*> params = gpu.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      // Embedding scatter-add and bias sums have a fixed order: no float atomics.
      EXPECT_EQ(params[i]->grad.to(Device::cpu()).to_vector(), grads[i]) << params[i]->name;
    }
  }
}

// After the first step has made every buffer, a training step (forward,
// backward, AdamW's norm and update, zero_grad) takes nothing from the GPU's
// allocator, in fp32 and bf16: kernel scratch and uploads live in kept
// buffers (kernels/cuda/kept_buffers.h), so the step uses the same addresses
// every time, as a CUDA graph of it needs (tests/train/step_allocations_test.cpp
// checks every mesh on the CPU).
TEST(GptModelCuda, AWarmTrainingStepAllocatesNothingOnTheGpu) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  std::unique_ptr<Communicator> gpu_dp = make_device_communicator(
      world.split(world.rank(), 0, "dp"), testing::test_gpu(), CommKind::kStaged);
  const Allocator& gpu_memory = allocator_for(testing::test_gpu());
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, world.size())) continue;
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(c.name) + ", " + dtype_name(dtype));
      GptModel gpu(*gpu_tp, c.config, kSeed);
      gpu.to(testing::test_gpu());
      AdamW optimizer(*gpu_tp, *gpu_dp, gpu.parameters(), AdamWConfig{});
      gpu.set_compute_dtype(dtype);
      auto step = [&](const std::vector<int32_t>& ids, int s) {
        gpu.forward(ids, random_ids(8 + s, kBatch * kSeq, c.config.vocab_size), kBatch, kSeq);
        gpu.backward();
        optimizer.step(1e-3f);
        optimizer.zero_grad();
      };
      // Makes the buffers, with one distinct id: the warm step's scatter
      // plan, over many distinct ids, is longer and must still fit.
      step(std::vector<int32_t>(kBatch * kSeq, 1), 0);
      const size_t warm = gpu_memory.allocation_count();
      step(random_ids(7, kBatch * kSeq, c.config.vocab_size), 1);
      EXPECT_EQ(gpu_memory.allocation_count() - warm, 0u) << "GPU allocations in a warm step";
    }
  }
}

// Forward and backward queue all their work without the host waiting for
// the GPU once (no copy to the host, no synchronization; the loss stays on
// the GPU until CrossEntropyOutput::mean asks): the GPU never idles while the
// host catches up, and the pair could be captured as a CUDA graph. Staged
// collectives (tp > 1 on one GPU) wait by design, so one rank only.
TEST(GptModelCuda, AWarmForwardAndBackwardQueueWithoutAHostWait) {
  COLROW_REQUIRE_GPU();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  if (gpu_tp->size() > 1) GTEST_SKIP() << "staged tp collectives copy through the host";
  for (const ModelCase& c : model_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(c.name) + ", " + dtype_name(dtype));
      GptModel gpu(*gpu_tp, c.config, kSeed);
      gpu.to(testing::test_gpu());
      gpu.set_compute_dtype(dtype);
      auto forward_and_backward = [&](int s) {
        gpu.forward(random_ids(7 + s, kBatch * kSeq, c.config.vocab_size),
                    random_ids(8 + s, kBatch * kSeq, c.config.vocab_size), kBatch, kSeq);
        gpu.backward();
      };
      forward_and_backward(
          0);  // makes the buffers (random ids: the next step's plan may be longer)
      synchronize(testing::test_gpu());
      const size_t before = device_runtime::host_wait_count();
      forward_and_backward(1);
      EXPECT_EQ(device_runtime::host_wait_count() - before, 0u) << "host waits in a warm step";
      synchronize(testing::test_gpu());
      EXPECT_EQ(device_runtime::host_wait_count() - before, 1u) << "the count misses a wait";
    }
  }
}

TEST(GptModelCuda, CheckpointsMoveBetweenDevicesBitwise) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> gpu_tp = gpu_tp_group();
  for (const ModelCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    if (!valid_at(c.config, world.size())) continue;
    // Saved on the GPU, loaded on the CPU.
    const std::string from_gpu =
        shared_temp_dir(world, std::string("gpt_model_cuda_test_") + c.name + "_from_gpu");
    GptModel gpu(*gpu_tp, c.config, kSeed);
    gpu.to(testing::test_gpu());
    save_checkpoint(gpu, from_gpu, *gpu_tp);
    GptModel cpu(world, c.config, kSeed + 1);  // a different init: the file must win
    load_checkpoint(cpu, from_gpu);
    const std::vector<Parameter*> a = gpu.parameters(), b = cpu.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(a[i]->value, b[i]->value)) << "gpu -> cpu: " << a[i]->name;
    }
    // Saved on the CPU, loaded on the GPU.
    const std::string from_cpu =
        shared_temp_dir(world, std::string("gpt_model_cuda_test_") + c.name + "_from_cpu");
    GptModel source(world, c.config, kSeed + 2);
    save_checkpoint(source, from_cpu, world);
    GptModel loaded(*gpu_tp, c.config, kSeed + 3);
    loaded.to(testing::test_gpu());
    load_checkpoint(loaded, from_cpu);
    const std::vector<Parameter*> s = source.parameters(), l = loaded.parameters();
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_EQ(l[i]->value.device(), testing::test_gpu());
      EXPECT_TRUE(bitwise_equal(l[i]->value, s[i]->value)) << "cpu -> gpu: " << s[i]->name;
    }
    world.barrier();
    if (world.rank() == 0) {
      std::filesystem::remove_all(from_gpu);
      std::filesystem::remove_all(from_cpu);
    }
  }
}

}  // namespace
}  // namespace colrow
