// ParameterGroup: one storage for several parameters, each a block of rows.
#include "colrow/nn/parameter_group.h"

#include <algorithm>

#include "colrow/core/error.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

Shape trailing(const Shape& shape) {
  return Shape(shape.begin() + 1, shape.end());
}

// Bytes per row (dim 0) of t.
int64_t row_bytes(const Tensor& t) {
  return t.size(0) == 0 ? 0 : t.bytes() / t.size(0);
}

// Parameters of `params` in order, each group once in the order of its first part.
std::vector<ParameterGroup*> groups_of(const std::vector<Parameter*>& params) {
  std::vector<ParameterGroup*> groups;
  for (Parameter* p : params) {
    if (p->group != nullptr && std::find(groups.begin(), groups.end(), p->group) == groups.end()) {
      groups.push_back(p->group);
    }
  }
  return groups;
}

}  // namespace

ParameterGroup::ParameterGroup(std::vector<Parameter*> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw InternalError("[parameter_group] a group needs at least one part");
  const Parameter& first = *parts_.front();
  row_offsets_.push_back(0);
  for (const Parameter* p : parts_) {
    const Tensor& v = p->value;
    if (p->group != nullptr || v.ndim() < 1 || !v.is_contiguous() ||
        trailing(v.shape()) != trailing(first.value.shape()) ||
        v.device() != first.value.device()) {
      throw InternalError("[parameter_group] " + p->name + " " + shape_to_string(v.shape()) +
                          " cannot join " + first.name + " " +
                          shape_to_string(first.value.shape()) +
                          ": parts are ungrouped, contiguous, on one device, and differ in "
                          "their first dim only");
    }
    row_offsets_.push_back(row_offsets_.back() + v.size(0));
  }
  Shape shape = first.value.shape();
  shape[0] = row_offsets_.back();
  const Device device = first.value.device();
  value_ = Tensor::empty(shape, device);
  grad_ = Tensor::empty(shape, device);
  for (size_t i = 0; i < parts_.size(); ++i) {
    const int64_t rows = row_offsets_[i + 1] - row_offsets_[i];
    value_.slice(0, row_offsets_[i], rows).copy_from(parts_[i]->value);
    grad_.slice(0, row_offsets_[i], rows).copy_from(parts_[i]->grad);
  }
  const bool mixed = first.compute_copy.owns_storage();
  if (mixed) {
    compute_copy_ = Tensor::empty(shape, device, first.compute_copy.dtype());
    for (size_t i = 0; i < parts_.size(); ++i) {
      compute_copy_.slice(0, row_offsets_[i], row_offsets_[i + 1] - row_offsets_[i])
          .copy_from(parts_[i]->compute_copy);
    }
  }
  view_parts();
}

Tensor ParameterGroup::grad_of_parts(size_t first, size_t count) {
  if (first + count > parts_.size() || count == 0) {
    throw InternalError("[parameter_group] parts [" + std::to_string(first) + ", " +
                        std::to_string(first + count) + ") of a group of " +
                        std::to_string(parts_.size()));
  }
  return grad_.slice(0, row_offsets_[first], row_offsets_[first + count] - row_offsets_[first]);
}

void ParameterGroup::move_grads_into(const Tensor& place) {
  if (!place.is_contiguous() || place.numel() != grad_.numel() ||
      place.device() != grad_.device() || place.dtype() != grad_.dtype()) {
    throw InternalError("[parameter_group] " + parts_.front()->name + ": gradients " +
                        shape_to_string(grad_.shape()) + " cannot move into " +
                        shape_to_string(place.shape()) +
                        " (contiguous, as many elements, one device and dtype)");
  }
  Tensor moved = place.view(grad_.shape());
  moved.copy_from(grad_);
  grad_ = moved;  // a handle: the old storage goes when its last handle does
  view_parts();
}

void ParameterGroup::view_parts() {
  for (size_t i = 0; i < parts_.size(); ++i) {
    Parameter& p = *parts_[i];
    const int64_t rows = row_offsets_[i + 1] - row_offsets_[i];
    p.value = value_.slice(0, row_offsets_[i], rows);
    p.grad = grad_.slice(0, row_offsets_[i], rows);
    p.compute_copy =
        compute_copy_.owns_storage() ? compute_copy_.slice(0, row_offsets_[i], rows) : Tensor();
    p.group = this;
  }
}

void ParameterGroup::to(Device device) {
  value_ = value_.to(device);
  grad_ = grad_.to(device);
  if (compute_copy_.owns_storage()) compute_copy_ = compute_copy_.to(device);
  view_parts();
}

void ParameterGroup::set_compute_dtype(DType dtype) {
  if (dtype == DType::kF32) {
    compute_copy_ = Tensor();
  } else {
    compute_copy_ = Tensor::empty(value_.shape(), value_.device(), dtype);
    ops::convert(value_, compute_copy_);  // as Parameter::refresh_compute rounds
  }
  view_parts();
}

void ParameterGroup::share_storage_of(const ParameterGroup& owner) {
  if (owner.row_offsets_ != row_offsets_ || owner.value_.shape() != value_.shape()) {
    throw InternalError("[parameter_group] " + parts_.front()->name +
                        ": a group shares the storage of a group of the same parts only");
  }
  value_ = owner.value_;  // handles onto the owner's storage
  grad_ = owner.grad_;
  compute_copy_ = owner.compute_copy_;
  view_parts();
}

void ParameterGroup::check_views(const char* what) const {
  auto views = [&](const Tensor& part, const Tensor& whole, int64_t row) {
    return part.raw_data() == static_cast<const char*>(whole.raw_data()) + row * row_bytes(whole) &&
           part.device() == whole.device() && part.dtype() == whole.dtype();
  };
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Parameter& p = *parts_[i];
    const int64_t row = row_offsets_[i];
    const bool ok = p.group == this && views(p.value, value_, row) && views(p.grad, grad_, row) &&
                    (compute_copy_.owns_storage() ? views(p.compute_copy, compute_copy_, row)
                                                  : !p.compute_copy.owns_storage());
    if (!ok) {
      throw InternalError(std::string("[parameter_group] ") + what + ": " + p.name +
                          " no longer views its group's storage; give a grouped parameter new "
                          "storage through its ParameterGroup");
    }
  }
}

void move_parameters(const std::vector<Parameter*>& params, Device device) {
  for (Parameter* p : params) {
    if (p->group == nullptr) p->to(device);
  }
  for (ParameterGroup* g : groups_of(params)) g->to(device);
}

void set_compute_dtype(const std::vector<Parameter*>& params, DType dtype) {
  for (Parameter* p : params) {
    if (p->group == nullptr) p->set_compute_dtype(dtype);
  }
  for (ParameterGroup* g : groups_of(params)) g->set_compute_dtype(dtype);
}

void share_parameters(const std::vector<Parameter*>& mine, const std::vector<Parameter*>& theirs) {
  for (size_t i = 0; i < mine.size(); ++i) {
    Parameter& p = *mine[i];
    const Parameter& owner = *theirs.at(i);
    if ((p.group == nullptr) != (owner.group == nullptr)) {
      throw InternalError("[parameter_group] " + p.name +
                          " is grouped in one model and not in the other");
    }
    if (p.group != nullptr) continue;  // below, with its group
    p.value = owner.value;             // handles onto the owner's storage
    p.grad = owner.grad;
    p.compute_copy = owner.compute_copy;
  }
  const std::vector<ParameterGroup*> my_groups = groups_of(mine), their_groups = groups_of(theirs);
  if (my_groups.size() != their_groups.size()) {
    throw InternalError("[parameter_group] the models group their parameters differently");
  }
  for (size_t i = 0; i < my_groups.size(); ++i) my_groups[i]->share_storage_of(*their_groups[i]);
}

}  // namespace colrow
