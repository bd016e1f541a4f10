// NCCL collectives for GPU tensors (see dist/nccl/nccl_communicator.h).
// Construction mirrors nccl-tests: rank 0 makes the unique id, MPI broadcasts
// it, every rank joins with ncclCommInitRank on its GPU. Each GPU collective
// is one NCCL call on the compute stream with no host synchronization; the
// checks before it (contiguity, shapes, devices) throw on every rank alike, so
// a bad call never leaves some ranks inside NCCL waiting for the others.
#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/host_wait.h"

namespace colrow {
namespace {

int world_rank() {
  int initialized = 0, finalized = 0, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* statement, const char* file,
                                   int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  std::string message = ncclGetErrorString(code);
  const char* last = ncclGetLastError(nullptr);  // NCCL's own detail, when it has one
  if (last != nullptr && last[0] != '\0') message += ": " + std::string(last);
  throw BackendError("[nccl] " + std::string(statement) + " failed on cuda:" +
                     std::to_string(device) + ": " + message + " (" + file + ":" +
                     std::to_string(line) + ", world rank " + std::to_string(world_rank()) + ")");
}

}  // namespace
}  // namespace colrow

// The NCCL statement, NCCL's message, file, line, device and rank.
#define COLROW_NCCL_CHECK(statement)                                                 \
  do {                                                                               \
    const ncclResult_t colrow_nccl_code_ = (statement);                              \
    if (colrow_nccl_code_ != ncclSuccess) {                                          \
      ::colrow::throw_nccl_error(colrow_nccl_code_, #statement, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

namespace colrow {
namespace {

// The id travels as floats over MPI, which copies their bytes unchanged.
constexpr int kIdFloats = static_cast<int>(sizeof(ncclUniqueId) / sizeof(float));
static_assert(sizeof(ncclUniqueId) == kIdFloats * sizeof(float),
              "ncclUniqueId must fill a whole number of floats");

cudaStream_t stream_of(Device device) {
  return cuda::compute_stream(device.index);  // also makes the device current
}

// NCCL's element type for a tensor: bf16 ones are the bf16 wire's (NCCL adds
// them in fp32 and rounds each partial sum it forwards).
ncclDataType_t nccl_type(const Tensor& t) {
  return t.dtype() == DType::kBF16 ? ncclBfloat16 : ncclFloat;
}

}  // namespace

// Sends started on one NcclCommunicator and not yet handed to NCCL, in the
// order started. Shared with their handles, which may outlive the
// communicator: once it is gone (detach), waiting on them does nothing.
class NcclCommunicator::SendQueue {
 public:
  SendQueue(ncclComm* comm, Device device) : comm_(comm), device_(device) {}

  // The ticket that issued() reports on.
  uint64_t push(const Tensor& x, int dst) {
    held_.push_back({x, dst});  // the Tensor keeps x's storage alive until issued
    return ++pushed_;
  }
  bool issued(uint64_t ticket) const { return ticket <= issued_; }

  // Every held send, then the receive when one is given, in one group.
  void issue(Tensor* recv = nullptr, int src = -1) {
    if (comm_ == nullptr || (held_.empty() && recv == nullptr)) return;
    std::vector<Held> sends = std::move(held_);
    held_.clear();
    issued_ = pushed_;
    cudaStream_t stream = stream_of(device_);
    COLROW_NCCL_CHECK(ncclGroupStart());
    try {
      for (const Held& s : sends) {
        COLROW_NCCL_CHECK(ncclSend(s.x.raw_data(), static_cast<size_t>(s.x.numel()), nccl_type(s.x),
                                   s.dst, comm_, stream));
      }
      if (recv != nullptr) {
        COLROW_NCCL_CHECK(ncclRecv(recv->raw_data(), static_cast<size_t>(recv->numel()),
                                   nccl_type(*recv), src, comm_, stream));
      }
    } catch (...) {
      // Groups nest: left open, every later NCCL call on this thread would
      // join it and never launch.
      (void)ncclGroupEnd();
      throw;
    }
    COLROW_NCCL_CHECK(ncclGroupEnd());
  }

  // The communicator is going away: nothing may reach it any more.
  void detach() {
    comm_ = nullptr;
    held_.clear();
  }

  class HeldSend;

 private:
  struct Held {
    Tensor x;
    int dst;
  };
  ncclComm* comm_;
  Device device_;
  std::vector<Held> held_;
  uint64_t pushed_ = 0;
  uint64_t issued_ = 0;
};

// A send held in the queue: wait() issues it (with any held before it).
class NcclCommunicator::SendQueue::HeldSend final : public PendingCollective {
 public:
  HeldSend(std::shared_ptr<SendQueue> queue, uint64_t ticket)
      : queue_(std::move(queue)), ticket_(ticket) {}
  ~HeldSend() override {
    try {
      wait();
    } catch (...) {  // a destructor cannot report it; the next NCCL call will
    }
  }
  void wait() override {
    if (!queue_->issued(ticket_)) queue_->issue();
  }

 private:
  std::shared_ptr<SendQueue> queue_;
  uint64_t ticket_;
};

// What a host wait asks of this communicator while its GPU work is queued
// (core/host_wait.h): NCCL's asynchronous error (a peer gone, a network
// fault), and, once any wait has failed or timed out, ncclCommAbort, which
// makes this communicator's queued kernels return so that the stream drains
// and the process can report and end. An aborted communicator takes no more
// calls (live_comm) and is not destroyed again.
class NcclCommunicator::Watch final : public WaitWatcher {
 public:
  Watch(ncclComm* comm, std::string name, std::shared_ptr<SendQueue> sends)
      : comm_(comm), name_(std::move(name)), sends_(std::move(sends)) {}

  std::string failure() override {
    if (aborted_) return "";
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return "";  // no answer: ask again
    if (state == ncclSuccess || state == ncclInProgress) return "";
    std::string message = ncclGetErrorString(state);
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && last[0] != '\0') message += ": " + std::string(last);
    return "[nccl] " + name_ + " failed on world rank " + std::to_string(world_rank()) + ": " +
           message;
  }

  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    sends_->detach();  // held sends would reach the freed communicator
    (void)ncclCommAbort(comm_);
  }

  bool aborted() const { return aborted_; }

 private:
  ncclComm* comm_;
  std::string name_;
  std::shared_ptr<SendQueue> sends_;
  bool aborted_ = false;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, Device device,
                                   bool side_stream)
    : DeviceGroupCommunicator(std::move(host), device, "NcclCommunicator"),
      side_stream_(side_stream) {
  stream_of(device);  // cudaSetDevice: ncclCommInitRank binds to the current device

  // Rank 0 makes the id; it travels with rank 0's result, so a failure there
  // is an error on every rank instead of a hang in ncclCommInitRank.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  Tensor packet = Tensor::zeros({kIdFloats + 1});  // [id bytes as floats, ncclResult_t]
  if (rank() == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    std::memcpy(packet.data(), &id, sizeof id);
    packet.data()[kIdFloats] = static_cast<float>(made);
  }
  this->host().broadcast(packet, 0);
  const auto made = static_cast<ncclResult_t>(static_cast<int>(packet.data()[kIdFloats]));
  if (made != ncclSuccess) {
    throw_nccl_error(made, "ncclGetUniqueId(&id) on rank 0 of the group", __FILE__, __LINE__);
  }
  std::memcpy(&id, packet.data(), sizeof id);

  // Agree on the outcome over MPI: a rank whose init failed throws with NCCL's
  // message, the others free their side and throw too, so none goes on alone.
  ncclComm* comm = nullptr;
  const ncclResult_t joined = ncclCommInitRank(&comm, size(), id, rank());
  Tensor failed = Tensor::full({1}, joined == ncclSuccess ? 0.0f : 1.0f);
  this->host().all_reduce_max(failed);
  if (joined != ncclSuccess) {
    throw_nccl_error(joined, "ncclCommInitRank(&comm, size(), id, rank())", __FILE__, __LINE__);
  }
  if (failed.data()[0] != 0.0f) {
    ncclCommAbort(comm);
    throw BackendError("[nccl] ncclCommInitRank over " + name() + " failed on another rank (" +
                       "its message says why); cuda:" + std::to_string(this->device().index) +
                       " joined, and left again.");
  }
  comm_ = comm;
  sends_ = std::make_shared<SendQueue>(comm_, this->device());
  watch_ = std::make_unique<Watch>(comm_, name(), sends_);
  add_wait_watcher(watch_.get());
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  remove_wait_watcher(watch_.get());
  if (watch_->aborted()) {  // a failed wait freed it (its sends were dropped then)
    if (side_ != nullptr) cudaStreamDestroy(side_);
    return;
  }
  if (std::uncaught_exceptions() == 0) {
    try {
      sends_->issue();  // in the order started, before the communicator goes
    } catch (...) {     // a destructor cannot report errors
    }
  }
  sends_->detach();
  // ncclCommDestroy flushes queued work and waits for the group's other ranks
  // on this node. While an exception unwinds they may be blocked elsewhere, and
  // after MPI_Finalize they may be gone: ncclCommAbort frees this rank's side
  // alone. A destructor cannot report errors, so both results are ignored.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || std::uncaught_exceptions() > 0) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
  if (side_ != nullptr) cudaStreamDestroy(side_);  // freed once its queued work is done
}

ncclComm* NcclCommunicator::live_comm() const {
  if (watch_->aborted()) {
    throw BackendError("[nccl] " + name() + " was aborted after a failed or timed-out wait (" +
                       "see the first error); it takes no more collectives.");
  }
  return comm_;
}

cudaStream_t NcclCommunicator::stream() const {
  cudaStream_t compute = stream_of(device());  // also makes the device current
  return on_side_ ? side_ : compute;
}

namespace {

// A collective queued on the side stream: wait() makes the compute stream
// wait for its event, so what is queued there next sees the result. The
// destructor does the same, so a dropped handle never lets the compute stream
// run ahead of the collective's buffers.
class SideStreamCollective final : public PendingCollective {
 public:
  SideStreamCollective(cudaEvent_t done, int device) : done_(done), device_(device) {}
  ~SideStreamCollective() override {
    try {
      wait();
    } catch (...) {  // a destructor cannot report it; the next CUDA call will
    }
  }
  void wait() override {
    if (done_ == nullptr) return;
    const cudaEvent_t done = done_;
    done_ = nullptr;
    const cudaError_t waited = cudaStreamWaitEvent(cuda::compute_stream(device_), done, 0);
    cudaEventDestroy(done);  // released once the wait has been satisfied
    COLROW_CUDA_CHECK(waited);
  }

 private:
  cudaEvent_t done_;
  int device_;
};

// An event for ordering only (no timing: cheaper to record and wait on).
cudaEvent_t ordering_event() {
  cudaEvent_t event = nullptr;
  COLROW_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

}  // namespace

std::unique_ptr<PendingCollective> NcclCommunicator::device_start(
    const std::function<void()>& collective) {
  if (!side_stream_) return DeviceGroupCommunicator::device_start(collective);
  const cudaStream_t compute = stream_of(device());
  if (side_ == nullptr) COLROW_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  // The side stream starts where the compute stream is now: the operands
  // are written.
  const cudaEvent_t ready = ordering_event();
  const cudaError_t recorded = cudaEventRecord(ready, compute);
  const cudaError_t waited =
      recorded == cudaSuccess ? cudaStreamWaitEvent(side_, ready, 0) : recorded;
  cudaEventDestroy(ready);
  COLROW_CUDA_CHECK(waited);
  on_side_ = true;
  try {
    collective();  // the checks, then the NCCL call on stream(): the side stream
  } catch (...) {
    on_side_ = false;
    throw;
  }
  on_side_ = false;
  const cudaEvent_t done = ordering_event();
  const cudaError_t marked = cudaEventRecord(done, side_);
  if (marked != cudaSuccess) cudaEventDestroy(done);
  COLROW_CUDA_CHECK(marked);
  return std::make_unique<SideStreamCollective>(done, device().index);
}

void NcclCommunicator::device_all_reduce(Tensor& x, Reduction reduction) {
  sends_->issue();  // held sends go first: every rank's NCCL calls keep program order
  const ncclRedOp_t op = reduction == Reduction::kSum ? ncclSum : ncclMax;
  COLROW_NCCL_CHECK(ncclAllReduce(x.raw_data(), x.raw_data(), static_cast<size_t>(x.numel()),
                                  nccl_type(x), op, live_comm(), stream()));
}

void NcclCommunicator::device_all_gather(const Tensor& in, Tensor& out) {
  sends_->issue();
  // in: [n, ...] -> out: [size*n, ...], rank r's block at r*n
  COLROW_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), ncclFloat,
                                  live_comm(), stream()));
}

void NcclCommunicator::device_reduce_scatter_sum(const Tensor& in, Tensor& out) {
  sends_->issue();
  // in: [size*n, ...] -> out: [n, ...], this rank's block of the sum
  COLROW_NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(),
                                      static_cast<size_t>(out.numel()), nccl_type(in), ncclSum,
                                      live_comm(), stream()));
}

void NcclCommunicator::device_broadcast(Tensor& x, int root) {
  sends_->issue();
  COLROW_NCCL_CHECK(ncclBroadcast(x.data(), x.data(), static_cast<size_t>(x.numel()), ncclFloat,
                                  root, live_comm(), stream()));
}

std::unique_ptr<PendingCollective> NcclCommunicator::device_start_send(const Tensor& x, int dst,
                                                                       int /*tag*/) {
  (void)live_comm();  // refused once aborted
  // NCCL has no tags: the per-peer order of posting is the matching rule.
  return std::make_unique<SendQueue::HeldSend>(sends_, sends_->push(x, dst));
}

void NcclCommunicator::device_recv(Tensor& x, int src, int /*tag*/) {
  (void)live_comm();  // a detached queue would return without receiving
  sends_->issue(&x, src);  // with the held sends: both neighbours may have sent first
}

std::unique_ptr<Communicator> NcclCommunicator::over(std::unique_ptr<Communicator> host) {
  return make_nccl_communicator(std::move(host), device(), side_stream_);
}

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host,
                                                     Device device, bool side_stream) {
  return std::make_unique<NcclCommunicator>(std::move(host), device, side_stream);
}

}  // namespace colrow
