// ParameterGroup: parameters whose values, gradients and compute copies are
// row blocks of one contiguous tensor each, so that a layer runs one GEMM
// over all of them (attention's q, k and v: Megatron's linear_qkv, llm.c's
// qkvw) while each keeps its own name, shard and checkpoint entry. The
// parameters stay the handles the optimizer, the checkpoint and the gradient
// norm use, as views of the group's storage (Megatron's DDP keeps main_grad
// as views of one buffer the same way). Whatever gives a parameter new
// storage (a move to a device, mixed precision's copies, a replica's
// sharing) goes through the group, which keeps the parts views: the
// functions below do it for a model's parameter list.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/nn/parameter.h"

namespace colrow {

class ParameterGroup {
 public:
  // Stacks the parts along dim 0, in this order: they must live on one
  // device and share their trailing dims (InternalError otherwise). Their
  // values and gradients (and compute copies, when they have them) move
  // into the group's storage; each part's tensors become views of it.
  explicit ParameterGroup(std::vector<Parameter*> parts);
  ParameterGroup(const ParameterGroup&) = delete;
  ParameterGroup& operator=(const ParameterGroup&) = delete;

  // The stacked tensors: [sum of the parts' rows, trailing dims...].
  const Tensor& value() const { return value_; }
  Tensor& grad() { return grad_; }
  // What layers compute with: the bf16 copy in mixed precision, else value.
  const Tensor& compute() const { return compute_copy_.owns_storage() ? compute_copy_ : value_; }
  // The rows of parts [first, first + count) in grad(): one contiguous view.
  Tensor grad_of_parts(size_t first, size_t count);
  size_t size() const { return parts_.size(); }
  const Parameter& part(size_t i) const { return *parts_.at(i); }

  // The gradients move into `place` (contiguous, as many elements, on the
  // group's device), keeping their values: the optimizer's flat gradient
  // buffer, where the parts then sit side by side in the group's order.
  void move_grads_into(const Tensor& place);
  // Parameter::to, set_compute_dtype, for the whole group.
  void to(Device device);
  void set_compute_dtype(DType dtype);
  // This group's parts view `owner`'s storage (a replica model shares its
  // owner's parameters); the groups must have the same parts' shapes.
  void share_storage_of(const ParameterGroup& owner);
  // InternalError naming the part and `what` unless every part still views
  // the group's storage: a parameter given storage of its own behind the
  // group's back would otherwise leave the layer computing with stale rows.
  void check_views(const char* what) const;

 private:
  // Points each part's value, grad and compute copy at its rows.
  void view_parts();

  std::vector<Parameter*> parts_;
  std::vector<int64_t> row_offsets_;  // parts_.size() + 1 entries
  Tensor value_, grad_, compute_copy_;
};

// Model-wide, for a parameter list where some parameters belong to groups:
// each ungrouped parameter, and each group once, moved / given compute copies.
void move_parameters(const std::vector<Parameter*>& params, Device device);
void set_compute_dtype(const std::vector<Parameter*>& params, DType dtype);
// mine[i] takes theirs[i]'s storage (the same names and shapes, which the
// caller checked); grouped parameters through their groups.
void share_parameters(const std::vector<Parameter*>& mine, const std::vector<Parameter*>& theirs);

}  // namespace colrow
