// TrainingLog: the metrics file holds one JSON object per step (val_loss only
// where measured), appends across runs (a resumed run continues the file),
// only rank 0 writes, and an unwritable path is one clear error.
#include "colrow/train/training_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TrainingLogTest, MetricsFileHasOneObjectPerStep) {
  const std::string path = "/tmp/colrow_training_log_test_" + std::to_string(getpid()) + ".jsonl";
  {
    TrainingLog log(true, path, 3);
    StepMetrics m;
    m.step = 1;
    m.loss = 5.5;
    m.lr = 1e-3;
    m.peak_rss_mib_per_rank = {10.0, 12.5};
    m.peak_device_mib = 2048.0;
    log.step(m, 1.0);
    m.peak_device_mib = -1.0;
    m.step = 2;
    m.loss = 5.0;
    m.val_loss = 5.25;
    log.step(m, 2.0);
  }
  {
    TrainingLog resumed(true, path, 3);
    StepMetrics m;
    m.step = 3;
    m.loss = 4.5;
    resumed.step(m, 3.0);
  }
  const std::vector<nlohmann::json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 5.5);
  EXPECT_FALSE(lines[0].contains("val_loss"));
  EXPECT_EQ(lines[0]["peak_rss_mib_per_rank"], (std::vector<double>{10.0, 12.5}));
  EXPECT_DOUBLE_EQ(lines[0]["peak_device_mib"].get<double>(), 2048.0);
  EXPECT_FALSE(lines[1].contains("peak_device_mib"));  // a CPU run has no device peak
  EXPECT_DOUBLE_EQ(lines[1]["val_loss"].get<double>(), 5.25);
  EXPECT_EQ(lines[2]["step"], 3);
  for (const auto& l : lines) {
    for (const char* key : {"lr", "grad_norm", "tokens_per_s", "gflops_per_s", "peak_rss_mib"}) {
      EXPECT_TRUE(l.contains(key)) << key;
    }
  }
  std::remove(path.c_str());
}

TEST(TrainingLogTest, OnlyRankZeroWrites) {
  const std::string path = "/tmp/colrow_training_log_test_other_" + std::to_string(getpid());
  {
    TrainingLog log(false, path, 1);
    log.step(StepMetrics{}, 0.0);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(TrainingLogTest, UnwritableMetricsPathIsAnError) {
  EXPECT_THROW(TrainingLog(true, "/nonexistent/dir/metrics.jsonl", 1), InvalidInputError);
  EXPECT_GT(peak_rss_mib(), 1.0);
}

}  // namespace
}  // namespace colrow
