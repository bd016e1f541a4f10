// The region mappings (mappings.h): forward and backward of copy_to_tp,
// reduce_from_tp, scatter_to_tp, gather_from_tp, gather_from_sp and
// reduce_scatter_to_sp, with exact values from small rank-dependent integers, on
// the world as the tp group and on the tp group of every tp x dp mesh; plus the
// one collective (or none) each direction records, and the shape checks.
#include "colrow/dist/mappings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/dist/recording_communicator.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using Fill = std::function<float(int64_t, int64_t)>;

// A [rows, cols] tensor holding value(i, j) at (i, j).
Tensor matrix(int64_t rows, int64_t cols, const Fill& value) {
  Tensor t = Tensor::empty({rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t(i, j) = value(i, j);
  }
  return t;
}

// Exact comparison (integers well below 2^24 add exactly in fp32 in any order);
// reports the first few mismatches only.
void expect_matrix(const Tensor& t, const Shape& shape, const Fill& expected,
                   const std::string& what) {
  ASSERT_EQ(t.shape(), shape) << what;  // no collective follows inside this helper
  int mismatches = 0;
  for (int64_t i = 0; i < shape[0]; ++i) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      if (t(i, j) == expected(i, j)) continue;
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << ": (" << i << ", " << j << ") is " << t(i, j) << ", expected "
                      << expected(i, j);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": mismatching elements";
}

// The sizes every check uses over a group of `tp` ranks: each rank holds
// kTokensLocal tokens under sequence parallelism and kHiddenLocal columns of a
// last-dim shard, so both splits divide.
constexpr int64_t kTokensLocal = 2;
constexpr int64_t kHiddenLocal = 3;

// Runs every mapping in both directions over `tp` (called by every rank of it)
// and compares with values computed from tp.rank() and tp.size() alone.
// `base` differs between tp groups of one mesh, so a value that leaked in from
// another group would show.
void check_all_mappings(Communicator& tp, float base) {
  const int tp_size = tp.size(), tp_rank = tp.rank();
  const int64_t tokens = kTokensLocal * tp_size, hidden = kHiddenLocal * tp_size;
  const std::string group = " over " + tp.name() + " of size " + std::to_string(tp_size);
  // Partial sums: rank q holds (q + 1) * (10 i + j); their sum over the group.
  auto partial = [base](int q, int64_t i, int64_t j) {
    return base + static_cast<float>((q + 1) * (10 * i + j));
  };
  auto summed = [&](int64_t i, int64_t j) {
    float s = 0.0f;
    for (int q = 0; q < tp_size; ++q) s += partial(q, i, j);
    return s;
  };
  // Replicated values, and the rank-tagged shard rank q holds of a full tensor.
  auto replicated = [base](int64_t i, int64_t j) { return base + static_cast<float>(100 * i + j); };
  auto tagged = [base](int q, int64_t i, int64_t j) {
    return base + static_cast<float>(1000 * q + 10 * i + j);
  };

  {  // copy_to_tp (f): identity forward, all-reduce backward.
    Tensor x = matrix(tokens, hidden, replicated);
    copy_to_tp_forward(x, tp);
    expect_matrix(x, {tokens, hidden}, replicated, "copy_to_tp forward" + group);
    Tensor dx =
        matrix(tokens, hidden, [&](int64_t i, int64_t j) { return partial(tp_rank, i, j); });
    copy_to_tp_backward(dx, tp);
    expect_matrix(dx, {tokens, hidden}, summed, "copy_to_tp backward" + group);
  }
  {  // reduce_from_tp (g): all-reduce forward, identity backward.
    Tensor y = matrix(tokens, hidden, [&](int64_t i, int64_t j) { return partial(tp_rank, i, j); });
    reduce_from_tp_forward(y, tp);
    expect_matrix(y, {tokens, hidden}, summed, "reduce_from_tp forward" + group);
    Tensor dy = matrix(tokens, hidden, replicated);
    reduce_from_tp_backward(dy, tp);
    expect_matrix(dy, {tokens, hidden}, replicated, "reduce_from_tp backward" + group);
  }
  // Last-dim shards: column c of rank q's shard is column q * kHiddenLocal + c.
  auto my_columns = [&](int64_t i, int64_t c) { return replicated(i, tp_rank * kHiddenLocal + c); };
  auto assembled = [&](int64_t i, int64_t j) {
    return tagged(static_cast<int>(j / kHiddenLocal), i, j % kHiddenLocal);
  };
  {  // scatter_to_tp: keep my last-dim slice forward, all-gather last dim backward.
    const Tensor x = matrix(tokens, hidden, replicated);
    Tensor x_local = Tensor::full({tokens, kHiddenLocal}, -1.0f);
    scatter_to_tp_forward(x, x_local, tp);
    expect_matrix(x_local, {tokens, kHiddenLocal}, my_columns, "scatter_to_tp forward" + group);
    const Tensor dx_local =
        matrix(tokens, kHiddenLocal, [&](int64_t i, int64_t c) { return tagged(tp_rank, i, c); });
    Tensor dx = Tensor::full({tokens, hidden}, -1.0f);
    scatter_to_tp_backward(dx_local, dx, tp);
    expect_matrix(dx, {tokens, hidden}, assembled, "scatter_to_tp backward" + group);
  }
  {  // gather_from_tp: all-gather last dim forward, keep my last-dim slice backward.
    const Tensor x_local =
        matrix(tokens, kHiddenLocal, [&](int64_t i, int64_t c) { return tagged(tp_rank, i, c); });
    Tensor x = Tensor::full({tokens, hidden}, -1.0f);
    gather_from_tp_forward(x_local, x, tp);
    expect_matrix(x, {tokens, hidden}, assembled, "gather_from_tp forward" + group);
    const Tensor dx = matrix(tokens, hidden, replicated);
    Tensor dx_local = Tensor::full({tokens, kHiddenLocal}, -1.0f);
    gather_from_tp_backward(dx, dx_local, tp);
    expect_matrix(dx_local, {tokens, kHiddenLocal}, my_columns, "gather_from_tp backward" + group);
  }
  // Token-dim shards: row t of rank q's block is token q * kTokensLocal + t.
  auto stacked = [&](int64_t i, int64_t j) {
    return tagged(static_cast<int>(i / kTokensLocal), i % kTokensLocal, j);
  };
  auto my_summed_tokens = [&](int64_t t, int64_t j) {
    return summed(tp_rank * kTokensLocal + t, j);
  };
  {  // gather_from_sp: all-gather tokens forward, reduce-scatter tokens backward.
    const Tensor x_local =
        matrix(kTokensLocal, hidden, [&](int64_t t, int64_t j) { return tagged(tp_rank, t, j); });
    Tensor x = Tensor::full({tokens, hidden}, -1.0f);
    gather_from_sp_forward(x_local, x, tp);
    expect_matrix(x, {tokens, hidden}, stacked, "gather_from_sp forward" + group);
    const Tensor dx =
        matrix(tokens, hidden, [&](int64_t i, int64_t j) { return partial(tp_rank, i, j); });
    Tensor dx_local = Tensor::full({kTokensLocal, hidden}, -1.0f);
    gather_from_sp_backward(dx, dx_local, tp);
    expect_matrix(dx_local, {kTokensLocal, hidden}, my_summed_tokens,
                  "gather_from_sp backward" + group);
  }
  {  // reduce_scatter_to_sp: reduce-scatter tokens forward, all-gather tokens backward.
    const Tensor x =
        matrix(tokens, hidden, [&](int64_t i, int64_t j) { return partial(tp_rank, i, j); });
    Tensor x_local = Tensor::full({kTokensLocal, hidden}, -1.0f);
    reduce_scatter_to_sp_forward(x, x_local, tp);
    expect_matrix(x_local, {kTokensLocal, hidden}, my_summed_tokens,
                  "reduce_scatter_to_sp forward" + group);
    const Tensor dx_local =
        matrix(kTokensLocal, hidden, [&](int64_t t, int64_t j) { return tagged(tp_rank, t, j); });
    Tensor dx = Tensor::full({tokens, hidden}, -1.0f);
    reduce_scatter_to_sp_backward(dx_local, dx, tp);
    expect_matrix(dx, {tokens, hidden}, stacked, "reduce_scatter_to_sp backward" + group);
  }
}

TEST(MappingsTest, TpIsTheWorld) {
  check_all_mappings(testing::world(), 0.0f);
}

TEST(MappingsTest, TpIsOneProcess) {
  LocalCommunicator alone("tp");
  check_all_mappings(alone, 0.0f);
}

TEST(MappingsTest, TpGroupOfEveryMesh) {
  Communicator& world = testing::world();
  for (int tp = 1; tp <= world.size(); ++tp) {
    if (world.size() % tp != 0) continue;
    SCOPED_TRACE("tp " + std::to_string(tp) + " x dp " + std::to_string(world.size() / tp));
    ProcessMesh mesh(world, tp, /*pp=*/1, world.size() / tp);
    check_all_mappings(mesh.tp(), 100000.0f * static_cast<float>(mesh.dp_rank()));
  }
}

TEST(MappingsTest, TpHalfOfFourRanks) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "the tp = 2 x dp = 2 mesh needs 4 ranks";
  ProcessMesh mesh(world, 2, /*pp=*/1, 2);
  ASSERT_EQ(mesh.tp_size(), 2);
  check_all_mappings(mesh.tp(), 100000.0f * static_cast<float>(mesh.dp_rank()));
  // Spelled out for world rank 1 (tp_rank 1 of {0, 1}): gather_from_tp of
  // [1, 1] shards holding the world rank gives [world rank of tp_rank 0, 1].
  Tensor mine = Tensor::full({1, 1}, static_cast<float>(world.rank()));
  Tensor both = Tensor::full({1, 2}, -1.0f);
  gather_from_tp_forward(mine, both, mesh.tp());
  const float first = static_cast<float>(2 * mesh.dp_rank());
  EXPECT_EQ(both(0, 0), first);
  EXPECT_EQ(both(0, 1), first + 1.0f);
}

TEST(MappingsTest, GathersReuseTheirStagingAcrossShapes) {
  // A large gather, then a smaller and a differently shaped one: the staging
  // buffer behind last-dim gathers must not leak stale values into the result.
  Communicator& tp = testing::world();
  const int tp_size = tp.size(), tp_rank = tp.rank();
  for (const auto& [tokens, h_local] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 5}, {2, 1}, {3, 4}, {8, 5}}) {
    const Tensor x_local = matrix(tokens, h_local, [&](int64_t i, int64_t c) {
      return static_cast<float>(1000 * tp_rank + 10 * i + c);
    });
    Tensor x = Tensor::full({tokens, h_local * tp_size}, -1.0f);
    gather_from_tp_forward(x_local, x, tp);
    expect_matrix(
        x, {tokens, h_local * tp_size},
        [&](int64_t i, int64_t j) {
          return static_cast<float>(1000 * (j / h_local) + 10 * i + j % h_local);
        },
        "gather_from_tp forward of [" + std::to_string(tokens) + ", " + std::to_string(h_local) +
            "] shards");
  }
}

TEST(MappingsTest, LastDimMappingsAcceptStridedViews) {
  // A rank's column block of a wider activation is a strided view; the
  // last-dim mappings read and write through it.
  Communicator& tp = testing::world();
  const int tp_size = tp.size(), tp_rank = tp.rank();
  const int64_t tokens = 3, hidden = 2 * tp_size;
  const Tensor wide = matrix(tokens, hidden + 4,
                             [](int64_t i, int64_t j) { return static_cast<float>(100 * i + j); });
  const Tensor x = wide.slice(1, 2, hidden);  // columns 2 .. hidden + 1
  Tensor out_wide = Tensor::full({tokens, 2 * 2 + 1}, -1.0f);
  Tensor x_local = out_wide.slice(1, 1, 2);  // a strided destination
  scatter_to_tp_forward(x, x_local, tp);
  expect_matrix(
      x_local, {tokens, 2},
      [&](int64_t i, int64_t c) { return static_cast<float>(100 * i + 2 + 2 * tp_rank + c); },
      "scatter_to_tp forward through views");
  Tensor full_wide = Tensor::full({tokens, hidden + 1}, -1.0f);
  Tensor full = full_wide.slice(1, 1, hidden);
  gather_from_tp_forward(x_local, full, tp);
  expect_matrix(
      full, {tokens, hidden},
      [](int64_t i, int64_t j) { return static_cast<float>(100 * i + 2 + j); },
      "gather_from_tp forward of the scattered view");
  expect_matrix(
      full_wide.slice(1, 0, 1), {tokens, 1}, [](int64_t, int64_t) { return -1.0f; },
      "columns outside the destination view");
}

// The events one call records on a fresh RecordingCommunicator over `tp`.
template <typename Call>
std::vector<CollectiveEvent> events_of(Communicator& tp, Call call) {
  RecordingCommunicator recording(tp);
  call(recording);
  return recording.events();
}

TEST(MappingsTest, EachDirectionRecordsItsOneCollective) {
  Communicator& world = testing::world();
  const int tp_size = world.size();
  const int64_t tokens = kTokensLocal * tp_size, hidden = kHiddenLocal * tp_size;
  const int64_t full = tokens * hidden, shard = full / tp_size;
  using Events = std::vector<CollectiveEvent>;
  const Events none;
  const Events all_reduce = {{"all_reduce_sum", full, 0.0}};
  const Events all_gather_shard = {{"all_gather", shard, 0.0}};
  const Events reduce_scatter_full = {{"reduce_scatter_sum", full, 0.0}};
  // Every gather goes through the communicator, at tp = 1 too (the size-1
  // shortcut lives inside it), so the recorded sequence is the same at every tp.
  const Events last_dim_gather = all_gather_shard;

  Tensor x = Tensor::zeros({tokens, hidden});
  Tensor x_tp_local = Tensor::zeros({tokens, hidden / tp_size});
  Tensor x_sp_local = Tensor::zeros({tokens / tp_size, hidden});

  EXPECT_EQ(events_of(world, [&](Communicator& c) { copy_to_tp_forward(x, c); }), none);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { copy_to_tp_backward(x, c); }), all_reduce);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { reduce_from_tp_forward(x, c); }), all_reduce);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { reduce_from_tp_backward(x, c); }), none);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { scatter_to_tp_forward(x, x_tp_local, c); }),
            none);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { scatter_to_tp_backward(x_tp_local, x, c); }),
            last_dim_gather);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { gather_from_tp_forward(x_tp_local, x, c); }),
            last_dim_gather);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { gather_from_tp_backward(x, x_tp_local, c); }),
            none);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { gather_from_sp_forward(x_sp_local, x, c); }),
            all_gather_shard);
  EXPECT_EQ(events_of(world, [&](Communicator& c) { gather_from_sp_backward(x, x_sp_local, c); }),
            reduce_scatter_full);
  EXPECT_EQ(
      events_of(world, [&](Communicator& c) { reduce_scatter_to_sp_forward(x, x_sp_local, c); }),
      reduce_scatter_full);
  EXPECT_EQ(
      events_of(world, [&](Communicator& c) { reduce_scatter_to_sp_backward(x_sp_local, x, c); }),
      all_gather_shard);
}

TEST(MappingsTest, WrongShapesThrowBeforeCommunicating) {
  // Shapes are identical on every rank, so every rank throws and none waits.
  Communicator& tp = testing::world();
  const int tp_size = tp.size();
  const int64_t tokens = kTokensLocal * tp_size, hidden = kHiddenLocal * tp_size;
  const Tensor x = Tensor::zeros({tokens, hidden});
  Tensor too_wide = Tensor::zeros({tokens, hidden / tp_size + 1});
  Tensor too_long = Tensor::zeros({tokens / tp_size + 1, hidden});
  Tensor out = Tensor::zeros({tokens, hidden});
  EXPECT_THROW(scatter_to_tp_forward(x, too_wide, tp), InternalError);
  EXPECT_THROW(gather_from_tp_forward(too_wide, out, tp), InternalError);
  EXPECT_THROW(gather_from_tp_backward(x, too_wide, tp), InternalError);
  EXPECT_THROW(scatter_to_tp_backward(too_wide, out, tp), InternalError);
  EXPECT_THROW(gather_from_sp_forward(too_long, out, tp), InternalError);
  EXPECT_THROW(gather_from_sp_backward(x, too_long, tp), InternalError);
  EXPECT_THROW(reduce_scatter_to_sp_forward(x, too_long, tp), InternalError);
  EXPECT_THROW(reduce_scatter_to_sp_backward(too_long, out, tp), InternalError);
  tp.barrier();
}

TEST(MappingsTest, IndivisibleDimensionsThrowBeforeCommunicating) {
  Communicator& tp = testing::world();
  const int tp_size = tp.size();
  if (tp_size == 1) GTEST_SKIP() << "every size divides by tp = 1";
  const Tensor odd = Tensor::zeros({tp_size + 1, tp_size + 1});
  Tensor local = Tensor::zeros({1, 1});
  EXPECT_THROW(scatter_to_tp_forward(odd, local, tp), InternalError);
  EXPECT_THROW(gather_from_tp_backward(odd, local, tp), InternalError);
  EXPECT_THROW(gather_from_sp_backward(odd, local, tp), InternalError);
  EXPECT_THROW(reduce_scatter_to_sp_forward(odd, local, tp), InternalError);
  Tensor odd_out = Tensor::zeros({tp_size + 1, tp_size + 1});
  EXPECT_THROW(gather_from_tp_forward(local, odd_out, tp), InternalError);
  EXPECT_THROW(gather_from_sp_forward(local, odd_out, tp), InternalError);
  tp.barrier();
}

}  // namespace
}  // namespace colrow
