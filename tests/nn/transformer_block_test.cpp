// TransformerBlock::backward writes dx into the caller's tensor (the model
// alternates two): handing it dy's own storage is an InternalError before
// anything is computed, since the block reads dy after it starts writing dx.
// The block's numerics are the whole model's tests' (gpt_model_test.cpp).
#include "colrow/nn/transformer_block.h"

#include <gtest/gtest.h>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "nn/model_test_cases.h"

namespace colrow {
namespace {

TEST(TransformerBlockTest, BackwardRefusesADxThatIsDy) {
  LocalCommunicator alone;
  const ModelConfig config = testing::small_gpt2_config();
  TransformerBlock block(alone, config, /*layer=*/0, /*seed=*/3);
  constexpr int64_t kBatch = 2, kSeq = 4;
  Tensor x = Tensor::full({kBatch * kSeq, config.d_model}, 0.5f);
  block.forward(x, kBatch, kSeq);
  Tensor dy = Tensor::full({kBatch * kSeq, config.d_model}, 0.25f);
  const std::vector<Parameter*> params = block.parameters();
  const std::vector<float> before = params.front()->grad.to_vector();
  EXPECT_THROW(block.backward(dy, dy), InternalError);
  EXPECT_EQ(params.front()->grad.to_vector(), before) << "nothing accumulated";
  Tensor dx;
  block.backward(dy, dx);  // a tensor of its own: fine
  EXPECT_EQ(dx.shape(), dy.shape());
  EXPECT_EQ(dy.to_vector(), Tensor::full(dy.shape(), 0.25f).to_vector()) << "dy left unchanged";
}

}  // namespace
}  // namespace colrow
