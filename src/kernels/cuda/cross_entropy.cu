// Launches of the vocabulary-parallel cross-entropy pieces on the GPU
// (cross_entropy.h); the kernels, and how they sum, are in
// cross_entropy_kernels.cuh.
#include "kernels/cuda/cross_entropy.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/cross_entropy.h"
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using cross_entropy_kernels::backward_rows;
using cross_entropy_kernels::combine_rows;
using cross_entropy_kernels::kLossThreads;
using cross_entropy_kernels::kThreads;
using cross_entropy_kernels::partials_rows;

bool smoothing(const CrossEntropyRows& rows) {
  return rows.label_smoothing > 0.0f;
}

// The logits' targets on the GPU: the batch's, uploaded once for every piece
// of one loss and every chunk of the batch (upload_kept copies nothing the
// role already holds), from rows.first_row on.
const int32_t* device_targets(int device, const CrossEntropyRows& rows) {
  return upload_kept(device, "cross_entropy.targets", *rows.targets) + rows.first_row;
}

}  // namespace

void stage_cross_entropy_targets(int device, const std::vector<int32_t>& targets) {
  if (!targets.empty()) upload_kept(device, "cross_entropy.targets", targets);
}

void cross_entropy_partials(const Tensor& logits_local, const CrossEntropyRows& rows,
                            Tensor& partials) {
  const int64_t tokens = check_cross_entropy_partials(logits_local, rows, partials);
  const int device = cuda_device_of("cross_entropy_partials", {&logits_local, &partials});
  if (tokens == 0) return;
  const int32_t* targets = device_targets(device, rows);
  with_elements(logits_local, [&](const auto* x) {
    partials_rows<<<static_cast<unsigned int>(tokens), kThreads, 0,
                    colrow::cuda::compute_stream(device)>>>(
        x, logits_local.row_stride(), targets, rows.ignore_index, rows.vocab_start, rows.real,
        smoothing(rows), partials.data());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void cross_entropy_combine(const Tensor& gathered, const CrossEntropyRows& rows, Tensor& max,
                           Tensor& sum_exp, Tensor& losses) {
  const char* what = "cross_entropy_combine";
  const int64_t tokens = check_cross_entropy_combine(gathered, rows, max, sum_exp, losses);
  const int device = cuda_device_of(what, {&gathered, &max, &sum_exp, &losses});
  if (tokens == 0) return;
  const int32_t* targets = device_targets(device, rows);
  combine_rows<<<colrow::cuda::blocks_for(tokens, kLossThreads), kLossThreads, 0,
                 colrow::cuda::compute_stream(device)>>>(
      gathered.data(), targets, rows.ignore_index, tokens, gathered.size(0) / tokens,
      rows.vocab_size, rows.vocab_size_local, rows.label_smoothing, max.data(), sum_exp.data(),
      losses.data());
  COLROW_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local) {
  const char* what = "cross_entropy_backward";
  const int64_t tokens = check_cross_entropy_backward(logits_local, rows, max, sum_exp, dloss);
  const int64_t vocab_local = logits_local.size(1);
  check_cross_entropy_dlogits_rows(what, logits_local, tokens, dlogits_local);
  const int device = cuda_device_of(what, {&logits_local, &max, &sum_exp, dloss, &dlogits_local});
  if (tokens == 0 || vocab_local == 0) return;
  const bool smooth = smoothing(rows);
  const float a = rows.label_smoothing;
  const float a_over_v =
      smooth ? static_cast<float>(static_cast<double>(a) / static_cast<double>(rows.vocab_size))
             : 0.0f;
  const int32_t* targets = device_targets(device, rows);
  with_elements(logits_local, [&](const auto* x) {
    using E = element_of<decltype(x)>;
    backward_rows<<<static_cast<unsigned int>(tokens), kThreads, 0,
                    colrow::cuda::compute_stream(device)>>>(
        x, logits_local.row_stride(), targets, rows.ignore_index, rows.vocab_start, rows.real,
        vocab_local, max.data(), sum_exp.data(), dloss != nullptr ? dloss->data() : nullptr,
        uniform_scale, a_over_v, 1.0f - a, static_cast<E*>(dlogits_local.raw_data()),
        dlogits_local.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
