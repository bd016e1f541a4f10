// The per-device side of core: what Tensor and allocator_for() need from a
// GPU. Two implementations with one interface, chosen by CMake as MLX chooses
// its backends: core/cuda/device_runtime.cu (CUDA runtime) and
// core/no_cuda/device_runtime.cpp (a CPU-only build: every entry says how to
// get CUDA). Core code has no #ifdef.
#pragma once

#include "colrow/core/allocator.h"
#include "colrow/core/tensor.h"

namespace colrow::device_runtime {

bool built();
int device_count();
// Why device_count() is 0, as the end of a sentence ("no CUDA-capable device
// is detected"), or "" when it is not.
std::string unavailable_reason();
// The caching allocator of GPU `index`.
Allocator& allocator(int index);
// dst = src (same shape) where at least one lives on a GPU: contiguous
// tensors, or 2-d views whose last dim is contiguous. Queued on the compute
// stream; a copy to or from the host returns when the host side is done.
void copy(const Tensor& src, Tensor& dst);
// t = value, t on a GPU (any 2-d view with a contiguous last dim).
void fill(Tensor& t, float value);
// dst = src across fp32 and bf16 (Tensor::convert_from), both contiguous on one GPU.
void convert(const Tensor& src, Tensor& dst);
void synchronize(int index);
// GPU `index`'s UUID as hex: the same for every process that sees this
// physical GPU, under whatever index CUDA_VISIBLE_DEVICES gives it there.
std::string physical_id(int index);
// How many times the host has waited for a GPU so far (a stream or event
// synchronization, a copy to or from host memory, a pinned upload buffer
// still being read): what lets a test prove that a step queues its work
// without waiting, as a CUDA graph of it needs. Always 0 without CUDA.
size_t host_wait_count();

// CUDA graphs of the compute stream (train/step_graph.h): between
// begin_capture and end_capture the work queued on GPU `index`'s compute
// stream is recorded, not run; replay() then queues all of it as one launch.
// While capturing, the allocator and the kept uploads refuse (InternalError):
// a captured region must find its memory and its inputs in place, since a
// replay reuses their addresses. A host wait fails the capture (BackendError).
using Graph = void*;
void begin_capture(int index);
bool capturing(int index);
// The instantiated graph; BackendError naming the cause when the capture
// failed, after which the stream runs work again as before.
Graph end_capture(int index);
// Ends a capture that a throw interrupted, dropping what it recorded.
void abandon_capture(int index);
void replay(int index, Graph graph);
void destroy_graph(Graph graph);

// Timestamps queued on GPU `index`'s compute stream (CUDA events), for
// timing kernels without synchronizing (`colrow train --profile`).
using Mark = void*;
Mark create_mark(int index);
void record_mark(int index, Mark mark);
// Milliseconds from `start` to `stop`; waits until `stop` has happened.
float elapsed_ms(Mark start, Mark stop);

}  // namespace colrow::device_runtime
