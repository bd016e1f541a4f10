// Hugging Face checkpoints at any tp: the name/layout map and the per-rank
// slice reads and writes it drives.
#include "colrow/nn/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "colrow/core/error.h"
#include "colrow/dist/gather_text.h"
#include "colrow/io/safetensors.h"

namespace colrow {
namespace {

constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Replaces the last occurrence of `from` in `name` by `to`.
std::string renamed(const std::string& name, const std::string& from, const std::string& to) {
  const size_t at = name.rfind(from);
  return at == std::string::npos ? name : name.substr(0, at) + to + name.substr(at + from.size());
}

CheckpointBinding gpt2_binding(Parameter* p, const ModelConfig& c) {
  CheckpointBinding b{p, p->name, p->shard.full_shape, false, 0};
  const int64_t d = c.d_model, q = static_cast<int64_t>(c.n_head) * c.head_dim,
                kv = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  const bool weight = ends_with(p->name, ".weight");
  const Shape& full = p->shard.full_shape;
  // Attention's q/k/v are the three output blocks of the fused Conv1D c_attn.
  for (const auto& [proj, offset] : {std::pair<const char*, int64_t>{".attn.q_proj.", 0},
                                     {".attn.k_proj.", q},
                                     {".attn.v_proj.", q + kv}}) {
    if (p->name.find(proj) == std::string::npos) continue;
    b.file_name = renamed(p->name, std::string(proj), ".attn.c_attn.");
    b.row_offset = offset;
    b.transposed = weight;
    b.file_shape = weight ? Shape{d, q + 2 * kv} : Shape{q + 2 * kv};
    return b;
  }
  if (p->name.find(".attn.o_proj.") != std::string::npos) {
    b.file_name = renamed(p->name, ".attn.o_proj.", ".attn.c_proj.");
  }
  // Conv1D layers (c_attn, c_proj, c_fc) store weights [in, out].
  if (weight && (b.file_name.find(".attn.c_proj.") != std::string::npos ||
                 b.file_name.find(".mlp.c_fc.") != std::string::npos ||
                 b.file_name.find(".mlp.c_proj.") != std::string::npos)) {
    b.transposed = true;
    b.file_shape = {full[1], full[0]};
  }
  if (p->name == "wte.weight") b.file_shape = {c.vocab_size, d};  // padding not stored
  return b;
}

CheckpointBinding llama_binding(Parameter* p, const ModelConfig& c) {
  CheckpointBinding b{p, p->name, p->shard.full_shape, false, 0};
  if (p->name == "model.embed_tokens.weight" || p->name == "lm_head.weight") {
    b.file_shape = {c.vocab_size, c.d_model};  // padding not stored
  }
  return b;
}

// This rank's block of the parameter, in colrow's orientation: rows
// [row0, row0 + rows) and columns [col0, col0 + cols) of the full tensor.
struct Block {
  int64_t row0, rows, col0, cols;
};

Block block_of(const ShardSpec& s) {
  const Shape local = s.local_shape();
  const bool matrix = s.full_shape.size() == 2;
  Block blk{0, local[0], 0, matrix ? local[1] : 1};
  if (s.dim == 0) blk.row0 = s.offset_along_dim();
  if (s.dim == 1) blk.col0 = s.offset_along_dim();
  return blk;
}

// Rows of colrow's full tensor that exist in the file (vocab padding does not).
int64_t stored_rows(const CheckpointBinding& b) {
  return b.transposed ? b.file_shape[1] : b.file_shape[0];
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      throw BackendError("[checkpoint] cannot write " + tmp + ": " + std::strerror(errno) + ".");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw BackendError("[checkpoint] cannot rename " + tmp + " to " + path + ": " +
                       std::strerror(errno) + ".");
  }
}

// The (name, shape) entries of every rank of `writers`, each once, in name
// order: the whole file's tensor list when each pipeline stage knows its own.
std::vector<std::pair<std::string, Shape>> entries_of_every_stage(
    Communicator& writers, const std::vector<std::pair<std::string, Shape>>& mine) {
  std::string text;  // one "name<TAB>d0,d1,...<LF>" per entry
  for (const auto& [name, shape] : mine) {
    text += name + '\t';
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
    text += '\n';
  }
  std::map<std::string, Shape> all;
  for (const std::string& rank_text : all_gather_text(writers, text)) {  // [writers] the lists
    std::istringstream lines(rank_text);
    std::string line;
    while (std::getline(lines, line)) {
      const size_t tab = line.find('\t');
      Shape shape;
      std::istringstream dims(line.substr(tab + 1));
      std::string dim;
      while (std::getline(dims, dim, ',')) shape.push_back(std::stoll(dim));
      all.emplace(line.substr(0, tab), shape);
    }
  }
  return {all.begin(), all.end()};
}

}  // namespace

std::vector<CheckpointBinding> checkpoint_bindings(GptModel& model) {
  std::vector<CheckpointBinding> bindings;
  const ModelConfig& c = model.config();
  for (Parameter* p : model.parameters()) {
    bindings.push_back(c.family == ModelFamily::kGpt2 ? gpt2_binding(p, c) : llama_binding(p, c));
  }
  return bindings;
}

void load_tensors(const std::vector<CheckpointBinding>& bindings, const std::string& path,
                  const std::function<Tensor&(Parameter&)>& tensor_of, bool gpt2_prefix_allowed,
                  Communicator& group) {
  const SafetensorsReader file(path);
  file.verify_checksums(group);  // a flipped byte: named here, before any weight is used
  // GPT-2 files come with and without the "transformer." prefix.
  const std::string prefix =
      gpt2_prefix_allowed && file.contains("transformer.wte.weight") ? "transformer." : "";
  for (const CheckpointBinding& b : bindings) {
    const std::string name = prefix + b.file_name;
    const TensorInfo& info = file.info(name);  // names the file and tensor when missing
    if (info.shape != b.file_shape) {
      throw InvalidInputError("[checkpoint] " + file.path() + ": tensor " + name + " has shape " +
                              shape_to_string(info.shape) + " but config.json implies " +
                              shape_to_string(b.file_shape) + ".");
    }
    Tensor& destination = tensor_of(*b.parameter);
    // Files are read into host memory; a tensor on a GPU is filled from a host copy.
    Tensor local = destination.device().is_cpu() ? destination : Tensor::empty(destination.shape());
    const Block blk = block_of(b.parameter->shard);
    // Rows past the file's (vocab padding) stay zero.
    const int64_t rows_in_file =
        std::max<int64_t>(0, std::min(blk.rows, stored_rows(b) - b.row_offset - blk.row0));
    local.zero();
    if (rows_in_file > 0) {
      Tensor target = local.slice(0, 0, rows_in_file);
      const int64_t row0 = b.row_offset + blk.row0;
      if (local.ndim() == 1) {
        file.read_rows(name, row0, rows_in_file, target);
      } else if (b.transposed) {
        file.read_block_transposed(name, row0, rows_in_file, blk.col0, blk.cols, target);
      } else {
        file.read_block(name, row0, rows_in_file, blk.col0, blk.cols, target);
      }
    }
    if (!destination.device().is_cpu()) destination.copy_from(local);
  }
}

void save_tensors(const std::vector<CheckpointBinding>& bindings, const std::string& path,
                  const std::function<const Tensor&(const Parameter&)>& tensor_of, Communicator& tp,
                  Communicator& writers, DType dtype) {
  std::vector<std::pair<std::string, Shape>> entries;
  for (const CheckpointBinding& b : bindings) {
    if (b.parameter->pipeline_copy) continue;  // the first stage saves the table
    if (b.row_offset == 0) entries.emplace_back(b.file_name, b.file_shape);  // fused: once
  }
  if (writers.size() > tp.size()) entries = entries_of_every_stage(writers, entries);
  SafetensorsWriter writer(writers, path, entries, {{"format", "pt"}}, dtype);
  for (const CheckpointBinding& b : bindings) {
    if (b.parameter->pipeline_copy) continue;
    const ShardSpec& shard = b.parameter->shard;
    if (!shard.first_replica(tp.rank(), tp.size())) continue;  // one replica writes
    const Block blk = block_of(shard);
    const int64_t rows_in_file =
        std::max<int64_t>(0, std::min(blk.rows, stored_rows(b) - b.row_offset - blk.row0));
    if (rows_in_file == 0) continue;
    // Written from host memory: a GPU tensor's block is copied down first.
    const Tensor block = tensor_of(*b.parameter).slice(0, 0, rows_in_file).to(Device::cpu());
    const int64_t row0 = b.row_offset + blk.row0;
    if (block.ndim() == 1) {
      writer.write_rows(b.file_name, row0, block);
    } else {
      writer.write_block(b.file_name, row0, blk.col0, block, b.transposed);
    }
  }
  writer.commit();
}

void make_directory(const std::string& dir, Communicator& group) {
  // Rank 0 creates the directory; every rank learns the outcome, so all
  // throw alike instead of some waiting in the writer's collectives.
  Tensor failed_errno = Tensor::zeros({1});
  if (group.rank() == 0 && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    failed_errno.data()[0] = static_cast<float>(errno);
  }
  group.broadcast(failed_errno, 0);
  if (failed_errno.data()[0] != 0.0f) {
    throw InvalidInputError("[checkpoint] cannot create directory " + dir + ": " +
                            std::strerror(static_cast<int>(failed_errno.data()[0])) +
                            ". Choose a writable --out directory.");
  }
}

void load_checkpoint(GptModel& model, const std::string& dir) {
  load_tensors(
      checkpoint_bindings(model), dir + "/" + kWeightsFile,
      [](Parameter& p) -> Tensor& { return p.value; }, model.config().family == ModelFamily::kGpt2,
      model.tp());
  model.refresh_compute_copies();  // mixed precision: the copies of the loaded values
}

void save_checkpoint(GptModel& model, const std::string& dir, Communicator& tp,
                     Communicator& writers, DType dtype) {
  make_directory(dir, writers);
  save_tensors(
      checkpoint_bindings(model), dir + "/" + kWeightsFile,
      [](const Parameter& p) -> const Tensor& { return p.value; }, tp, writers, dtype);
  if (writers.rank() == 0) {
    write_text_atomically(dir + "/" + kConfigFile, hf_config_json(model.config(), dtype));
  }
  writers.barrier();
}

}  // namespace colrow
