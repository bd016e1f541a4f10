// The operand checks every Communicator backend runs before it communicates
// (MPI, shared memory, local, host-staged, NCCL), with one message each. They run at every group
// size, so a wrong operand fails at tp = 1 too, and on every rank alike,
// before anything is sent: no rank is left waiting in a collective.
#pragma once

#include <initializer_list>
#include <string>

#include "colrow/core/tensor.h"

namespace colrow::collective_checks {

// InternalError unless t is in host memory: GPU tensors reach MPI and shared
// memory only through a device communicator, which stages them or hands them
// to NCCL; a device pointer read as host memory would crash or corrupt.
void require_host(const Tensor& t, const char* what, const std::string& group);
// InternalError unless t is contiguous.
void require_contiguous(const Tensor& t, const char* what, const std::string& group);
// Both: what the host backends (MPI, shared memory) need of every operand.
void require_host_contiguous(const Tensor& t, const char* what, const std::string& group);
// InternalError unless every tensor is bf16: what the *_bf16_wire sums carry.
void require_bf16(std::initializer_list<const Tensor*> tensors, const char* what,
                  const std::string& group);
// out: [size * n, ...] for in: [n, ...] (all_gather along dim 0).
void require_gather_sizes(const Tensor& in, const Tensor& out, int size, const std::string& group);
// in: [size * n, ...] for out: [n, ...] (reduce_scatter_sum along dim 0).
void require_scatter_sizes(const Tensor& in, const Tensor& out, int size, const std::string& group);
// 0 <= root < size.
void require_root(int root, int size, const std::string& group);
// Point to point (`what`: "send" or "recv"): `peer` (named `role`, "dst" or
// "src") is a rank of the group other than `rank`, and 0 <= tag <= kMaxTag.
// A message to oneself would wait for a receive this rank cannot post.
void require_peer(int peer, const char* role, int rank, int size, const char* what,
                  const std::string& group);
void require_tag(int tag, const char* what, const std::string& group);
// Both, as every backend's start_send and recv check them.
void require_peer_and_tag(int peer, const char* role, int tag, int rank, int size, const char* what,
                          const std::string& group);
// recv: the matched message's `sent_bytes` must be x's bytes (its count of
// its dtype). The InternalError names the source, the tag and both counts (in
// x's elements; in bytes when the message is not a whole number of them); the
// caller has already taken the message off its channel, so its sender is free.
void require_message_bytes(int64_t sent_bytes, const Tensor& x, int src, int tag,
                           const std::string& group);

}  // namespace colrow::collective_checks
