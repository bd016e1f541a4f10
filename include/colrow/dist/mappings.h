// The tensor-parallel region mappings of Megatron-LM (core/tensor_parallel/
// mappings.py), each as a forward/backward pair. Activations are token-major
// [tokens, hidden]; "last dim" is hidden, "token dim" is dim 0.
//
//   mapping               forward                     backward
//   copy_to_tp (f)        identity                    all-reduce
//   reduce_from_tp (g)    all-reduce                  identity
//   scatter_to_tp         keep my last-dim slice      all-gather last dim
//   gather_from_tp        all-gather last dim         keep my last-dim slice
//   gather_from_sp        all-gather token dim        reduce-scatter token dim
//   reduce_scatter_to_sp  reduce-scatter token dim    all-gather token dim
//
// f and g act in place. The others write into a caller-owned output of the
// right shape, so a layer can keep its buffers across steps.
#pragma once

#include "colrow/dist/communicator.h"

namespace colrow {

// f: x: [tokens, h] replicated. Backward sums the partial dx of every rank.
void copy_to_tp_forward(Tensor& x, Communicator& tp);
void copy_to_tp_backward(Tensor& dx, Communicator& tp);

// g: y: [tokens, h] partial sums -> full sums. Backward: dy is already replicated.
void reduce_from_tp_forward(Tensor& y, Communicator& tp);
void reduce_from_tp_backward(Tensor& dy, Communicator& tp);

// x: [tokens, h] -> x_local: [tokens, h/tp]
void scatter_to_tp_forward(const Tensor& x, Tensor& x_local, Communicator& tp);
// dx_local: [tokens, h/tp] -> dx: [tokens, h]
void scatter_to_tp_backward(const Tensor& dx_local, Tensor& dx, Communicator& tp);

// x_local: [tokens, h/tp] -> x: [tokens, h]
void gather_from_tp_forward(const Tensor& x_local, Tensor& x, Communicator& tp);
// dx: [tokens, h] -> dx_local: [tokens, h/tp]
void gather_from_tp_backward(const Tensor& dx, Tensor& dx_local, Communicator& tp);

// x_local: [tokens/tp, h] -> x: [tokens, h]
void gather_from_sp_forward(const Tensor& x_local, Tensor& x, Communicator& tp);
// dx: [tokens, h] (partial) -> dx_local: [tokens/tp, h] (summed)
void gather_from_sp_backward(const Tensor& dx, Tensor& dx_local, Communicator& tp);

// x: [tokens, h] (partial) -> x_local: [tokens/tp, h] (summed)
void reduce_scatter_to_sp_forward(const Tensor& x, Tensor& x_local, Communicator& tp);
// dx_local: [tokens/tp, h] -> dx: [tokens, h]
void reduce_scatter_to_sp_backward(const Tensor& dx_local, Tensor& dx, Communicator& tp);

}  // namespace colrow
