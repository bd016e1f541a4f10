// The launches of kernels/cuda/cross_entropy.cu, on the host through the warp
// emulation: targets read where they are (the GPU uploads them), every block
// of the grid run in turn.
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/cross_entropy_kernels.cuh"

#include "kernels/checks/cross_entropy.h"
#include "kernels/cuda/emulated/cross_entropy.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {
namespace kernels_ce = kernels::cuda::cross_entropy_kernels;

void cross_entropy_partials(const Tensor& logits_local, const kernels::CrossEntropyRows& rows,
                            Tensor& partials) {
  const int64_t tokens = kernels::check_cross_entropy_partials(logits_local, rows, partials);
  require_host("cross_entropy_partials", {&logits_local, &partials});
  if (tokens == 0) return;
  const int32_t* targets = rows.targets->data() + rows.first_row;
  kernels::with_elements(logits_local, [&](const auto* x) {
    emulation::launch(dim3(static_cast<unsigned>(tokens)), kernels_ce::kThreads, 0, [&] {
      kernels_ce::partials_rows(x, logits_local.row_stride(), targets, rows.ignore_index,
                                rows.vocab_start, rows.real, rows.label_smoothing > 0.0f,
                                partials.data());
    });
  });
}

void cross_entropy_combine(const Tensor& gathered, const kernels::CrossEntropyRows& rows,
                           Tensor& max, Tensor& sum_exp, Tensor& losses) {
  const int64_t tokens = kernels::check_cross_entropy_combine(gathered, rows, max, sum_exp, losses);
  require_host("cross_entropy_combine", {&gathered, &max, &sum_exp, &losses});
  if (tokens == 0) return;
  const int32_t* targets = rows.targets->data() + rows.first_row;
  const unsigned blocks =
      static_cast<unsigned>((tokens + kernels_ce::kLossThreads - 1) / kernels_ce::kLossThreads);
  emulation::launch(dim3(blocks), kernels_ce::kLossThreads, 0, [&] {
    kernels_ce::combine_rows(gathered.data(), targets, rows.ignore_index, tokens,
                             gathered.size(0) / tokens, rows.vocab_size, rows.vocab_size_local,
                             rows.label_smoothing, max.data(), sum_exp.data(), losses.data());
  });
}

void cross_entropy_backward(const Tensor& logits_local, const kernels::CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local) {
  const char* what = "cross_entropy_backward";
  const int64_t tokens =
      kernels::check_cross_entropy_backward(logits_local, rows, max, sum_exp, dloss);
  kernels::check_cross_entropy_dlogits_rows(what, logits_local, tokens, dlogits_local);
  require_host(what, {&logits_local, &max, &sum_exp, dloss, &dlogits_local});
  const int64_t vocab_local = logits_local.size(1);
  if (tokens == 0 || vocab_local == 0) return;
  const float a = rows.label_smoothing;
  const float a_over_v =
      a > 0.0f ? static_cast<float>(static_cast<double>(a) / static_cast<double>(rows.vocab_size))
               : 0.0f;
  const int32_t* targets = rows.targets->data() + rows.first_row;
  kernels::with_elements(logits_local, [&](const auto* x) {
    using E = kernels::element_of<decltype(x)>;
    emulation::launch(dim3(static_cast<unsigned>(tokens)), kernels_ce::kThreads, 0, [&] {
      kernels_ce::backward_rows(
          x, logits_local.row_stride(), targets, rows.ignore_index, rows.vocab_start, rows.real,
          vocab_local, max.data(), sum_exp.data(), dloss != nullptr ? dloss->data() : nullptr,
          uniform_scale, a_over_v, 1.0f - a, static_cast<E*>(dlogits_local.raw_data()),
          dlogits_local.row_stride());
    });
  });
}

}  // namespace colrow::testing::emulated
