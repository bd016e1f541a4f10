// CUDA fill_random against the CPU kernel: bitwise equal for normal and
// uniform fills, shards along dim 0 and dim 1 (a strided part of the full
// tensor) and a 1-d tensor; the shards of one full tensor are the same
// numbers at tp 1 and tp 2 on the GPU; errors.
#include "kernels/cuda/init.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "kernels/cpu/init.h"
#include "kernels/cuda/cuda_test_helpers.h"
#include "support/gpu.h"

namespace colrow {
namespace {

using testing::same_bits;

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;
using kernels::RandomFill;

RandomFill fill_of(const Shape& full, int dim, int64_t offset, bool normal,
                   const std::string& name) {
  RandomFill f;
  f.full_shape = full;
  f.dim = dim;
  f.offset_along_dim = offset;
  f.normal = normal;
  f.scale = normal ? 0.02f : 0.125f;
  f.seed = 1234;
  f.stream = name_stream(name);
  return f;
}

TEST(CudaInitTest, BitwiseEqualToCpu) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  struct Case {
    Shape full, local;
    int dim;
    int64_t offset;
  };
  const Case cases[] = {{{6, 40}, {6, 20}, 1, 20},
                        {{6, 40}, {3, 40}, 0, 3},
                        {{1000}, {1000}, 0, 0},
                        {{37, 1}, {37, 1}, 0, 0}};
  for (const Case& c : cases) {
    for (const bool normal : {true, false}) {
      SCOPED_TRACE(shape_to_string(c.local) + (normal ? " normal" : " uniform"));
      const RandomFill f = fill_of(c.full, c.dim, c.offset, normal, "h.0.mlp.c_fc.weight");
      Tensor want = Tensor::empty(c.local);
      cpu::fill_random(want, f);
      Tensor got = Tensor::full(c.local, 7.0f, dev);
      gpu::fill_random(got, f);
      EXPECT_TRUE(same_bits(got, want));
    }
  }
}

// The two column halves drawn as tp = 2 shards are the full tensor's columns.
TEST(CudaInitTest, ShardsAreSlicesOfTheFullTensor) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  const Shape full{5, 8};
  Tensor whole = Tensor::empty(full, dev);
  gpu::fill_random(whole, fill_of(full, 1, 0, true, "w"));
  for (int part = 0; part < 2; ++part) {
    Tensor shard = Tensor::empty({5, 4}, dev);
    gpu::fill_random(shard, fill_of(full, 1, 4 * part, true, "w"));
    EXPECT_TRUE(same_bits(shard, whole.slice(1, 4 * part, 4).clone())) << "part " << part;
  }
}

TEST(CudaInitTest, ErrorsAreInternalErrors) {
  COLROW_REQUIRE_GPU();
  const Device dev = testing::test_gpu();
  Tensor wide = Tensor::empty({4, 6}, dev);
  Tensor strided = wide.slice(1, 0, 3);
  EXPECT_THROW(gpu::fill_random(strided, fill_of({4, 3}, 0, 0, true, "x")), InternalError);
  Tensor host = Tensor::empty({4, 3});
  EXPECT_THROW(gpu::fill_random(host, fill_of({4, 3}, 0, 0, true, "x")), InternalError);
}

}  // namespace
}  // namespace colrow
