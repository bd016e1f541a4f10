// The MPI backend of Communicator, and MpiSession, which owns MPI_Init /
// MPI_Finalize for the life of a program. Every MPI call is checked by
// COLROW_MPI_CHECK, which names the statement, MPI's message, file, line and rank.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "colrow/dist/communicator.h"

namespace colrow {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) unless it is MPI_COMM_WORLD.
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  MPI_Comm handle() const { return comm_; }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  void barrier() override;
  // MPI_Allreduce and MPI_Reduce_scatter_block on 16-bit elements with an
  // operation of this communicator's (widen, add, round once).
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  // MPI's non-blocking collectives (MPI_Iallreduce, ...). Open MPI moves them
  // on inside MPI calls, so they overlap little; correct either way.
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                        Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override;
  // MPI_Isend; MPI_Mprobe + MPI_Get_count + MPI_Mrecv, so a count other
  // than x's is an InternalError naming both counts, never a truncation.
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  // split(), keeping the MPI type (for wrappers that need the handle).
  std::unique_ptr<MpiCommunicator> split_group(int color, int key, const std::string& name);
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  // On x's elements (fp32, or 16-bit words for the bf16 wire's op).
  void all_reduce(Tensor& x, MPI_Op op, const char* what);
  void reduce_scatter(const Tensor& in, Tensor& out, MPI_Op op, const char* what);
  // The operand, peer and tag checks of start_send and recv.
  void check_p2p(const Tensor& x, int peer, const char* role, int tag, const char* what) const;

  MPI_Comm comm_;
  MPI_Comm control_;  // private duplicate for all_ranks_failing: never matches user collectives
  MPI_Op bf16_sum_;   // the bf16 wire's addition (MPI has no bf16 type)
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
};

// MPI_Init_thread (funneled: only the main thread calls MPI) on construction,
// MPI_Finalize on destruction. Works with and without mpirun (a singleton).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  MpiCommunicator& world() { return *world_; }
  // Ranks of this job on this node (they share its cores and GPUs), and this
  // rank's place among them.
  int local_ranks() const { return local_ranks_; }
  int local_rank() const { return local_rank_; }

 private:
  std::unique_ptr<MpiCommunicator> world_;
  int local_ranks_ = 1;
  int local_rank_ = 0;
};

// Throws BackendError naming the failed MPI statement.
void throw_mpi_error(int code, const char* statement, const char* file, int line);

}  // namespace colrow

#define COLROW_MPI_CHECK(statement)                                                \
  do {                                                                             \
    const int colrow_mpi_code_ = (statement);                                      \
    if (colrow_mpi_code_ != MPI_SUCCESS) {                                         \
      ::colrow::throw_mpi_error(colrow_mpi_code_, #statement, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)
