// What the GPU communicator tests (staged, NCCL) check alike: each collective
// through the communicator under test against MPI on the world, on host copies
// of the same small-integer inputs (exact in any summation order), bad
// operands rejected on every rank, split groups, and point-to-point messages
// (a ring, and a pair exchange, as pipeline stages send activations one way and
// gradients the other). Header-only: each test binary includes it once.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/communicator.h"
#include "support/gpu.h"
#include "support/test_world.h"

namespace colrow::device_comm_testing {

inline constexpr int64_t kCounts[] = {1, 3, 1000};  // elements per rank

struct NodePlacement {
  int local_rank = 0;
  int local_ranks = 1;
};

// This rank's place on its node. Collective over the world on the first call,
// which every rank makes in the same test.
inline NodePlacement node_placement() {
  static const NodePlacement placement = [] {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    NodePlacement p;
    MPI_Comm_rank(node, &p.local_rank);
    MPI_Comm_size(node, &p.local_ranks);
    MPI_Comm_free(&node);
    return p;
  }();
  return placement;
}

inline Device gpu() {
  return testing::test_gpu(node_placement().local_rank);
}

// Whether a node runs more ranks than it has GPUs, so that two ranks use one
// (test_gpu is local rank mod GPUs). The same answer on every rank.
inline bool ranks_share_a_gpu() {
  static const bool shared = [] {
    int mine = node_placement().local_ranks > cuda_device_count() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return mine != 0;
  }();
  return shared;
}

// Rank q's input on the host: small integers of both signs, different per rank.
inline Tensor input(const Shape& shape, int q, int salt) {
  Tensor t = Tensor::empty(shape);
  for (int64_t k = 0; k < t.numel(); ++k) {
    t.data()[k] = static_cast<float>((q + 1) * (k % 13 - 6) + 7 * q + salt * (k % 5));
  }
  return t;
}

// `actual` (any device) must hold exactly the bits of `reference` (the host).
inline void expect_bitwise(const Tensor& actual, const Tensor& reference, const std::string& what) {
  ASSERT_EQ(actual.shape(), reference.shape()) << what;
  const std::vector<float> a = actual.to_vector(), r = reference.to_vector();
  int mismatches = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (std::memcmp(&a[k], &r[k], sizeof(float)) == 0) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << k << " is " << a[k] << ", MPI gives " << r[k];
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements that differ from MPI";
}

inline std::string label(const std::string& op, Communicator& c, Device d, int64_t n) {
  return op + " of " + std::to_string(n) + " on " + d.str() + " over " + c.name();
}

// Each check runs the collective through `c` on tensors on `d`, and through the
// MPI world on host copies of the same inputs.

inline void check_all_reduce(Communicator& c, Device d, int64_t n, bool max) {
  Tensor reference = input({n}, c.rank(), 1);
  Tensor x = reference.clone().to(d);
  if (max) {
    testing::world().all_reduce_max(reference);
    c.all_reduce_max(x);
  } else {
    testing::world().all_reduce_sum(reference);
    c.all_reduce_sum(x);
  }
  EXPECT_EQ(x.device(), d);
  expect_bitwise(x, reference, label(max ? "all_reduce_max" : "all_reduce_sum", c, d, n));
}

inline void check_all_gather(Communicator& c, Device d, int64_t n) {
  const Tensor in_host = input({n}, c.rank(), 2);
  Tensor reference = Tensor::full({c.size() * n}, -1.0f);
  testing::world().all_gather(in_host, reference);
  const Tensor in = in_host.clone().to(d);
  Tensor out = Tensor::full({c.size() * n}, -1.0f, d);
  c.all_gather(in, out);
  expect_bitwise(out, reference, label("all_gather", c, d, n));
  expect_bitwise(in, in_host, label("all_gather leaves its input alone", c, d, n));
}

inline void check_reduce_scatter_sum(Communicator& c, Device d, int64_t n) {
  const Tensor in_host = input({c.size() * n}, c.rank(), 3);
  Tensor reference = Tensor::full({n}, -1.0f);
  testing::world().reduce_scatter_sum(in_host, reference);
  Tensor out = Tensor::full({n}, -1.0f, d);
  c.reduce_scatter_sum(in_host.clone().to(d), out);
  expect_bitwise(out, reference, label("reduce_scatter_sum", c, d, n));
}

inline void check_broadcast_from_every_root(Communicator& c, Device d, int64_t n) {
  for (int root = 0; root < c.size(); ++root) {
    Tensor reference = input({n}, c.rank(), 4);
    Tensor x = reference.clone().to(d);
    testing::world().broadcast(reference, root);
    c.broadcast(x, root);
    expect_bitwise(x, reference, label("broadcast", c, d, n) + " from " + std::to_string(root));
  }
}

inline void check_every_collective(Communicator& c, Device d) {
  for (int64_t n : kCounts) {
    check_all_reduce(c, d, n, false);
    check_all_reduce(c, d, n, true);
    check_all_gather(c, d, n);
    check_reduce_scatter_sum(c, d, n);
    check_broadcast_from_every_root(c, d, n);
  }
}

// The error must be thrown on every rank before anything is sent, or the test hangs.
inline void expect_internal_error(const std::function<void()>& call, const std::string& part,
                                  const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << what << ": " << e.what();
  }
}

inline void check_rejects_bad_operands(Communicator& c, Device d) {
  const int size = c.size();
  Tensor strided = Tensor::zeros({4, 6}, d).slice(1, 0, 3);  // [4, 3], rows 6 apart
  Tensor strided_in = Tensor::zeros({4 * size, 6}, d).slice(1, 0, 3);
  Tensor block = Tensor::zeros({4, 3}, d);
  Tensor gathered = Tensor::zeros({4 * size, 3}, d);
  expect_internal_error([&] { c.all_reduce_sum(strided); }, "contiguous", "all_reduce_sum");
  expect_internal_error([&] { c.all_reduce_max(strided); }, "contiguous", "all_reduce_max");
  expect_internal_error([&] { c.broadcast(strided, 0); }, "contiguous", "broadcast");
  expect_internal_error([&] { c.all_gather(strided, gathered); }, "contiguous", "all_gather");
  expect_internal_error([&] { c.reduce_scatter_sum(strided_in, block); }, "contiguous",
                        "reduce_scatter_sum");
  Tensor too_big = Tensor::zeros({4 * size + 1, 3}, d);
  expect_internal_error([&] { c.all_gather(block, too_big); }, "must hold", "all_gather shape");
  Tensor host_block = Tensor::zeros({4, 3});
  expect_internal_error([&] { c.all_gather(host_block, gathered); }, "all on the host or all on",
                        "all_gather from the host into the GPU");
}

// Each rank sends to the next and receives from the previous one (a ring),
// on tensors on `d`; the message must be the sender's input, bit for bit.
inline void check_ring_exchange(Communicator& c, Device d, int64_t n, DType dtype = DType::kF32) {
  if (c.size() < 2) return;
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  const Tensor out = input({n}, c.rank(), 6).to(d).to(dtype);
  Tensor in = Tensor::full({n}, -1.0f, d).to(dtype);
  std::unique_ptr<PendingCollective> sent = c.start_send(out, next, /*tag=*/0);
  c.recv(in, prev, /*tag=*/0);
  sent->wait();
  EXPECT_EQ(in.dtype(), dtype);
  expect_bitwise(in, input({n}, prev, 6).to(dtype),
                 label(std::string("ring exchange, ") + dtype_name(dtype), c, d, n));
}

// Ranks 2k and 2k + 1 swap messages on two tags, each sending first: 2k
// sends forward on tag 0 and receives on tag 1, 2k + 1 the reverse (a
// pipeline's activations and gradients). An odd last rank sits out.
inline void check_pair_exchange(Communicator& c, Device d, int64_t n) {
  const int rank = c.rank(), partner = rank ^ 1;
  if (partner >= c.size()) return;
  const bool first = rank % 2 == 0;
  const Tensor out = input({n}, rank, 7).to(d);
  Tensor in = Tensor::full({n}, -1.0f, d);
  std::unique_ptr<PendingCollective> sent = c.start_send(out, partner, first ? 0 : 1);
  c.recv(in, partner, first ? 1 : 0);
  sent->wait();
  expect_bitwise(in, input({n}, partner, 7), label("pair exchange", c, d, n));
}

inline void check_rejects_bad_peers(Communicator& c, Device d) {
  Tensor x = Tensor::zeros({3}, d);
  expect_internal_error([&] { c.start_send(x, c.rank(), 0); }, "must differ from this rank",
                        "send to oneself");
  expect_internal_error([&] { c.recv(x, c.size(), 0); }, "must be a rank of",
                        "receive from past the group");
  if (c.size() < 2) return;  // a group of one has no peer to try the rest with
  const int next = (c.rank() + 1) % c.size();
  expect_internal_error([&] { c.recv(x, next, -1); }, "tag (-1)", "negative tag");
  Tensor strided = Tensor::zeros({4, 6}, d).slice(1, 0, 3);
  expect_internal_error([&] { c.start_send(strided, next, 0); }, "contiguous", "strided send");
}

inline void check_split(Communicator& c, Device d) {
  const int size = c.size(), rank = c.rank();
  std::unique_ptr<Communicator> reversed = c.split(0, size - 1 - rank, "reversed");
  EXPECT_EQ(reversed->size(), size);
  EXPECT_EQ(reversed->rank(), size - 1 - rank);
  EXPECT_EQ(reversed->name(), "reversed");
  // [2, 3] per rank: block b of the gather comes from world rank size - 1 - b.
  Tensor in = Tensor::full({2, 3}, static_cast<float>(rank), d);
  Tensor out = Tensor::full({2 * size, 3}, -1.0f, d);
  reversed->all_gather(in, out);
  const std::vector<float> v = out.to_vector();
  for (size_t k = 0; k < v.size(); ++k) {
    EXPECT_EQ(v[k], static_cast<float>(size - 1 - static_cast<int>(k / 6))) << "element " << k;
  }
  check_all_reduce(*reversed, d, 1000, false);

  // Groups of one return at once; gather and scatter copy.
  std::unique_ptr<Communicator> alone = c.split(rank, 0, "alone");
  EXPECT_EQ(alone->size(), 1);
  const Tensor mine = input({3}, rank, 5);
  Tensor x = mine.clone().to(d);
  alone->all_reduce_sum(x);
  expect_bitwise(x, mine, "all_reduce_sum over a group of one");
  Tensor copied = Tensor::full({3}, -1.0f, d);
  alone->all_gather(x, copied);
  expect_bitwise(copied, mine, "all_gather over a group of one");
  copied.fill(-1.0f);
  alone->reduce_scatter_sum(x, copied);
  expect_bitwise(copied, mine, "reduce_scatter_sum over a group of one");
}

}  // namespace colrow::device_comm_testing
