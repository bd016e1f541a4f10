// Communicator over MPI. Large tensors are sent in chunks because MPI counts
// are int; every call is checked, and errors return to us (MPI_ERRORS_RETURN)
// so they become exceptions with a message instead of an abort inside MPI.
// Host tensors only: GPU tensors go through make_device_communicator.
#include "colrow/dist/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <thread>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "dist/collective_checks.h"
#include "dist/fp32_wire.h"

namespace colrow {
namespace {

using collective_checks::require_host_contiguous;

constexpr int64_t kMaxChunk = INT_MAX / 2;  // elements per MPI call

int world_rank() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int r = 0;
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A tensor's elements as MPI sees them: bf16 as 16-bit words.
MPI_Datatype mpi_element(const Tensor& x) {
  return x.dtype() == DType::kBF16 ? MPI_UINT16_T : MPI_FLOAT;
}

// MPI_User_function for the bf16 wire: inout = bf16(in + inout), the
// addition in fp32. Commutative (fp32 addition is), so MPI may pick its order.
void add_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

}  // namespace

void throw_mpi_error(int code, const char* statement, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw BackendError("[mpi] " + std::string(statement) + " failed: " + std::string(text, length) +
                     " (" + file + ":" + std::to_string(line) + ", world rank " +
                     std::to_string(world_rank()) + ")");
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : comm_(comm), name_(std::move(name)) {
  COLROW_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  COLROW_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  COLROW_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  COLROW_MPI_CHECK(MPI_Comm_dup(comm_, &control_));
  COLROW_MPI_CHECK(MPI_Op_create(add_bf16, /*commute=*/1, &bf16_sum_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Op_free(&bf16_sum_);
  MPI_Comm_free(&control_);
  if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(Tensor& x, MPI_Op op, const char* what) {
  require_host_contiguous(x, what, name_);
  if (size_ == 1) return;
  auto* p = static_cast<std::byte*>(x.raw_data());
  const int64_t element = dtype_bytes(x.dtype());
  for (int64_t done = 0, n = x.numel(); done < n; done += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - done));
    COLROW_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, p + done * element, count, mpi_element(x), op, comm_));
  }
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, MPI_Op op, const char* what) {
  require_host_contiguous(in, what, name_);
  require_host_contiguous(out, what, name_);
  collective_checks::require_scatter_sizes(in, out, size_, name_);
  if (size_ == 1) {
    if (in.raw_data() != out.raw_data()) out.copy_from(in.view(out.shape()));
    return;
  }
  if (out.numel() > kMaxChunk) {
    throw InternalError("[dist] " + std::string(what) + " over " + name_ + " of " +
                        std::to_string(out.numel()) + " elements per rank exceeds one MPI call");
  }
  COLROW_MPI_CHECK(MPI_Reduce_scatter_block(
      in.raw_data(), out.raw_data(), static_cast<int>(out.numel()), mpi_element(in), op, comm_));
}

void MpiCommunicator::all_reduce_sum(Tensor& x) {
  if (dist::on_fp32_wire(x, [this](Tensor& w) { all_reduce_sum(w); })) return;
  all_reduce(x, MPI_SUM, "all_reduce_sum");
}

void MpiCommunicator::all_reduce_max(Tensor& x) {
  if (dist::on_fp32_wire(x, [this](Tensor& w) { all_reduce_max(w); })) return;
  all_reduce(x, MPI_MAX, "all_reduce_max");
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  if (dist::on_fp32_wire(in, out, [this](const Tensor& i, Tensor& o) { all_gather(i, o); })) return;
  require_host_contiguous(in, "all_gather", name_);
  require_host_contiguous(out, "all_gather", name_);
  collective_checks::require_gather_sizes(in, out, size_, name_);
  if (size_ == 1) {
    if (in.data() != out.data()) out.copy_from(in.view(out.shape()));
    return;
  }
  if (in.numel() > kMaxChunk) {
    throw InternalError("[dist] all_gather over " + name_ + " of " + std::to_string(in.numel()) +
                        " elements per rank exceeds one MPI call");
  }
  COLROW_MPI_CHECK(MPI_Allgather(in.data(), static_cast<int>(in.numel()), MPI_FLOAT, out.data(),
                                 static_cast<int>(in.numel()), MPI_FLOAT, comm_));
}

void MpiCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  if (dist::on_fp32_wire(in, out,
                         [this](const Tensor& i, Tensor& o) { reduce_scatter_sum(i, o); })) {
    return;
  }
  reduce_scatter(in, out, MPI_SUM, "reduce_scatter_sum");
}

void MpiCommunicator::broadcast(Tensor& x, int root) {
  if (dist::on_fp32_wire(x, [this, root](Tensor& w) { broadcast(w, root); })) return;
  require_host_contiguous(x, "broadcast", name_);
  collective_checks::require_root(root, size_, name_);
  if (size_ == 1) return;
  float* p = x.data();
  for (int64_t done = 0, n = x.numel(); done < n; done += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - done));
    COLROW_MPI_CHECK(MPI_Bcast(p + done, count, MPI_FLOAT, root, comm_));
  }
}

void MpiCommunicator::all_reduce_sum_bf16_wire(Tensor& x) {
  collective_checks::require_bf16({&x}, "all_reduce_sum_bf16_wire", name_);
  all_reduce(x, bf16_sum_, "all_reduce_sum_bf16_wire");
}

void MpiCommunicator::reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) {
  collective_checks::require_bf16({&in, &out}, "reduce_scatter_sum_bf16_wire", name_);
  reduce_scatter(in, out, bf16_sum_, "reduce_scatter_sum_bf16_wire");
}

namespace {

// An MPI request: wait() is MPI_Wait; dropping it unwaited waits too.
class MpiPending final : public PendingCollective {
 public:
  explicit MpiPending(MPI_Request request) : request_(request) {}
  ~MpiPending() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void wait() override { COLROW_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE)); }

 private:
  MPI_Request request_;
};

}  // namespace

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_reduce_sum(Tensor& x) {
  require_host_contiguous(x, "all_reduce_sum", name_);
  // bf16 goes through a widened copy, which must outlive the wait: at once.
  if (size_ == 1 || x.numel() > kMaxChunk || x.dtype() != DType::kF32) {
    return Communicator::start_all_reduce_sum(x);
  }
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.numel()), MPI_FLOAT,
                                  MPI_SUM, comm_, &request));
  return std::make_unique<MpiPending>(request);
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_gather(const Tensor& in,
                                                                     Tensor& out) {
  require_host_contiguous(in, "all_gather", name_);
  require_host_contiguous(out, "all_gather", name_);
  collective_checks::require_gather_sizes(in, out, size_, name_);
  if (size_ == 1 || in.numel() > kMaxChunk || in.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32) {
    return Communicator::start_all_gather(in, out);
  }
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Iallgather(in.data(), static_cast<int>(in.numel()), MPI_FLOAT, out.data(),
                                  static_cast<int>(in.numel()), MPI_FLOAT, comm_, &request));
  return std::make_unique<MpiPending>(request);
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce_scatter_sum(const Tensor& in,
                                                                             Tensor& out) {
  require_host_contiguous(in, "reduce_scatter_sum", name_);
  require_host_contiguous(out, "reduce_scatter_sum", name_);
  collective_checks::require_scatter_sizes(in, out, size_, name_);
  if (size_ == 1 || out.numel() > kMaxChunk || in.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32) {
    return Communicator::start_reduce_scatter_sum(in, out);
  }
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.numel()),
                                             MPI_FLOAT, MPI_SUM, comm_, &request));
  return std::make_unique<MpiPending>(request);
}

// The bf16 wire needs no widened copy, so its sums start for real, with the
// blocking form's user-defined operation.
std::unique_ptr<PendingCollective> MpiCommunicator::start_all_reduce_sum_bf16_wire(Tensor& x) {
  require_host_contiguous(x, "all_reduce_sum_bf16_wire", name_);
  collective_checks::require_bf16({&x}, "all_reduce_sum_bf16_wire", name_);
  if (size_ == 1 || x.numel() > kMaxChunk) return Communicator::start_all_reduce_sum_bf16_wire(x);
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.raw_data(), static_cast<int>(x.numel()),
                                  MPI_UINT16_T, bf16_sum_, comm_, &request));
  return std::make_unique<MpiPending>(request);
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce_scatter_sum_bf16_wire(
    const Tensor& in, Tensor& out) {
  const char* what = "reduce_scatter_sum_bf16_wire";
  require_host_contiguous(in, what, name_);
  require_host_contiguous(out, what, name_);
  collective_checks::require_bf16({&in, &out}, what, name_);
  collective_checks::require_scatter_sizes(in, out, size_, name_);
  if (size_ == 1 || out.numel() > kMaxChunk) {
    return Communicator::start_reduce_scatter_sum_bf16_wire(in, out);
  }
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(),
                                             static_cast<int>(out.numel()), MPI_UINT16_T, bf16_sum_,
                                             comm_, &request));
  return std::make_unique<MpiPending>(request);
}

void MpiCommunicator::check_p2p(const Tensor& x, int peer, const char* role, int tag,
                                const char* what) const {
  require_host_contiguous(x, what, name_);
  collective_checks::require_peer_and_tag(peer, role, tag, rank_, size_, what, name_);
  if (x.numel() > kMaxChunk) {
    throw InternalError("[dist] " + std::string(what) + " over " + name_ + " of " +
                        std::to_string(x.numel()) + " elements exceeds one MPI call");
  }
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_send(const Tensor& x, int dst, int tag) {
  check_p2p(x, dst, "dst", tag, "send");
  MPI_Request request;
  COLROW_MPI_CHECK(MPI_Isend(x.raw_data(), static_cast<int>(x.numel()), mpi_element(x), dst, tag,
                             comm_, &request));
  return std::make_unique<MpiPending>(request);
}

void MpiCommunicator::recv(Tensor& x, int src, int tag) {
  check_p2p(x, src, "src", tag, "recv");
  // Matched first, received second: the size is known before any byte lands
  // in x, and a message of another size (or dtype) is still taken off the
  // wire (so its sender's wait() returns) before the error. Every message is
  // a whole number of 16-bit words, at most INT_MAX of them (check_p2p).
  MPI_Message message;
  MPI_Status status;
  COLROW_MPI_CHECK(MPI_Mprobe(src, tag, comm_, &message, &status));
  MPI_Count bytes = 0;
  COLROW_MPI_CHECK(MPI_Get_elements_x(&status, MPI_BYTE, &bytes));
  if (bytes != x.numel() * dtype_bytes(x.dtype())) {
    std::vector<uint16_t> discard(static_cast<size_t>(bytes / 2));
    COLROW_MPI_CHECK(MPI_Mrecv(discard.data(), static_cast<int>(bytes / 2), MPI_UINT16_T, &message,
                               MPI_STATUS_IGNORE));
    collective_checks::require_message_bytes(bytes, x, src, tag, name_);
  }
  COLROW_MPI_CHECK(MPI_Mrecv(x.raw_data(), static_cast<int>(x.numel()), mpi_element(x), &message,
                             MPI_STATUS_IGNORE));
}

void MpiCommunicator::barrier() {
  COLROW_MPI_CHECK(MPI_Barrier(comm_));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  return split_group(color, key, name);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split_group(int color, int key,
                                                              const std::string& name) {
  MPI_Comm sub;
  COLROW_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, name);
}

bool MpiCommunicator::all_ranks_failing(double timeout_seconds) {
  MPI_Request request;
  if (MPI_Ibarrier(control_, &request) != MPI_SUCCESS) return false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;  // someone is elsewhere (in a collective): only abort frees them
}

void MpiCommunicator::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return; make sure
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  COLROW_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
  MPI_Comm node;
  COLROW_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  COLROW_MPI_CHECK(MPI_Comm_size(node, &local_ranks_));
  COLROW_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));  // ordered by world rank (key 0)
  COLROW_MPI_CHECK(MPI_Comm_free(&node));
}

MpiSession::~MpiSession() {
  world_.reset();
  MPI_Finalize();
}

}  // namespace colrow
