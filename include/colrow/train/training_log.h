// TrainingLog: what a training run shows and records, on rank 0 only.
// On a terminal (also through mpirun), one progress line redrawn in place (step/total, loss,
// tokens/s, ETA); otherwise one plain line per report, so logs and pipes stay
// readable. Every step also goes to the metrics file as one JSON object per
// line (JSONL), flushed, so a killed run keeps what it measured.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace colrow {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double tokens_per_s = 0.0;
  double gflops_per_s = 0.0;  // achieved, per rank
  double mfu = -1.0;  // gflops_per_s over the device's peak; < 0 when the peak is unknown (cpu)
  double peak_rss_mib = 0.0;                  // the largest over ranks
  std::vector<double> peak_rss_mib_per_rank;  // world rank order
  double peak_device_mib = -1.0;  // the device allocator's peak, largest over ranks; < 0 on the cpu
  double peak_host_tensor_mib =
      -1.0;                // the host allocator's peak (tensors only), largest over ranks
  double val_loss = -1.0;  // < 0: not measured at this step
  double step_ms = 0.0;    // the step's wall time (schedule, optimizer, loss reduction)
  // pp > 1, on the CPU every step, on a GPU the --profile steps (< 0
  // otherwise): the share of the 1F1B schedule's time a stage spends not
  // computing (1 - mean busy / slowest stage's time over every rank), beside
  // the schedule's ideal (pp - 1) / (m + pp - 1) for equal stages.
  double pipeline_bubble = -1.0;
  double pipeline_bubble_ideal = -1.0;
  bool skipped = false;       // the gradient was not finite: no update (--skip-nonfinite)
  int64_t skipped_steps = 0;  // such steps so far in the run
};

class TrainingLog {
 public:
  // metrics_path "" writes no file. is_root: rank 0 (the only one that prints).
  TrainingLog(bool is_root, const std::string& metrics_path, int64_t total_steps);
  ~TrainingLog();
  TrainingLog(const TrainingLog&) = delete;
  TrainingLog& operator=(const TrainingLog&) = delete;

  void line(const std::string& text);  // a plain line (ends the progress line first)
  // From now on nothing goes to stdout (the metrics file still gets every
  // step): for a run stopping because its launcher is shutting down.
  void silence() { root_printing_ = false; }
  void step(const StepMetrics& m, double elapsed_seconds);

 private:
  bool root_;
  bool root_printing_;
  bool terminal_;
  FILE* metrics_ = nullptr;
  int64_t total_steps_;
  bool progress_open_ = false;
};

// This process's peak resident set size in MiB (getrusage).
double peak_rss_mib();

}  // namespace colrow
