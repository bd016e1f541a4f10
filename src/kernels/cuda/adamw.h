// The CUDA twin of kernels/cpu/adamw.h: AdamW's element-wise update over every
// parameter segment of a rank in one kernel launch (a multi-tensor apply over
// a table of segments). The formula, in torch's operation order, is documented
// there. Every tensor of every segment lives on one GPU.
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cuda {

// Each segment: param, grad, exp_avg, exp_avg_sq contiguous, of one length;
// param, exp_avg, exp_avg_sq updated in place.
void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step);

}  // namespace colrow::kernels::cuda
