// ProcessMesh: validate() as a pure function (ConfigError naming tp, dp and the
// world size, with a suggested fix that is itself valid; tp or dp < 1), and the
// tp x dp groups for every factorization of the world size: tp innermost, so
// world rank r is tp_rank r % tp and dp_rank r / tp, shown by collectives.
#include "colrow/dist/process_mesh.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "support/test_world.h"

namespace colrow {
namespace {

// The message of the ConfigError that validate(tp, dp, world_size) throws, or
// "" (and a test failure) when it throws nothing or something else.
std::string validate_error(int tp, int dp, int world_size) {
  try {
    ProcessMesh::validate(tp, dp, world_size);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "validate(" << tp << ", " << dp << ", " << world_size
                  << ") threw something other than ConfigError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "validate(" << tp << ", " << dp << ", " << world_size << ") did not throw";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ProcessMeshValidateTest, AcceptsEveryFactorization) {
  for (int world_size = 1; world_size <= 12; ++world_size) {
    for (int tp = 1; tp <= world_size; ++tp) {
      if (world_size % tp != 0) continue;
      EXPECT_NO_THROW(ProcessMesh::validate(tp, world_size / tp, world_size))
          << "tp " << tp << " x dp " << world_size / tp;
    }
  }
}

TEST(ProcessMeshValidateTest, ProductMustEqualTheWorldSize) {
  const std::string message = validate_error(2, 1, 3);
  EXPECT_EQ(message.rfind("[mesh] ", 0), 0u) << message;
  EXPECT_TRUE(contains(message, "tp (2) x dp (1) = 2 must equal the world size (3)")) << message;
}

TEST(ProcessMeshValidateTest, EveryMismatchNamesBothDegreesAndSuggestsAValidFix) {
  const std::regex suggestion("--tp ([0-9]+) --dp ([0-9]+)");
  for (int world_size = 1; world_size <= 8; ++world_size) {
    for (int tp = 1; tp <= 8; ++tp) {
      for (int dp = 1; dp <= 8; ++dp) {
        if (tp * dp == world_size) continue;
        const std::string message = validate_error(tp, dp, world_size);
        const std::string product = std::to_string(tp * dp);
        EXPECT_TRUE(contains(message, "tp (" + std::to_string(tp) + ")")) << message;
        EXPECT_TRUE(contains(message, "dp (" + std::to_string(dp) + ")")) << message;
        EXPECT_TRUE(contains(message, "world size (" + std::to_string(world_size) + ")"))
            << message;
        EXPECT_TRUE(contains(message, "= " + product + " ")) << message;
        std::smatch fix;
        if (!std::regex_search(message, fix, suggestion)) {
          ADD_FAILURE() << "no --tp/--dp suggestion in: " << message;
          continue;
        }
        const int tp_fix = std::stoi(fix[1]), dp_fix = std::stoi(fix[2]);
        EXPECT_EQ(tp_fix * dp_fix, world_size) << "the suggested fix is wrong: " << message;
      }
    }
  }
}

TEST(ProcessMeshValidateTest, ProductDoesNotOverflow) {
  // 65536 * 65536 wraps a 32-bit int to 0; it must still be reported as too large.
  const std::string message = validate_error(65536, 65536, 1);
  EXPECT_TRUE(contains(message, "= 4294967296 ")) << message;
}

TEST(ProcessMeshValidateTest, DegreesMustBePositive) {
  for (const auto& [tp, dp] : std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {-1, -1}, {-2, 2}}) {
    // tp * dp may even equal the world size; the sign is checked first.
    const std::string message = validate_error(tp, dp, tp * dp);
    EXPECT_EQ(message.rfind("[mesh] ", 0), 0u) << message;
    EXPECT_TRUE(contains(message, "tp (" + std::to_string(tp) + ")")) << message;
    EXPECT_TRUE(contains(message, "dp (" + std::to_string(dp) + ")")) << message;
    EXPECT_TRUE(contains(message, "at least 1")) << message;
  }
}

TEST(ProcessMeshTest, ConstructorValidatesBeforeSplitting) {
  Communicator& world = testing::world();
  // Identical on every rank, so every rank throws and none waits in a split.
  EXPECT_THROW(ProcessMesh(world, world.size() + 1, 1), ConfigError);
  EXPECT_THROW(ProcessMesh(world, world.size(), 0), ConfigError);
  RecordingCommunicator recording(world);
  EXPECT_THROW(ProcessMesh(recording, 1, world.size() + 1), ConfigError);
  EXPECT_TRUE(recording.events().empty());
  world.barrier();
}

// Every factorization tp x dp of the world size, in order of tp.
std::vector<int> tp_degrees(int world_size) {
  std::vector<int> degrees;
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp == 0) degrees.push_back(tp);
  }
  return degrees;
}

TEST(ProcessMeshTest, TpIsInnermostForEveryFactorization) {
  Communicator& world = testing::world();
  const int world_rank = world.rank(), world_size = world.size();
  for (int tp : tp_degrees(world_size)) {
    const int dp = world_size / tp;
    SCOPED_TRACE("tp " + std::to_string(tp) + " x dp " + std::to_string(dp));
    ProcessMesh mesh(world, tp, dp);
    EXPECT_EQ(&mesh.world(), &world);
    EXPECT_EQ(mesh.tp_size(), tp);
    EXPECT_EQ(mesh.dp_size(), dp);
    EXPECT_EQ(mesh.tp_rank(), world_rank % tp);
    EXPECT_EQ(mesh.dp_rank(), world_rank / tp);
    EXPECT_EQ(mesh.tp().name(), "tp");
    EXPECT_EQ(mesh.dp().name(), "dp");
    EXPECT_EQ(mesh.tp().rank(), mesh.tp_rank());
    EXPECT_EQ(mesh.dp().size(), mesh.dp_size());

    // The sum of the world ranks in my tp group: the block of tp consecutive
    // ranks starting at (r / tp) * tp.
    const int first = (world_rank / tp) * tp;
    Tensor rank_sum = Tensor::full({1}, static_cast<float>(world_rank));
    mesh.tp().all_reduce_sum(rank_sum);
    EXPECT_EQ(rank_sum.data()[0], static_cast<float>(tp * first + tp * (tp - 1) / 2));

    // The members themselves, in tp_rank order: first, first + 1, ...
    Tensor mine = Tensor::full({1}, static_cast<float>(world_rank));
    Tensor tp_members = Tensor::full({tp}, -1.0f);
    mesh.tp().all_gather(mine, tp_members);
    for (int k = 0; k < tp; ++k) {
      EXPECT_EQ(tp_members.data()[k], static_cast<float>(first + k)) << "tp member " << k;
    }
    // dp group: the ranks with my tp_rank, in dp_rank order: tp_rank, tp_rank + tp, ...
    Tensor dp_members = Tensor::full({dp}, -1.0f);
    mesh.dp().all_gather(mine, dp_members);
    for (int k = 0; k < dp; ++k) {
      EXPECT_EQ(dp_members.data()[k], static_cast<float>(world_rank % tp + k * tp))
          << "dp member " << k;
    }
  }
}

TEST(ProcessMeshTest, TwoByTwoAtWorldSizeFour) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "spells out the 2 x 2 mesh, which needs 4 ranks";
  ProcessMesh mesh(world, 2, 2);
  // world rank:  0 1 2 3
  // tp group:   {0,1} {2,3};  dp group: {0,2} {1,3}
  const int expected_tp_sum[] = {1, 1, 5, 5};
  const int expected_dp_sum[] = {2, 4, 2, 4};
  Tensor tp_sum = Tensor::full({1}, static_cast<float>(world.rank()));
  Tensor dp_sum = Tensor::full({1}, static_cast<float>(world.rank()));
  mesh.tp().all_reduce_sum(tp_sum);
  mesh.dp().all_reduce_sum(dp_sum);
  EXPECT_EQ(tp_sum.data()[0], expected_tp_sum[world.rank()]);
  EXPECT_EQ(dp_sum.data()[0], expected_dp_sum[world.rank()]);
}

TEST(ProcessMeshTest, GroupsOverARecordingWorldRecord) {
  // A mesh built over a recording world hands out recording groups, so a test
  // can watch a layer's tp collectives without touching the layer.
  Communicator& world = testing::world();
  RecordingCommunicator recording(world);
  ProcessMesh mesh(recording, world.size(), 1);
  EXPECT_TRUE(recording.events().empty());
  Tensor x = Tensor::full({2, 3}, 1.0f);
  mesh.tp().all_reduce_sum(x);
  EXPECT_EQ(x.data()[5], static_cast<float>(world.size()));
  auto* tp = dynamic_cast<RecordingCommunicator*>(&mesh.tp());
  EXPECT_NE(tp, nullptr);
  if (tp != nullptr) {
    EXPECT_EQ(tp->events(), (std::vector<CollectiveEvent>{{"all_reduce_sum", 6, 0.0}}));
  }
}

TEST(ProcessMeshTest, OverALocalCommunicator) {
  LocalCommunicator alone;
  ProcessMesh mesh(alone, 1, 1);
  EXPECT_EQ(mesh.tp_size(), 1);
  EXPECT_EQ(mesh.dp_size(), 1);
  EXPECT_EQ(mesh.tp_rank(), 0);
  EXPECT_EQ(mesh.dp_rank(), 0);
  EXPECT_THROW(ProcessMesh(alone, 2, 1), ConfigError);
}

}  // namespace
}  // namespace colrow
