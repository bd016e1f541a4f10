// Checkpoints: a directory with config.json and model.safetensors, unsharded,
// with Hugging Face's tensor names and layouts, loadable at any tp. Each rank
// reads and writes only its own slices (io/safetensors.h); nothing gathers a
// whole tensor.
//   gpt2:  wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
//          mlp.c_proj}, ln_f (read with or without "transformer."); c_attn,
//          c_proj, c_fc are Conv1D, stored [in, out]; c_attn holds Q, K, V as
//          three blocks of its output dim.
//   llama: model.embed_tokens, model.layers.N.{input_layernorm,
//          self_attn.{q,k,v,o}_proj, post_attention_layernorm,
//          mlp.{gate,up,down}_proj}, model.norm, lm_head ([out, in]).
// The padded vocabulary rows are not in the file: zero on load, dropped on save.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/gpt_model.h"

namespace colrow {

// Where one colrow parameter lives in a Hugging Face file.
struct CheckpointBinding {
  Parameter* parameter = nullptr;
  std::string file_name;    // without gpt2's optional "transformer." prefix
  Shape file_shape;         // as stored in the file
  bool transposed = false;  // Conv1D: the file holds the transpose of colrow's [out, in]
  int64_t row_offset = 0;   // colrow rows before this parameter in a fused tensor (c_attn)
};

// The bindings of every parameter of `model`, in parameters() order.
std::vector<CheckpointBinding> checkpoint_bindings(GptModel& model);

// The machinery under load/save_checkpoint, for any per-parameter tensor of
// the parameter's shape (the optimizer's moments use it too): reads or writes
// `tensor_of(parameter)` for every binding, by this rank's slices. Loading is
// collective over `group` (the model's tp group) for one step only: the
// file's checksums are verified together (SafetensorsReader::verify_checksums).
void load_tensors(const std::vector<CheckpointBinding>& bindings, const std::string& path,
                  const std::function<Tensor&(Parameter&)>& tensor_of, bool gpt2_prefix_allowed,
                  Communicator& group);
// Collective over `writers`: the ranks of one dp replica that write the file
// together, tp alone or, pipelined, the tp x pp ranks of every stage (their
// tensor lists are gathered, so each knows the whole file's layout). The
// first of a shard's tp replicas writes it; a pipeline's copy of tied
// embeddings (Parameter::pipeline_copy) is left to the first stage. The
// file stores `dtype` (BF16: each fp32 value rounded to nearest even).
void save_tensors(const std::vector<CheckpointBinding>& bindings, const std::string& path,
                  const std::function<const Tensor&(const Parameter&)>& tensor_of, Communicator& tp,
                  Communicator& writers, DType dtype = DType::kF32);
inline void save_tensors(const std::vector<CheckpointBinding>& bindings, const std::string& path,
                         const std::function<const Tensor&(const Parameter&)>& tensor_of,
                         Communicator& tp) {
  save_tensors(bindings, path, tensor_of, tp, tp);
}
// Creates dir on rank 0 of `group`; every rank throws alike if that fails.
// Collective over that group.
void make_directory(const std::string& dir, Communicator& group);

// Reads dir/model.safetensors into `model` (its config must match the file's
// shapes). Every rank reads its own slices; the ranks of the model's tp
// group verify the file's checksums together first (one all_gather).
void load_checkpoint(GptModel& model, const std::string& dir);

// Writes dir/config.json and dir/model.safetensors (F32, or BF16 for a
// half-size export to inference: torch_dtype "bfloat16"), each through a
// temporary name and a rename, so a failure never damages a checkpoint
// already in dir. Collective over `writers` (tp, or a pipeline's tp x pp
// ranks; see save_tensors); call it on one dp replica only.
void save_checkpoint(GptModel& model, const std::string& dir, Communicator& tp,
                     Communicator& writers, DType dtype = DType::kF32);
inline void save_checkpoint(GptModel& model, const std::string& dir, Communicator& tp) {
  save_checkpoint(model, dir, tp, tp);
}

}  // namespace colrow
