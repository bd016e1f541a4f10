// CUDA embeddings against the CPU kernels. Forward is a copy (or zeros) and
// every backward adds the same fp32 values in the same order as the CPU (token
// order per table row, sequence order per position), so all results must be
// bitwise equal to the CPU's: vocabulary slices with ids inside and outside the
// local range and many repeats, d = 1, 8, 100, seq 1, 7, 33; a strided output
// view; repeated backward gives the same bits; shape errors.
// Built twice: on a GPU (label gpu), and with COLROW_WARP_EMULATION, where
// the same kernels run on the CPU through the warp emulation
// (emulated/embedding.h), so CI checks them without a GPU.
#ifdef COLROW_WARP_EMULATION
#include "kernels/cuda/emulated/embedding.h"
#else
#include "kernels/cuda/embedding.h"
#endif

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::expect_same_bits;
using testing::random_uniform;

namespace cpu = kernels::cpu;
#ifdef COLROW_WARP_EMULATION
namespace gpu = testing::emulated;
#else
namespace gpu = kernels::cuda;
#endif

// ids in [lo, hi): a small range gives many repeated rows.
std::vector<int32_t> random_ids(int64_t tokens, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> ids(tokens);
  for (int32_t& id : ids) id = dist(gen);
  return ids;
}

struct VocabCase {
  int64_t tokens, vocab_local, d, vocab_start;
  int32_t id_lo, id_hi;  // ids drawn from [id_lo, id_hi)
};
// One row; ids all local; ids partly below and above the local range with
// many repeats (tokens >> distinct ids); a wide table; more distinct rows
// than the scatter-add's 4096 row blocks, so blocks take several rows.
const VocabCase kVocabCases[] = {{5, 1, 8, 3, 2, 5},         {33, 37, 1, 0, 0, 37},
                                 {100, 37, 100, 20, 10, 70}, {257, 1000, 8, 1000, 900, 2100},
                                 {64, 50, 33, 0, 45, 48},    {20000, 12000, 3, 0, 0, 12000}};

TEST(CudaEmbeddingTest, VocabularyForwardAndBackwardMatchCpuBitwise) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  uint32_t seed = 1;
  for (const VocabCase& c : kVocabCases) {
    SCOPED_TRACE("tokens " + std::to_string(c.tokens) + ", vocab_local " +
                 std::to_string(c.vocab_local) + ", d " + std::to_string(c.d));
    const std::vector<int32_t> ids = random_ids(c.tokens, c.id_lo, c.id_hi, seed++);
    const Tensor table = random_uniform({c.vocab_local, c.d}, seed++, -1.0f, 1.0f);
    Tensor y_cpu = Tensor::empty({c.tokens, c.d});
    cpu::embedding_forward(ids, c.vocab_start, table, y_cpu);
    Tensor y_gpu = Tensor::full({c.tokens, c.d}, 7.0f, dev);
    gpu::embedding_forward(ids, c.vocab_start, testing::copy_to(table, dev), y_gpu);
    expect_same_bits("y", y_gpu, y_cpu);

    // Backward accumulates into an existing gradient.
    const Tensor dy = random_uniform({c.tokens, c.d}, seed++, -1.0f, 1.0f);
    const Tensor dtable0 = random_uniform({c.vocab_local, c.d}, seed++, -1.0f, 1.0f);
    Tensor dtable_cpu = dtable0.clone();
    cpu::embedding_backward(ids, c.vocab_start, dy, dtable_cpu);
    Tensor dtable_gpu = testing::copy_to(dtable0, dev);
    gpu::embedding_backward(ids, c.vocab_start, testing::copy_to(dy, dev), dtable_gpu);
    expect_same_bits("dtable", dtable_gpu, dtable_cpu);

    // Run to run: the same bits.
    Tensor again = testing::copy_to(dtable0, dev);
    gpu::embedding_backward(ids, c.vocab_start, testing::copy_to(dy, dev), again);
    expect_same_bits("dtable, second run", again, dtable_gpu);
  }
}

// y as a column block of a wider buffer, dy likewise: row strides are honoured.
TEST(CudaEmbeddingTest, StridedViews) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const int64_t tokens = 19, vocab_local = 11, d = 5;
  const std::vector<int32_t> ids = random_ids(tokens, 0, 15, 11);
  const Tensor table = random_uniform({vocab_local, d}, 12, -1.0f, 1.0f);
  Tensor y_cpu = Tensor::empty({tokens, d});
  cpu::embedding_forward(ids, 0, table, y_cpu);
  Tensor wide = Tensor::full({tokens, 3 * d}, 7.0f, dev);
  Tensor y_gpu = wide.slice(1, d, d);
  gpu::embedding_forward(ids, 0, testing::copy_to(table, dev), y_gpu);
  expect_same_bits("y", y_gpu, y_cpu);
  const std::vector<float> w = wide.to_vector();
  EXPECT_EQ(w[0], 7.0f) << "columns outside the view are untouched";
  EXPECT_EQ(w[2 * d], 7.0f);

  const Tensor dy_full = random_uniform({tokens, 2 * d}, 13, -1.0f, 1.0f);
  const Tensor dy = dy_full.slice(1, d, d);
  Tensor dtable_cpu = Tensor::zeros({vocab_local, d});
  cpu::embedding_backward(ids, 0, dy, dtable_cpu);
  Tensor dtable_gpu = Tensor::zeros({vocab_local, d}, dev);
  gpu::embedding_backward(ids, 0, testing::copy_to(dy_full, dev).slice(1, d, d), dtable_gpu);
  expect_same_bits("dtable", dtable_gpu, dtable_cpu);
}

TEST(CudaEmbeddingTest, PositionsMatchCpuBitwise) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  struct Case {
    int64_t batch, seq, d;
  };
  uint32_t seed = 100;
  for (const Case& c : {Case{3, 1, 8}, Case{2, 7, 100}, Case{5, 33, 1}, Case{1, 100, 37}}) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + ", seq " + std::to_string(c.seq) + ", d " +
                 std::to_string(c.d));
    const int64_t tokens = c.batch * c.seq, max_positions = c.seq + 3;
    const Tensor x0 = random_uniform({tokens, c.d}, seed++, -1.0f, 1.0f);
    const Tensor table = random_uniform({max_positions, c.d}, seed++, -1.0f, 1.0f);
    Tensor x_cpu = x0.clone();
    cpu::position_embedding_forward(x_cpu, table, c.seq);
    Tensor x_gpu = testing::copy_to(x0, dev);
    gpu::position_embedding_forward(x_gpu, testing::copy_to(table, dev), c.seq);
    expect_same_bits("x", x_gpu, x_cpu);

    // Rows >= seq of the gradient stay as they were.
    const Tensor dx = random_uniform({tokens, c.d}, seed++, -1.0f, 1.0f);
    const Tensor dtable0 = random_uniform({max_positions, c.d}, seed++, -1.0f, 1.0f);
    Tensor dtable_cpu = dtable0.clone();
    cpu::position_embedding_backward(dx, c.seq, dtable_cpu);
    Tensor dtable_gpu = testing::copy_to(dtable0, dev);
    gpu::position_embedding_backward(testing::copy_to(dx, dev), c.seq, dtable_gpu);
    expect_same_bits("dtable", dtable_gpu, dtable_cpu);
    expect_same_bits("untouched rows", dtable_gpu.slice(0, c.seq, 3), dtable0.slice(0, c.seq, 3));

    Tensor again = testing::copy_to(dtable0, dev);
    gpu::position_embedding_backward(testing::copy_to(dx, dev), c.seq, again);
    expect_same_bits("dtable, second run", again, dtable_gpu);
  }
}

TEST(CudaEmbeddingTest, ShapeErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const std::vector<int32_t> ids = {0, 1, 2};
  const Tensor table = Tensor::zeros({4, 5}, dev);
  Tensor y_short = Tensor::empty({2, 5}, dev);
  EXPECT_THROW(gpu::embedding_forward(ids, 0, table, y_short), InternalError);
  Tensor y_wide = Tensor::empty({3, 6}, dev);
  EXPECT_THROW(gpu::embedding_forward(ids, 0, table, y_wide), InternalError);
  if (!testing::kGpuIsHost) {
    Tensor y_host = Tensor::empty({3, 5});
    EXPECT_THROW(gpu::embedding_forward(ids, 0, table, y_host), InternalError);
  }
  Tensor dtable = Tensor::zeros({4, 5}, dev);
  EXPECT_THROW(gpu::embedding_backward(ids, 0, Tensor::zeros({3, 4}, dev), dtable), InternalError);
  Tensor x = Tensor::zeros({10, 5}, dev);
  EXPECT_THROW(gpu::position_embedding_forward(x, table, 3), InternalError) << "10 % 3 != 0";
  EXPECT_THROW(gpu::position_embedding_forward(x, table, 5), InternalError) << "seq > positions";
  EXPECT_THROW(gpu::position_embedding_backward(x, 0, dtable), InternalError) << "seq 0";
}

}  // namespace
}  // namespace colrow
