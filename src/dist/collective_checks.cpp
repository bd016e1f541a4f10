// Operand checks shared by the communicator backends (see collective_checks.h).
#include "dist/collective_checks.h"

#include "colrow/core/error.h"
#include "colrow/dist/communicator.h"

namespace colrow::collective_checks {

void require_host(const Tensor& t, const char* what, const std::string& group) {
  if (!t.device().is_cpu()) {
    throw InternalError("[dist] " + std::string(what) + " over " + group +
                        ": host collectives take host tensors, got one on " + t.device().str() +
                        ". Wrap the group with make_device_communicator "
                        "(dist/device_communicator.h).");
  }
}

void require_contiguous(const Tensor& t, const char* what, const std::string& group) {
  if (!t.is_contiguous()) {
    throw InternalError("[dist] " + std::string(what) + " over " + group +
                        " needs a contiguous tensor, got strides of shape " +
                        shape_to_string(t.shape()));
  }
}

void require_host_contiguous(const Tensor& t, const char* what, const std::string& group) {
  require_host(t, what, group);
  require_contiguous(t, what, group);
}

void require_bf16(std::initializer_list<const Tensor*> tensors, const char* what,
                  const std::string& group) {
  for (const Tensor* t : tensors) {
    if (t->dtype() != DType::kBF16) {
      throw InternalError("[dist] " + std::string(what) + " over " + group +
                          " carries bf16 tensors, got " + dtype_name(t->dtype()) +
                          ": convert with Tensor::to(DType::kBF16) first");
    }
  }
}

void require_gather_sizes(const Tensor& in, const Tensor& out, int size, const std::string& group) {
  if (out.numel() != in.numel() * size) {
    throw InternalError("[dist] all_gather over " + group + ": output " +
                        shape_to_string(out.shape()) + " must hold " + std::to_string(size) +
                        " x input " + shape_to_string(in.shape()));
  }
}

void require_scatter_sizes(const Tensor& in, const Tensor& out, int size,
                           const std::string& group) {
  if (in.numel() != out.numel() * size) {
    throw InternalError("[dist] reduce_scatter_sum over " + group + ": input " +
                        shape_to_string(in.shape()) + " must hold " + std::to_string(size) +
                        " x output " + shape_to_string(out.shape()));
  }
}

void require_root(int root, int size, const std::string& group) {
  if (root < 0 || root >= size) {
    throw InternalError("[dist] broadcast root (" + std::to_string(root) + ") must be a rank of " +
                        group + " (size " + std::to_string(size) + ")");
  }
}

void require_peer(int peer, const char* role, int rank, int size, const char* what,
                  const std::string& group) {
  const std::string head = "[dist] " + std::string(what) + " over " + group + ": " + role + " (" +
                           std::to_string(peer) + ")";
  if (peer < 0 || peer >= size) {
    throw InternalError(head + " must be a rank of " + group + " (0 <= " + role + " < " +
                        std::to_string(size) + ")");
  }
  if (peer == rank) {
    throw InternalError(head + " must differ from this rank (" + std::to_string(rank) +
                        "): point to point has no message to itself. Keep the tensor instead.");
  }
}

void require_tag(int tag, const char* what, const std::string& group) {
  if (tag < 0 || tag > Communicator::kMaxTag) {
    throw InternalError("[dist] " + std::string(what) + " over " + group + ": tag (" +
                        std::to_string(tag) + ") must be in [0, " +
                        std::to_string(Communicator::kMaxTag) + "]");
  }
}

void require_peer_and_tag(int peer, const char* role, int tag, int rank, int size, const char* what,
                          const std::string& group) {
  require_peer(peer, role, rank, size, what, group);
  require_tag(tag, what, group);
}

void require_message_bytes(int64_t sent_bytes, const Tensor& x, int src, int tag,
                           const std::string& group) {
  const int64_t element = dtype_bytes(x.dtype());
  if (sent_bytes == x.numel() * element) return;
  const std::string sent = sent_bytes % element == 0 ? std::to_string(sent_bytes / element)
                                                     : std::to_string(sent_bytes) + " bytes";
  throw InternalError("[dist] recv over " + group + " from src (" + std::to_string(src) +
                      ") with tag (" + std::to_string(tag) + "): message count (" + sent +
                      ") must equal the receiving tensor's count (" + std::to_string(x.numel()) +
                      ", shape " + shape_to_string(x.shape()) + ", " + dtype_name(x.dtype()) +
                      "). Receive into the shape and dtype the sender sends.");
}

}  // namespace colrow::collective_checks
