// Progress line, plain log lines and the metrics JSONL file.
#include "colrow/train/training_log.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string duration(double seconds) {
  const long s = static_cast<long>(std::max(0.0, seconds));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  }
  return text;
}

// Whether what rank 0 prints ends up on a terminal. Alone, that is
// isatty(stdout). Under mpirun, stdout is a pseudo-terminal that mpirun
// relays whatever mpirun's own stdout is, so ask about the parent (mpirun,
// which launches the ranks on its own node) instead.
bool prints_to_terminal() {
  if (!isatty(STDOUT_FILENO)) return false;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return true;
  char target[256];
  const std::string fd1 = "/proc/" + std::to_string(getppid()) + "/fd/1";
  const ssize_t n = readlink(fd1.c_str(), target, sizeof target - 1);
  return n > 0 && std::string(target, n).rfind("/dev/pts/", 0) == 0;
}

}  // namespace

double peak_rss_mib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // Linux reports KiB
}

TrainingLog::TrainingLog(bool is_root, const std::string& metrics_path, int64_t total_steps)
    : root_(is_root),
      root_printing_(is_root),
      terminal_(is_root && prints_to_terminal()),
      total_steps_(total_steps) {
  if (!root_ || metrics_path.empty()) return;
  metrics_ = std::fopen(metrics_path.c_str(), "a");
  if (metrics_ == nullptr) {
    throw InvalidInputError("[train] cannot open metrics file " + metrics_path + ": " +
                            std::strerror(errno) + ". Choose a writable --metrics path.");
  }
}

TrainingLog::~TrainingLog() {
  if (progress_open_ && root_printing_) std::fputc('\n', stdout);
  if (metrics_ != nullptr) std::fclose(metrics_);
}

void TrainingLog::line(const std::string& text) {
  if (!root_printing_) return;
  if (progress_open_) std::fputc('\n', stdout);
  progress_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void TrainingLog::step(const StepMetrics& m, double elapsed_seconds) {
  if (!root_) return;
  if (metrics_ != nullptr) {
    nlohmann::json j = {{"step", m.step},
                        {"loss", m.loss},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"step_ms", m.step_ms},
                        {"tokens_per_s", m.tokens_per_s},
                        {"gflops_per_s", m.gflops_per_s},
                        {"peak_rss_mib", m.peak_rss_mib},
                        {"peak_rss_mib_per_rank", m.peak_rss_mib_per_rank}};
    if (m.val_loss >= 0.0) j["val_loss"] = m.val_loss;
    if (m.mfu >= 0.0) j["mfu"] = m.mfu;
    if (m.peak_device_mib >= 0.0) j["peak_device_mib"] = m.peak_device_mib;
    if (m.peak_host_tensor_mib >= 0.0) j["peak_host_tensor_mib"] = m.peak_host_tensor_mib;
    if (m.pipeline_bubble >= 0.0) {
      j["pipeline_bubble"] = m.pipeline_bubble;
      j["pipeline_bubble_ideal"] = m.pipeline_bubble_ideal;
    }
    if (m.skipped) j["skipped"] = true;
    if (m.skipped_steps > 0) j["skipped_steps"] = m.skipped_steps;
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  if (!root_printing_) return;
  const double eta = m.step > 0 ? elapsed_seconds / m.step * (total_steps_ - m.step) : 0.0;
  char val[32] = "";
  if (m.val_loss >= 0.0) std::snprintf(val, sizeof val, "  val %.4f", m.val_loss);
  char mfu[32] = "";
  if (m.mfu >= 0.0) std::snprintf(mfu, sizeof mfu, "  MFU %.1f%%", 100.0 * m.mfu);
  char device_memory[40] = "";
  if (m.peak_device_mib >= 0.0) {
    std::snprintf(device_memory, sizeof device_memory, "  peak %.0f MiB", m.peak_device_mib);
  }
  char bubble[48] = "";
  if (m.pipeline_bubble >= 0.0) {
    std::snprintf(bubble, sizeof bubble, "  bubble %.0f%% (ideal %.0f%%)",
                  100.0 * m.pipeline_bubble, 100.0 * m.pipeline_bubble_ideal);
  }
  char skipped[48] = "";
  if (m.skipped) {
    std::snprintf(skipped, sizeof skipped, "  SKIPPED (%ld so far)",
                  static_cast<long>(m.skipped_steps));
  }
  char text[384];
  std::snprintf(
      text, sizeof text,
      "step %5ld/%ld  loss %.4f%s  lr %.2e  |g| %.3f%s  %.0f tok/s  %.1f GFLOP/s%s%s%s  eta %s",
      static_cast<long>(m.step), static_cast<long>(total_steps_), m.loss, val, m.lr, m.grad_norm,
      skipped, m.tokens_per_s, m.gflops_per_s, mfu, device_memory, bubble, duration(eta).c_str());
  if (terminal_) {
    std::printf("\r\033[K%s", text);  // redraw in place
    progress_open_ = true;
    if (m.val_loss >= 0.0 || m.step == total_steps_) {
      std::fputc('\n', stdout);
      progress_open_ = false;
    }
  } else {
    std::printf("%s\n", text);
  }
  std::fflush(stdout);
}

}  // namespace colrow
