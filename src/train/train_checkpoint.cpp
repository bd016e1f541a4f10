// Training checkpoints: model + AdamW moments + step, atomically replaced.
#include "colrow/train/train_checkpoint.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/gather_text.h"
#include "colrow/nn/checkpoint.h"

namespace colrow {
namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kState = "train_state.json";
constexpr const char* kExpAvg = "optimizer.exp_avg.safetensors";
constexpr const char* kExpAvgSq = "optimizer.exp_avg_sq.safetensors";
constexpr const char* kMasterWeights = "optimizer.master_weights.safetensors";

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// rm -rf: a checkpoint directory holds only files.
void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", static_cast<long>(step));
  return name;
}

// Removes every checkpoint directory of run_dir but `keep`: step-N.tmp left
// by a save that was killed, and step-N that a kill between installing a
// checkpoint and removing its predecessor left behind. Without this a run
// resumed after such kills would keep them forever.
void remove_stale_checkpoints(const std::string& run_dir, const std::string& keep) {
  DIR* dir = ::opendir(run_dir.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  for (const dirent* entry = ::readdir(dir); entry != nullptr; entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("step-", 0) == 0 && name != keep) stale.push_back(name);
  }
  ::closedir(dir);
  for (const std::string& name : stale) remove_tree(run_dir + "/" + name);
}

// Views of parameter i's segment of a flat array, in the parameter's shape.
Tensor segment(AdamW& opt, const Tensor& flat, size_t i) {
  const Parameter& p = *opt.params()[i];
  return flat.slice(0, opt.offset(i), p.value.numel()).view(p.value.shape());
}

// `tensor_of` for save/load_tensors: the segment belonging to a parameter.
class Segments {
 public:
  Segments(AdamW& opt, const Tensor& flat) {
    for (size_t i = 0; i < opt.params().size(); ++i) {
      views_.emplace_back(opt.params()[i], segment(opt, flat, i));
    }
  }
  Tensor& of(const Parameter& p) {
    for (auto& [param, view] : views_) {
      if (param == &p) return view;
    }
    throw InternalError("[train] parameter " + p.name + " is not in the optimizer");
  }

 private:
  std::vector<std::pair<const Parameter*, Tensor>> views_;
};

void write_state(const std::string& path, const TrainState& s, const AdamW& opt,
                 const ProcessMesh& mesh) {
  nlohmann::json j = {{"step", s.step},
                      {"seed", s.seed},
                      {"skipped_steps", s.skipped_steps},
                      {"adam_steps", opt.step_count()},
                      {"zero", opt.config().zero},
                      {"tp", mesh.tp_size()},
                      {"pp", mesh.pp_size()},
                      {"dp", mesh.dp_size()}};
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();  // a full disk may show only now
  if (!out) throw BackendError("[train] cannot write " + path + ": " + std::strerror(errno) + ".");
}

// Every rank learns whether rank 0's filesystem step worked.
void agree(Communicator& world, int err, const std::string& what) {
  Tensor flag = Tensor::full({1}, static_cast<float>(err));
  world.broadcast(flag, 0);
  if (flag.data()[0] != 0.0f) {
    throw BackendError("[train] " + what + ": " + std::strerror(static_cast<int>(flag.data()[0])) +
                       ".");
  }
}

}  // namespace

std::string resolve_checkpoint_dir(const std::string& dir) {
  const std::string latest = dir + "/" + kLatest;
  return exists(latest) ? latest : dir;
}

std::string save_training_checkpoint(GptModel& model, AdamW& opt, const TrainState& state,
                                     const std::string& run_dir, ProcessMesh& mesh,
                                     DType model_dtype, const FaultInjector& faults) {
  Communicator& world = mesh.world();
  const std::string final_dir = run_dir + "/" + step_name(state.step);
  const std::string tmp_dir = final_dir + ".tmp";
  // Moments gathered over dp first: every rank takes part.
  const Tensor exp_avg = opt.gather_slices(opt.exp_avg());
  const Tensor exp_avg_sq = opt.gather_slices(opt.exp_avg_sq());
  // An I/O error (a full disk, a vanished directory) fails the writers
  // alike (SafetensorsWriter agrees on it); write_state is rank 0's alone.
  // Every rank learns it below and stops, so no step goes unsaved.
  std::string failure;
  if (mesh.dp_rank() == 0) {  // one replica writes; each of its tp x pp ranks its slices
    try {
      Communicator& writers = mesh.model_parallel();
      save_checkpoint(model, tmp_dir, mesh.tp(), writers, model_dtype);
      faults.kill_if_due(FaultKind::kKillInSave, state.step);
      const std::vector<CheckpointBinding> bindings = checkpoint_bindings(model);
      if (model_dtype != DType::kF32) {  // the export rounded them: keep what training holds
        save_tensors(
            bindings, tmp_dir + "/" + kMasterWeights,
            [](const Parameter& p) -> const Tensor& { return p.value; }, mesh.tp(), writers);
      }
      Segments m(opt, exp_avg), v(opt, exp_avg_sq);
      save_tensors(
          bindings, tmp_dir + "/" + kExpAvg,
          [&m](const Parameter& p) -> const Tensor& { return m.of(p); }, mesh.tp(), writers);
      save_tensors(
          bindings, tmp_dir + "/" + kExpAvgSq,
          [&v](const Parameter& p) -> const Tensor& { return v.of(p); }, mesh.tp(), writers);
      if (writers.rank() == 0) write_state(tmp_dir + "/" + kState, state, opt, mesh);
    } catch (const BackendError& e) {
      failure = e.what();
    } catch (const InvalidInputError& e) {
      failure = e.what();
    }
  }
  // [agree] every rank's failure, if any (also the barrier before the rename)
  for (const std::string& text : all_gather_text(world, failure)) {
    if (text.empty()) continue;
    if (world.rank() == 0) remove_tree(tmp_dir);  // the space a full disk needs back
    throw BackendError(text + " Saving " + step_name(state.step) + " failed; training stopped, " +
                       run_dir + "/" + kLatest + " is unchanged.");
  }
  int err = 0;
  if (world.rank() == 0) {
    // tmp -> final, then latest -> final (a new symlink renamed over the old),
    // then the previous checkpoint goes.
    const std::string link_tmp = run_dir + "/" + kLatest + ".tmp";
    ::unlink(link_tmp.c_str());
    if (exists(final_dir)) remove_tree(final_dir);
    if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0 ||
        ::symlink(step_name(state.step).c_str(), link_tmp.c_str()) != 0 ||
        std::rename(link_tmp.c_str(), (run_dir + "/" + kLatest).c_str()) != 0) {
      err = errno;
    } else {  // the previous checkpoint, and any a killed run left
      remove_stale_checkpoints(run_dir, step_name(state.step));
    }
  }
  agree(world, err, "cannot install checkpoint " + final_dir);
  return final_dir;
}

TrainState load_training_checkpoint(GptModel& model, AdamW& opt, const std::string& dir) {
  const std::string step_dir = resolve_checkpoint_dir(dir);
  std::ifstream in(step_dir + "/" + kState);
  if (!in) {
    throw InvalidInputError("[train] " + step_dir + " has no " + kState +
                            ": not a training checkpoint. Use --init for a model-only directory.");
  }
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InvalidInputError("[train] " + step_dir + "/" + kState +
                            " is not valid JSON: " + e.what());
  }
  TrainState state;
  state.step = j.value("step", int64_t{0});
  state.seed = j.value("seed", uint64_t{0});
  state.skipped_steps = j.value("skipped_steps", int64_t{0});
  const std::vector<CheckpointBinding> bindings = checkpoint_bindings(model);
  if (exists(step_dir + "/" + kMasterWeights)) {
    load_tensors(
        bindings, step_dir + "/" + kMasterWeights, [](Parameter& p) -> Tensor& { return p.value; },
        false, model.tp());
    model.refresh_compute_copies();
  } else {
    load_checkpoint(model, step_dir);
  }
  // The moments, whole, then this rank's dp slice.
  for (const auto& [file, moment] :
       {std::pair<const char*, Tensor*>{kExpAvg, &opt.exp_avg()}, {kExpAvgSq, &opt.exp_avg_sq()}}) {
    Tensor whole = Tensor::zeros({opt.padded_size()});
    Segments views(opt, whole);
    load_tensors(
        bindings, step_dir + "/" + file, [&views](Parameter& p) -> Tensor& { return views.of(p); },
        false, model.tp());
    opt.copy_own_slice(whole, *moment);
  }
  opt.set_step_count(j.value("adam_steps", state.step));
  return state;
}

}  // namespace colrow
