// One causal attention problem of the kernel tests (kernels/cpu, and the
// plain and fused kernels of kernels/cuda): its sizes, a name for traces, and
// its exact result with fp32 error bounds (support/attention_reference).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"
#include "support/attention_reference.h"

namespace colrow::testing {

struct AttentionCase {
  int64_t batch, seq, n_head, n_kv_head, head_dim;
  int64_t window = 0;  // 0: causal; else the sliding window (Mistral)
  std::string name() const {
    return "batch " + std::to_string(batch) + ", seq " + std::to_string(seq) + ", heads " +
           std::to_string(n_head) + "/" + std::to_string(n_kv_head) + ", head_dim " +
           std::to_string(head_dim) + ", window " + std::to_string(window);
  }
  int64_t tokens() const { return batch * seq; }
  int64_t q_width() const { return n_head * head_dim; }
  int64_t kv_width() const { return n_kv_head * head_dim; }
};

// The exact attention of host tensors q, k, v and dout (read from any device).
inline reference::CoreResult attention_reference(const AttentionCase& c, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const Tensor& dout) {
  const auto exact = [](const Tensor& t) {
    const std::vector<float> values = t.to_vector();
    return reference::exact(reference::Matrix(values.begin(), values.end()));
  };
  reference::CoreDims dims;
  dims.batch = c.batch;
  dims.seq = c.seq;
  dims.n_head = c.n_head;
  dims.n_kv_head = c.n_kv_head;
  dims.head_dim = c.head_dim;
  dims.window = c.window;
  return reference::causal_attention(dims, exact(q), exact(k), exact(v), exact(dout));
}

}  // namespace colrow::testing
