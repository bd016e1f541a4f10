// shared_buffer: activation buffers that every layer of a model can share
// because each layer uses them only within one forward or one backward call,
// as Megatron's global memory buffer holds sequence parallelism's gathered
// inputs and llm.c keeps one layer's activation gradients. A buffer is named
// by its role and identified by its shape, device and dtype; the same
// arguments give the same tensor (same storage) for the life of the program.
// Its contents are whatever the last user left.
#pragma once

#include <string>

#include "colrow/core/tensor.h"

namespace colrow {

Tensor& shared_buffer(const std::string& role, const Shape& shape, Device device,
                      DType dtype = DType::kF32);

// A module's transient tensor: one it writes in a call and its caller has
// read before the next layer's call (an input gradient on the way back, a
// row-parallel output on the way forward). `shared` (the module sits in a
// TransformerBlock, and the blocks run one after another): `t` becomes a view
// of one storage per role, device and dtype, as large as the largest shape
// asked for (the same role may serve layers of other widths, one after
// another), so L layers hold one such tensor, not L, and a run whose token
// counts vary (decoding) holds the largest only. Otherwise (a module on its
// own, whose result may outlive the call): `t` keeps storage of its own, as
// ensure_shape does. Returns t.
Tensor& layer_buffer(Tensor& t, bool shared, const std::string& role, const Shape& shape,
                     Device device, DType dtype);

// The first shape[0] rows of `storage`, which grows (only) to hold them, as
// a view: a module whose row count varies from call to call (the chunks of
// a batch, the last one shorter) reuses one allocation from step to step, as
// a CUDA graph of the step needs.
Tensor leading_rows(Tensor& storage, const Shape& shape, Device device, DType dtype = DType::kF32);

}  // namespace colrow
