// ProcessMesh: validate() as a pure function (ConfigError naming tp, pp, dp
// and the world size, with a suggested fix that is itself valid and names
// --pp only when pp was asked for; degrees < 1), and the tp x pp x dp groups
// for every factorization of the world size: world rank
// r = (dp_rank * pp + pp_rank) * tp + tp_rank, shown by all-gathering the
// world ranks of each group. At np 4 four layouts are spelled out member by
// member, and the pp group passes messages on every CPU transport.
#include "colrow/dist/process_mesh.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/profiled_communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "dist/shm/shm_communicator.h"
#include "support/test_world.h"

namespace colrow {
namespace {

// The message of the ConfigError that validate(tp, pp, dp, world_size)
// throws, or "" (and a test failure) when it throws nothing or something else.
std::string validate_error(int tp, int pp, int dp, int world_size) {
  const std::string call = "validate(" + std::to_string(tp) + ", " + std::to_string(pp) + ", " +
                           std::to_string(dp) + ", " + std::to_string(world_size) + ")";
  try {
    ProcessMesh::validate(tp, pp, dp, world_size);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << call << " threw something other than ConfigError: " << e.what();
    return "";
  }
  ADD_FAILURE() << call << " did not throw";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Degrees {
  int tp, pp, dp;
};

std::string to_string(const Degrees& d) {
  return "tp " + std::to_string(d.tp) + " x pp " + std::to_string(d.pp) + " x dp " +
         std::to_string(d.dp);
}

// Every factorization tp x pp x dp of world_size, in order of tp, then pp.
std::vector<Degrees> factorizations(int world_size) {
  std::vector<Degrees> all;
  for (int tp = 1; tp <= world_size; ++tp) {
    for (int pp = 1; tp * pp <= world_size; ++pp) {
      if (world_size % (tp * pp) == 0) all.push_back({tp, pp, world_size / (tp * pp)});
    }
  }
  return all;
}

// --tp 0 takes what pp and dp leave of the world; a given tp stays; a world
// the others do not divide still gives at least 1, for validate() to refuse.
TEST(ProcessMeshValidateTest, ResolveTpTakesWhatPpAndDpLeave) {
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 1, 1, 8), 8);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 2, 2, 8), 2);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 4, 1, 8), 2);
  EXPECT_EQ(ProcessMesh::resolve_tp(3, 2, 2, 8), 3);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 4, 4, 8), 1);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 0, 0, 6), 6);  // bad degrees: validate() names them
}

TEST(ProcessMeshValidateTest, AcceptsEveryFactorization) {
  for (int world_size = 1; world_size <= 12; ++world_size) {
    for (const Degrees& d : factorizations(world_size)) {
      EXPECT_NO_THROW(ProcessMesh::validate(d.tp, d.pp, d.dp, world_size)) << to_string(d);
    }
  }
}

TEST(ProcessMeshValidateTest, ProductMustEqualTheWorldSize) {
  const std::string message = validate_error(2, 2, 1, 2);
  EXPECT_EQ(message.rfind("[mesh] ", 0), 0u) << message;
  EXPECT_TRUE(contains(message,
                       "[mesh] tp (2) x pp (2) x dp (1) = 4 must equal the world size (2). "
                       "Launch with mpirun -np 4, or choose tp x pp x dp = 2"))
      << message;
  EXPECT_TRUE(contains(message, "(e.g. --tp 2 --pp 1 --dp 1)")) << message;
}

TEST(ProcessMeshValidateTest, FixKeepsTpAndPpWhenTheWorldAllows) {
  const std::string message = validate_error(2, 2, 1, 8);
  EXPECT_TRUE(contains(message, "(e.g. --tp 2 --pp 2 --dp 2)")) << message;
}

TEST(ProcessMeshValidateTest, WithoutPipelineTheFixNamesNoPp) {
  // Tools with no pipeline stages pass pp = 1 and have no --pp flag.
  const std::string message = validate_error(2, 1, 1, 3);
  EXPECT_TRUE(contains(message, "tp (2) x pp (1) x dp (1) = 2 must equal the world size (3)"))
      << message;
  EXPECT_TRUE(contains(message, "(e.g. --tp 3 --dp 1)")) << message;
  EXPECT_FALSE(contains(message, "--pp")) << message;
}

TEST(ProcessMeshValidateTest, EveryMismatchNamesTheDegreesAndSuggestsAValidFix) {
  const std::regex suggestion("--tp ([0-9]+)( --pp ([0-9]+))? --dp ([0-9]+)");
  for (int world_size = 1; world_size <= 8; ++world_size) {
    for (int tp = 1; tp <= 6; ++tp) {
      for (int pp = 1; pp <= 6; ++pp) {
        for (int dp = 1; dp <= 6; ++dp) {
          if (tp * pp * dp == world_size) continue;
          const std::string message = validate_error(tp, pp, dp, world_size);
          EXPECT_TRUE(contains(message, "tp (" + std::to_string(tp) + ") x pp (" +
                                            std::to_string(pp) + ") x dp (" + std::to_string(dp) +
                                            ") = " + std::to_string(tp * pp * dp) + " "))
              << message;
          EXPECT_TRUE(contains(message, "world size (" + std::to_string(world_size) + ")"))
              << message;
          std::smatch fix;
          if (!std::regex_search(message, fix, suggestion)) {
            ADD_FAILURE() << "no --tp/--dp suggestion in: " << message;
            continue;
          }
          const bool names_pp = fix[2].matched;
          EXPECT_EQ(names_pp, pp != 1) << message;
          const int pp_fix = names_pp ? std::stoi(fix[3]) : 1;
          EXPECT_EQ(std::stoi(fix[1]) * pp_fix * std::stoi(fix[4]), world_size)
              << "the suggested fix is wrong: " << message;
        }
      }
    }
  }
}

TEST(ProcessMeshValidateTest, ProductDoesNotOverflow) {
  // 65536 * 65536 wraps a 32-bit int to 0; it must still be reported as too large.
  EXPECT_TRUE(contains(validate_error(65536, 1, 65536, 1), "= 4294967296 "));
  EXPECT_TRUE(contains(validate_error(2048, 2048, 2048, 1), "= 8589934592 "));
  // Found while writing tests/fuzz/cli_flags_fuzz: three degrees near INT_MAX
  // overflowed int64 too (undefined behaviour); now "more than 2^63".
  const std::string message = validate_error(2097152, 2097152, 2097152, 4);
  EXPECT_TRUE(contains(message,
                       "= more than 2^63 must equal the world size (4). Choose tp x pp "
                       "x dp = 4 (e.g. --tp 4 --pp 1 --dp 1)."))
      << message;
  EXPECT_TRUE(contains(validate_error(2147483647, 2147483647, 2147483647, 1), "more than 2^63"));
}

// Found while writing tests/fuzz/cli_flags_fuzz: --pp 65536 --dp 65536 with
// --tp 0 overflowed pp x dp in an int (undefined behaviour).
TEST(ProcessMeshValidateTest, ResolveTpDoesNotOverflow) {
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 65536, 65536, 8), 1);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 2147483647, 2147483647, 2147483647), 1);
  EXPECT_EQ(ProcessMesh::resolve_tp(0, 1, 1, 2147483647), 2147483647);
}

TEST(ProcessMeshValidateTest, DegreesMustBePositive) {
  for (const auto& d : std::vector<Degrees>{
           {0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-1, -1, 1}, {-2, 1, 2}, {2, -1, -2}}) {
    // tp * pp * dp may even equal the world size; the sign is checked first.
    const std::string message = validate_error(d.tp, d.pp, d.dp, d.tp * d.pp * d.dp);
    EXPECT_EQ(message.rfind("[mesh] ", 0), 0u) << message;
    EXPECT_TRUE(contains(message, "tp (" + std::to_string(d.tp) + "), pp (" + std::to_string(d.pp) +
                                      ") and dp (" + std::to_string(d.dp) + ") must be at least 1"))
        << message;
    // The fix names exactly the flags that are wrong.
    EXPECT_EQ(contains(message, "--tp"), d.tp < 1) << message;
    EXPECT_EQ(contains(message, "--pp"), d.pp < 1) << message;
    EXPECT_EQ(contains(message, "--dp"), d.dp < 1) << message;
  }
}

TEST(ProcessMeshTest, ConstructorValidatesBeforeSplitting) {
  Communicator& world = testing::world();
  // Identical on every rank, so every rank throws and none waits in a split.
  EXPECT_THROW(ProcessMesh(world, world.size() + 1, 1, 1), ConfigError);
  EXPECT_THROW(ProcessMesh(world, world.size(), 1, 0), ConfigError);
  EXPECT_THROW(ProcessMesh(world, 1, 0, world.size()), ConfigError);
  RecordingCommunicator recording(world);
  EXPECT_THROW(ProcessMesh(recording, 1, 2, world.size()), ConfigError);
  EXPECT_THROW(ProcessMesh(recording, 1, world.size() + 1, 1, Device::cpu(), CommKind::kAuto),
               ConfigError);
  EXPECT_TRUE(recording.events().empty());
  world.barrier();
}

// The world ranks of `group`'s members, in group rank order (all-gathered).
std::vector<int> members(Communicator& group, int world_rank) {
  Tensor mine = Tensor::full({1}, static_cast<float>(world_rank));
  Tensor all = Tensor::full({group.size()}, -1.0f);
  group.all_gather(mine, all);
  std::vector<int> ranks;
  for (float r : all.to_vector()) ranks.push_back(static_cast<int>(r));
  return ranks;
}

// The members each group must have for world rank r under d, from the layout
// r = (dp_rank * pp + pp_rank) * tp + tp_rank.
std::vector<int> expected_tp(const Degrees& d, int r) {
  std::vector<int> ranks;
  for (int k = 0; k < d.tp; ++k) ranks.push_back(r - r % d.tp + k);
  return ranks;
}
std::vector<int> expected_pp(const Degrees& d, int r) {
  const int tp_rank = r % d.tp, dp_rank = r / (d.tp * d.pp);
  std::vector<int> ranks;
  for (int k = 0; k < d.pp; ++k) ranks.push_back((dp_rank * d.pp + k) * d.tp + tp_rank);
  return ranks;
}
// One replica's tp x pp ranks, in world order.
std::vector<int> expected_model_parallel(const Degrees& d, int r) {
  std::vector<int> ranks;
  const int first = r - r % (d.tp * d.pp);
  for (int k = 0; k < d.tp * d.pp; ++k) ranks.push_back(first + k);
  return ranks;
}
std::vector<int> expected_dp(const Degrees& d, int r) {
  std::vector<int> ranks;
  for (int k = 0; k < d.dp; ++k) ranks.push_back(r % (d.tp * d.pp) + k * d.tp * d.pp);
  return ranks;
}

TEST(ProcessMeshTest, TpInnermostThenPpThenDpForEveryFactorization) {
  Communicator& world = testing::world();
  const int r = world.rank();
  for (const Degrees& d : factorizations(world.size())) {
    SCOPED_TRACE(to_string(d));
    ProcessMesh mesh(world, d.tp, d.pp, d.dp);
    EXPECT_EQ(&mesh.world(), &world);
    EXPECT_EQ(mesh.tp_size(), d.tp);
    EXPECT_EQ(mesh.pp_size(), d.pp);
    EXPECT_EQ(mesh.dp_size(), d.dp);
    EXPECT_EQ(r, (mesh.dp_rank() * d.pp + mesh.pp_rank()) * d.tp + mesh.tp_rank());
    EXPECT_EQ(mesh.tp().name(), "tp");
    EXPECT_EQ(mesh.pp().name(), "pp");
    EXPECT_EQ(mesh.dp().name(), "dp");
    EXPECT_EQ(members(mesh.tp(), r), expected_tp(d, r));
    EXPECT_EQ(members(mesh.pp(), r), expected_pp(d, r));
    EXPECT_EQ(members(mesh.dp(), r), expected_dp(d, r));
    EXPECT_EQ(members(mesh.model_parallel(), r), expected_model_parallel(d, r));
  }
}

// The np 4 layouts written out: for each world rank 0..3, its tp, pp and dp
// groups' members in group rank order.
struct Layout {
  Degrees degrees;
  std::array<std::vector<int>, 4> tp, pp, dp;
};

TEST(ProcessMeshTest, FourRanksSpelledOut) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "spells out meshes of 4 ranks";
  const std::vector<Layout> layouts = {
      // Each stage is a tp pair: stage 0 = {0,1}, stage 1 = {2,3}.
      {{2, 2, 1},
       {{{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
       {{{0, 2}, {1, 3}, {0, 2}, {1, 3}}},
       {{{0}, {1}, {2}, {3}}}},
      // Two 2-stage pipelines, {0,1} and {2,3}, replicas of each other.
      {{1, 2, 2},
       {{{0}, {1}, {2}, {3}}},
       {{{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
       {{{0, 2}, {1, 3}, {0, 2}, {1, 3}}}},
      // One 4-stage pipeline.
      {{1, 4, 1},
       {{{0}, {1}, {2}, {3}}},
       {{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}},
       {{{0}, {1}, {2}, {3}}}},
      // The tp x dp mesh of before, pp = 1.
      {{2, 1, 2},
       {{{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
       {{{0}, {1}, {2}, {3}}},
       {{{0, 2}, {1, 3}, {0, 2}, {1, 3}}}},
  };
  const int r = world.rank();
  for (const Layout& l : layouts) {
    SCOPED_TRACE(to_string(l.degrees));
    ProcessMesh mesh(world, l.degrees.tp, l.degrees.pp, l.degrees.dp);
    EXPECT_EQ(members(mesh.tp(), r), l.tp[r]);
    EXPECT_EQ(members(mesh.pp(), r), l.pp[r]);
    EXPECT_EQ(members(mesh.dp(), r), l.dp[r]);
  }
}

TEST(ProcessMeshTest, DeviceMeshWrapsThePpGroupLikeTheOthers) {
  // On the CPU, --comm picks the pp group's transport as it does the
  // others', and messages pass between stages on each.
  Communicator& world = testing::world();
  const int r = world.rank(), stages = world.size();
  const bool one_node = testing::world_on_one_node();
  for (CommKind kind : {CommKind::kAuto, CommKind::kShm, CommKind::kMpi}) {
    SCOPED_TRACE(to_string(kind));
    if (!one_node && kind == CommKind::kShm) {
      // Across nodes shm is refused by name; auto takes Open MPI.
      EXPECT_THROW(ProcessMesh(world, 1, stages, 1, Device::cpu(), kind), ConfigError);
      continue;
    }
    ProcessMesh mesh(world, 1, stages, 1, Device::cpu(), kind);
    EXPECT_EQ(mesh.pp_rank(), r);
    Communicator& pp = dynamic_cast<ProfiledCommunicator&>(mesh.pp()).inner();
    const bool shared = dynamic_cast<ShmCommunicator*>(&pp) != nullptr;
    EXPECT_EQ(shared, stages > 1 && kind != CommKind::kMpi && one_node);
    if (stages == 1) {
      EXPECT_THROW(mesh.pp().start_send(Tensor::zeros({1}), 0, 0), InternalError);
      continue;
    }
    // Stage s sends its rank forward to s + 1 and receives from s - 1 (a ring).
    Tensor out = Tensor::full({3}, static_cast<float>(r));
    Tensor in = Tensor::full({3}, -1.0f);
    auto sent = mesh.pp().start_send(out, (r + 1) % stages, /*tag=*/0);
    mesh.pp().recv(in, (r + stages - 1) % stages, /*tag=*/0);
    sent->wait();
    EXPECT_EQ(in.to_vector(), std::vector<float>(3, static_cast<float>((r + stages - 1) % stages)));
  }
}

TEST(ProcessMeshTest, GroupsOverARecordingWorldRecord) {
  // A mesh built over a recording world hands out recording groups, so a test
  // can watch a layer's tp collectives without touching the layer.
  Communicator& world = testing::world();
  RecordingCommunicator recording(world);
  ProcessMesh mesh(recording, world.size(), 1, 1);
  EXPECT_TRUE(recording.events().empty());
  Tensor x = Tensor::full({2, 3}, 1.0f);
  mesh.tp().all_reduce_sum(x);
  EXPECT_EQ(x.data()[5], static_cast<float>(world.size()));
  auto* tp = dynamic_cast<RecordingCommunicator*>(&mesh.tp());
  EXPECT_NE(tp, nullptr);
  if (tp != nullptr) {
    EXPECT_EQ(tp->events(), (std::vector<CollectiveEvent>{{"all_reduce_sum", 6, 0.0}}));
  }
  EXPECT_NE(dynamic_cast<RecordingCommunicator*>(&mesh.pp()), nullptr);
}

TEST(ProcessMeshTest, OverALocalCommunicator) {
  LocalCommunicator alone;
  ProcessMesh mesh(alone, 1, 1, 1);
  EXPECT_EQ(mesh.tp_size(), 1);
  EXPECT_EQ(mesh.pp_size(), 1);
  EXPECT_EQ(mesh.dp_size(), 1);
  EXPECT_EQ(mesh.tp_rank(), 0);
  EXPECT_EQ(mesh.pp_rank(), 0);
  EXPECT_EQ(mesh.dp_rank(), 0);
  EXPECT_THROW(ProcessMesh(alone, 2, 1, 1), ConfigError);
  EXPECT_THROW(ProcessMesh(alone, 1, 2, 1), ConfigError);
}

}  // namespace
}  // namespace colrow
