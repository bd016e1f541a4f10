// The CUDA device runtime: device discovery, the compute stream, copies and
// fills, and a caching allocator over cudaMalloc (never managed memory).
// The allocator keeps freed blocks in per-size free lists and hands them out
// again; every use is on the one compute stream, so a block freed by the host
// while kernels that read it are still queued is only reused by kernels queued
// after them. On a failed cudaMalloc it returns the cache to the driver and
// tries once more before it reports the bytes asked for and the bytes free.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/block_cache.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/device_runtime.h"
#include "core/host_wait.h"

namespace colrow {

void throw_cuda_error(cudaError_t code, const char* statement, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  throw BackendError("[cuda] " + std::string(statement) +
                     " failed on cuda:" + std::to_string(device) + ": " + cudaGetErrorString(code) +
                     " (" + std::string(file) + ":" + std::to_string(line) + ")");
}

namespace cuda {
namespace {
std::atomic<size_t> g_host_waits{0};
// The GPU whose compute stream is being captured, or -1: one capture at a
// time per process (a rank drives one GPU).
std::atomic<int> g_capturing{-1};

// Errors of a stream capture (a host wait inside one, which ends the
// capture): the caller may go on without the graph, so the communicators
// stay. Any other error of a query is the device's (a sticky one, such as an
// illegal address), after which nothing this process queued will finish.
bool capture_error(cudaError_t state) {
  switch (state) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}

// A stream or event query's answer: done, not yet, or an error (thrown; the
// device's own errors first abort the NCCL communicators, whose peers would
// otherwise wait for this rank until their timeout).
bool finished(cudaError_t state, const char* query) {
  if (state == cudaSuccess) return true;
  if (state != cudaErrorNotReady) {
    if (!capture_error(state)) abort_wait_watchers();
    throw_cuda_error(state, query, __FILE__, __LINE__);
  }
  // "Not ready" is an answer, not an error: clear it, or the next launch
  // check (cudaGetLastError) would report it (PyTorch's CUDAEvent::query
  // does the same).
  (void)cudaGetLastError();
  return false;
}

std::string current_device_name() {
  int device = -1;
  cudaGetDevice(&device);
  return "cuda:" + std::to_string(device);
}

}  // namespace

// Both poll (core/host_wait.h) instead of blocking in the driver: a wait for
// an NCCL collective whose peers never come ends in an error, not a hang.
void wait_for_stream(cudaStream_t stream) {
  ++g_host_waits;  // counted even when the stream is idle: the caller asked to wait
  drain_stream(stream);
}

void drain_stream(cudaStream_t stream) {
  if (finished(cudaStreamQuery(stream), "cudaStreamQuery(stream)")) return;
  wait_until([stream] { return finished(cudaStreamQuery(stream), "cudaStreamQuery(stream)"); },
             "a stream of " + current_device_name());
}

void wait_for_event(cudaEvent_t event) {
  if (finished(cudaEventQuery(event), "cudaEventQuery(event)")) return;  // not a wait
  ++g_host_waits;
  wait_until([event] { return finished(cudaEventQuery(event), "cudaEventQuery(event)"); },
             "an event on " + current_device_name());
}

cudaStream_t compute_stream(int device) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  COLROW_CUDA_CHECK(cudaSetDevice(device));
  if (static_cast<int>(streams.size()) <= device) streams.resize(device + 1, nullptr);
  if (streams[device] == nullptr) {
    COLROW_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  }
  return streams[device];
}

}  // namespace cuda

namespace device_runtime {
namespace {

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

class CachingCudaAllocator final : public Allocator {
 public:
  explicit CachingCudaAllocator(int index) : index_(index) {}

  Device device() const override { return Device::cuda(index_); }

  void* allocate(size_t bytes) override {
    const size_t size = BlockCache::rounded(bytes);  // 512-byte aligned: cuBLAS asks for 256
    if (capturing(index_)) {
      // A replay would write to this block after the tensor holding it is gone.
      throw InternalError("[cuda graph] " + std::to_string(size) + " bytes asked of cuda:" +
                          std::to_string(index_) + "'s allocator while its stream is captured" +
                          MemoryPhase::describe_current() +
                          ": a captured region must run warm, on buffers it already holds");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = cache_.take(size);
    if (p == nullptr) {
      COLROW_CUDA_CHECK(cudaSetDevice(index_));
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error state of the failed call
        release_cache();
        if (cudaMalloc(&p, size) != cudaSuccess) {
          cudaGetLastError();
          size_t free_bytes = 0, total_bytes = 0;
          cudaMemGetInfo(&free_bytes, &total_bytes);
          throw BackendError("[cuda] out of memory on cuda:" + std::to_string(index_) + ": " +
                             gib(size) + " asked for, " + gib(free_bytes) + " free of " +
                             gib(total_bytes) + " (" + gib(counter_.in_use()) +
                             " held by colrow's tensors)" + MemoryPhase::describe_current() +
                             ". Reduce --batch or --seq-len, or "
                             "add ranks (--tp) to split the model.");
        }
      }
    }
    counter_.allocated(size);
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    const size_t size = BlockCache::rounded(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.put(size, p);
    counter_.freed(size);
  }

  size_t bytes_in_use() const override { return counter_.in_use(); }
  size_t peak_bytes_in_use() const override { return counter_.peak(); }
  // A release of the cache counts too: a kept CUDA graph may still hold the
  // address of a cached block, which is then no longer the GPU's to write.
  size_t allocation_count() const override { return counter_.allocations() + releases_; }

 private:
  // The cached blocks back to the driver, after the stream is done with them.
  void release_cache() {
    cuda::wait_for_stream(cuda::compute_stream(index_));
    cache_.release_all([](void* p, size_t) { cudaFree(p); });
    ++releases_;
  }

  const int index_;
  std::mutex mutex_;  // guards cache_
  BlockCache cache_;
  AllocationCounter counter_;        // rounded bytes handed out
  std::atomic<size_t> releases_{0};  // of the cache to the driver
};

// T: float, or uint16_t for bf16's bits.
template <typename T>
__global__ void fill_rows(T* data, int64_t rows, int64_t cols, int64_t ld, T value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) data[(i / cols) * ld + i % cols] = value;
}

// core/bfloat16.h's own rounding, so that both devices give the same bits.
__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = float_to_bf16(x[i]);
}

__global__ void to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = bf16_to_float(x[i]);
}

// rows, cols and the row stride of a tensor seen as a 2-d matrix whose rows
// are contiguous; InternalError for other layouts.
struct Matrix {
  int64_t rows, cols, ld;
};

Matrix as_matrix(const Tensor& t, const char* what) {
  if (t.is_contiguous()) return {1, t.numel(), t.numel()};
  if (t.ndim() == 2 && t.stride(1) == 1) return {t.size(0), t.size(1), t.row_stride()};
  throw InternalError(std::string("[cuda] ") + what + ": tensor " + shape_to_string(t.shape()) +
                      " must be contiguous or a 2-d view with contiguous rows");
}

cudaMemcpyKind kind_of(const Tensor& src, const Tensor& dst) {
  if (src.device().is_cpu()) return cudaMemcpyHostToDevice;
  return dst.device().is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

}  // namespace

bool built() {
  return true;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (code != cudaSuccess)
    return std::string("the CUDA runtime reports: ") + cudaGetErrorString(code);
  return count == 0 ? "no GPU is visible (CUDA_VISIBLE_DEVICES?)" : "";
}

Allocator& allocator(int index) {
  // Never destroyed: a tensor holds a reference to its allocator, and one
  // that a static (a shared layer buffer, a kept scratch) frees at exit
  // would otherwise call into a destroyed allocator (it crashed a test's
  // exit on the lent H200). The process's end returns the GPU memory.
  static auto* mutex = new std::mutex;
  static auto* allocators = new std::map<int, std::unique_ptr<CachingCudaAllocator>>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*allocators)[index];
  if (!slot) {
    const int count = device_count();
    if (index < 0 || index >= count) {
      throw ConfigError("[device] cuda:" + std::to_string(index) +
                        " does not exist: " + std::to_string(count) + " GPU(s) are visible. " +
                        (count == 0 ? unavailable_reason() + "."
                                    : "Use cuda:0 .. cuda:" + std::to_string(count - 1) + "."));
    }
    slot = std::make_unique<CachingCudaAllocator>(index);
  }
  return *slot;
}

void copy(const Tensor& src, Tensor& dst) {
  const Matrix s = as_matrix(src, "copy source"), d = as_matrix(dst, "copy destination");
  const int device = dst.device().is_cuda() ? dst.device().index : src.device().index;
  cudaStream_t stream = cuda::compute_stream(device);
  const cudaMemcpyKind kind = kind_of(src, dst);
  const int64_t rows = std::max(s.rows, d.rows), cols = rows == s.rows ? s.cols : d.cols;
  const size_t element = static_cast<size_t>(dtype_bytes(dst.dtype()));  // Tensor checked: same
  // A copy with pageable host memory returns only when it is done, inside the
  // driver, behind everything queued before it: drain the stream by polling
  // first (core/host_wait.h), so that a stuck collective ends in an error.
  if (kind != cudaMemcpyDeviceToDevice) cuda::drain_stream(stream);
  if (src.is_contiguous() && dst.is_contiguous()) {
    // One span: a 2-d copy's pitch may not exceed the device's limit (2^31
    // bytes), which a flat gradient buffer or a large table does.
    COLROW_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(),
                                      static_cast<size_t>(dst.bytes()), kind, stream));
  } else if (s.rows == d.rows) {
    COLROW_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw_data(), d.ld * element, src.raw_data(),
                                        s.ld * element, s.cols * element, s.rows, kind, stream));
  } else {
    // One side contiguous ([1, n]), the other [rows, cols]: view both as [rows, cols].
    const int64_t sld = s.rows == 1 ? cols : s.ld, dld = d.rows == 1 ? cols : d.ld;
    COLROW_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw_data(), dld * element, src.raw_data(),
                                        sld * element, cols * element, rows, kind, stream));
  }
  // Host memory is pageable and may be freed or read right after: finish now.
  if (kind != cudaMemcpyDeviceToDevice) cuda::wait_for_stream(stream);
}

void fill(Tensor& t, float value) {
  const Matrix m = as_matrix(t, "fill");
  if (m.rows * m.cols == 0) return;
  cudaStream_t stream = cuda::compute_stream(t.device().index);
  const size_t element = static_cast<size_t>(dtype_bytes(t.dtype()));
  if (value == 0.0f && !std::signbit(value)) {  // all bits zero in either dtype
    COLROW_CUDA_CHECK(
        cudaMemset2DAsync(t.raw_data(), m.ld * element, 0, m.cols * element, m.rows, stream));
    return;
  }
  constexpr int kThreads = 256;
  const unsigned blocks = cuda::blocks_for(m.rows * m.cols, kThreads);
  if (t.dtype() == DType::kF32) {
    fill_rows<<<blocks, kThreads, 0, stream>>>(t.data(), m.rows, m.cols, m.ld, value);
  } else {
    fill_rows<<<blocks, kThreads, 0, stream>>>(t.bf16_data(), m.rows, m.cols, m.ld,
                                               float_to_bf16(value));
  }
  COLROW_CUDA_CHECK_LAUNCH();
}

void convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  cudaStream_t stream = cuda::compute_stream(dst.device().index);
  constexpr int kThreads = 256;
  const unsigned blocks = cuda::blocks_for(n, kThreads);
  if (src.dtype() == DType::kF32) {
    to_bf16_kernel<<<blocks, kThreads, 0, stream>>>(src.data(), dst.bf16_data(), n);
  } else {
    to_f32_kernel<<<blocks, kThreads, 0, stream>>>(src.bf16_data(), dst.data(), n);
  }
  COLROW_CUDA_CHECK_LAUNCH();
}

void synchronize(int index) {
  cuda::wait_for_stream(cuda::compute_stream(index));
}

std::string physical_id(int index) {
  cudaDeviceProp prop{};
  COLROW_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (char byte : prop.uuid.bytes) {
    const auto b = static_cast<unsigned char>(byte);
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

size_t host_wait_count() {
  return cuda::g_host_waits;
}

void begin_capture(int index) {
  cudaStream_t stream = cuda::compute_stream(index);
  int expected = -1;
  if (!cuda::g_capturing.compare_exchange_strong(expected, index)) {
    throw InternalError("[cuda graph] a capture on cuda:" + std::to_string(expected) +
                        " is already open");
  }
  // Thread-local: a call of this thread that cannot be recorded (a host wait,
  // cudaMalloc) fails the capture instead of running outside it.
  const cudaError_t began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (began != cudaSuccess) {
    cuda::g_capturing = -1;
    COLROW_CUDA_CHECK(began);
  }
}

bool capturing(int index) {
  return cuda::g_capturing.load(std::memory_order_relaxed) == index;
}

Graph end_capture(int index) {
  cudaStream_t stream = cuda::compute_stream(index);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cuda::g_capturing = -1;
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the stream runs work again; the error is reported here
    throw BackendError(std::string("[cuda graph] the capture on cuda:") + std::to_string(index) +
                       " failed: " + cudaGetErrorString(ended));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps its own copy
  if (made != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch check to report
    throw BackendError(std::string("[cuda graph] instantiating the capture on cuda:") +
                       std::to_string(index) + " failed: " + cudaGetErrorString(made));
  }
  return exec;
}

void abandon_capture(int index) {
  if (!capturing(index)) return;
  cudaStream_t stream = cuda::compute_stream(index);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);  // an invalidated capture ends too, with an error
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  cuda::g_capturing = -1;
}

void replay(int index, Graph graph) {
  COLROW_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), cuda::compute_stream(index)));
}

void destroy_graph(Graph graph) {
  if (graph != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

Mark create_mark(int index) {
  COLROW_CUDA_CHECK(cudaSetDevice(index));
  cudaEvent_t event = nullptr;
  COLROW_CUDA_CHECK(cudaEventCreate(&event));
  return event;
}

void record_mark(int index, Mark mark) {
  COLROW_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(mark), cuda::compute_stream(index)));
}

float elapsed_ms(Mark start, Mark stop) {
  cuda::wait_for_event(static_cast<cudaEvent_t>(stop));
  float ms = 0.0f;
  COLROW_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return ms;
}

}  // namespace device_runtime
}  // namespace colrow
