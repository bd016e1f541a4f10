// VocabParallelEmbedding: vocabulary rows split over tp.
// Collectives: forward one all-reduce of y over tp ([g fwd]); backward none.
#include "colrow/nn/vocab_parallel_embedding.h"

#include <algorithm>

#include "colrow/core/error.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

// The whole table, before any allocation.
int64_t validated_rows(int64_t vocab_size, int64_t padded, int64_t d_model, int tp) {
  validate_vocab_sizes("embedding", vocab_size, padded, tp);
  if (d_model < 1) {
    throw ConfigError("[embedding] d_model (" + std::to_string(d_model) + ") must be positive.");
  }
  return padded / tp;
}

// Ids are replicated, so every rank finds the same first bad id and throws the
// same message before the forward's collective: nothing is left waiting.
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab_size) {
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] >= 0 && ids[t] < vocab_size) continue;
    const std::string head = "[embedding] token id (" + std::to_string(ids[t]) + ") at position " +
                             std::to_string(t) + " must be ";
    const std::string fix = ". Check that the tokenizer matches the model's vocabulary.";
    if (ids[t] < 0) throw InvalidInputError(head + ">= 0" + fix);
    throw InvalidInputError(head + "< vocab_size (" + std::to_string(vocab_size) + ")" + fix);
  }
}

}  // namespace

int64_t padded_vocab_size(int64_t vocab_size, int tp, int64_t multiple) {
  if (vocab_size < 1 || tp < 1 || multiple < 1) {
    throw ConfigError("[vocab] vocab_size (" + std::to_string(vocab_size) + "), tp (" +
                      std::to_string(tp) + ") and multiple (" + std::to_string(multiple) +
                      ") must be positive.");
  }
  const int64_t step = multiple * tp;
  return (vocab_size + step - 1) / step * step;
}

void validate_vocab_sizes(const std::string& component, int64_t vocab_size,
                          int64_t padded_vocab_size, int tp) {
  if (vocab_size < 1) {
    throw ConfigError("[" + component + "] vocab_size (" + std::to_string(vocab_size) +
                      ") must be positive.");
  }
  if (padded_vocab_size < vocab_size) {
    throw ConfigError("[" + component + "] padded_vocab_size (" +
                      std::to_string(padded_vocab_size) + ") must be >= vocab_size (" +
                      std::to_string(vocab_size) + "). Use padded_vocab_size(vocab_size, tp) = " +
                      std::to_string(::colrow::padded_vocab_size(vocab_size, tp)) + ".");
  }
  require_divisible(component, "padded_vocab_size", padded_vocab_size, tp);
}

VocabParallelEmbedding::VocabParallelEmbedding(Communicator& tp, const std::string& name,
                                               int64_t vocab_size, int64_t padded_vocab_size,
                                               int64_t d_model, const Init& init, uint64_t seed)
    : tp_(tp),
      vocab_size_(vocab_size),
      padded_vocab_size_(padded_vocab_size),
      d_model_(d_model),
      vocab_size_local_(validated_rows(vocab_size, padded_vocab_size, d_model, tp.size())),
      vocab_start_(tp.rank() * vocab_size_local_),
      weight_(name + ".weight",
              ShardSpec{{padded_vocab_size, d_model}, /*dim=*/0, tp.rank(), tp.size()}, init,
              seed) {
  // fill_shard drew every row by its full index; padded rows must be zero (see the header).
  const int64_t first_padded =
      std::clamp(vocab_size_ - vocab_start_, int64_t{0}, vocab_size_local_);
  weight_.value.slice(0, first_padded, vocab_size_local_ - first_padded).zero();
}

const Tensor& VocabParallelEmbedding::forward(const std::vector<int32_t>& ids) {
  check_token_ids(ids, vocab_size_);  // before any collective
  ids_ = ids;
  const int64_t tokens = static_cast<int64_t>(ids.size()), d = d_model_;
  // ids: [tokens] -> y: [tokens, d_model], my rows or zero (Megatron's input mask)
  // The activations start here, in the dtype of the weights' compute copy.
  ensure_shape(y_, {tokens, d}, weight_.value.device(), weight_.compute().dtype());
  ops::embedding_forward(ids, vocab_start_, weight_.compute(), y_);
  tp_.all_reduce_sum(
      y_);  // [g fwd] all-reduce over tp: each row comes from the one rank owning its id
  return y_;
}

void VocabParallelEmbedding::stage(const std::vector<int32_t>& ids) {
  check_token_ids(ids, vocab_size_);
  ops::stage_embedding_ids(ids, vocab_start_, weight_.value);
}

void VocabParallelEmbedding::backward(const Tensor& dy) {
  // [g bwd] identity: dy is replicated over tp; each rank keeps the rows it owns
  const int64_t tokens = static_cast<int64_t>(ids_.size()), d = d_model_;
  if (dy.ndim() != 2 || dy.size(0) != tokens || dy.size(1) != d || (d > 1 && dy.stride(1) != 1)) {
    throw InternalError("[embedding] " + weight_.name + ": dy " + shape_to_string(dy.shape()) +
                        " must be [tokens (" + std::to_string(tokens) + "), d_model (" +
                        std::to_string(d) + ")] with contiguous rows");
  }
  // dW[id - vocab_start] += dy[t] for my ids, in token order (deterministic)
  ops::embedding_backward(ids_, vocab_start_, dy, weight_.grad);
}

}  // namespace colrow
