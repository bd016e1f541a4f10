// one_f_one_b against hand-written sequences, its invariants over many shapes,
// and a run of all stages together with blocking receives and non-blocking
// sends that must reach the end (no deadlock). Also the bubble formula and the
// argument checks.
#include "colrow/train/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

using Schedule = std::vector<PipelineAction>;

std::string schedule(int stages, int stage, int micro_batches) {
  return to_string(one_f_one_b(stages, stage, micro_batches));
}

// The micro-batches of every `op` in `actions`, in order.
std::vector<int> micro_batches_of(const Schedule& actions, PipelineOp op) {
  std::vector<int> out;
  for (const PipelineAction& a : actions) {
    if (a.op == op) out.push_back(a.micro_batch);
  }
  return out;
}

std::vector<int> iota(int n) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

// Runs every stage's list together: compute and sends never block, a receive
// completes only once the peer has executed the matching send (channels are
// FIFO per direction and neighbour pair). Returns "" when every list reaches
// its end, else a description of where each stage is stuck.
std::string run_together(const std::vector<Schedule>& lists) {
  const int stages = static_cast<int>(lists.size());
  std::vector<size_t> cursor(lists.size(), 0);
  std::vector<std::vector<int>> sent_forward(lists.size());   // by stage s to s + 1
  std::vector<std::vector<int>> sent_backward(lists.size());  // by stage s to s - 1
  std::vector<size_t> received_forward(lists.size(), 0);
  std::vector<size_t> received_backward(lists.size(), 0);

  // Executes the action at stage s's cursor if it can; false if it blocks.
  auto step = [&](int s) {
    const size_t u = static_cast<size_t>(s);
    const PipelineAction& a = lists[u][cursor[u]];
    switch (a.op) {
      case PipelineOp::kRecvForward: {
        if (s == 0) return false;  // no sender: blocks forever
        const std::vector<int>& channel = sent_forward[u - 1];
        if (received_forward[u] >= channel.size()) return false;
        EXPECT_EQ(channel[received_forward[u]], a.micro_batch) << "stage " << s << " RF";
        ++received_forward[u];
        break;
      }
      case PipelineOp::kRecvBackward: {
        if (s == stages - 1) return false;
        const std::vector<int>& channel = sent_backward[u + 1];
        if (received_backward[u] >= channel.size()) return false;
        EXPECT_EQ(channel[received_backward[u]], a.micro_batch) << "stage " << s << " RB";
        ++received_backward[u];
        break;
      }
      case PipelineOp::kSendForward:
        sent_forward[u].push_back(a.micro_batch);
        break;
      case PipelineOp::kSendBackward:
        sent_backward[u].push_back(a.micro_batch);
        break;
      case PipelineOp::kForward:
      case PipelineOp::kBackward:
        break;
    }
    ++cursor[u];
    return true;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      const size_t u = static_cast<size_t>(s);
      while (cursor[u] < lists[u].size() && step(s)) progress = true;
    }
  }
  std::string stuck;
  for (int s = 0; s < stages; ++s) {
    const size_t u = static_cast<size_t>(s);
    if (cursor[u] < lists[u].size()) {
      stuck += "stage " + std::to_string(s) + " blocks at " +
               to_string(Schedule{lists[u][cursor[u]]}) + "; ";
    }
  }
  return stuck;
}

TEST(PipelineSchedule, TwoStagesFourMicroBatches) {
  EXPECT_EQ(schedule(2, 0, 4), "F0 SF0 F1 SF1 RB0 B0 F2 SF2 RB1 B1 F3 SF3 RB2 B2 RB3 B3");
  EXPECT_EQ(schedule(2, 1, 4), "RF0 F0 B0 SB0 RF1 F1 B1 SB1 RF2 F2 B2 SB2 RF3 F3 B3 SB3");
}

TEST(PipelineSchedule, FourStagesFourMicroBatches) {
  EXPECT_EQ(schedule(4, 0, 4), "F0 SF0 F1 SF1 F2 SF2 F3 SF3 RB0 B0 RB1 B1 RB2 B2 RB3 B3");
  EXPECT_EQ(schedule(4, 1, 4),
            "RF0 F0 SF0 RF1 F1 SF1 RF2 F2 SF2 RB0 B0 SB0 RF3 F3 SF3 RB1 B1 SB1 "
            "RB2 B2 SB2 RB3 B3 SB3");
  EXPECT_EQ(schedule(4, 2, 4),
            "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RF2 F2 SF2 RB1 B1 SB1 RF3 F3 SF3 "
            "RB2 B2 SB2 RB3 B3 SB3");
  EXPECT_EQ(schedule(4, 3, 4), "RF0 F0 B0 SB0 RF1 F1 B1 SB1 RF2 F2 B2 SB2 RF3 F3 B3 SB3");
}

TEST(PipelineSchedule, FewerMicroBatchesThanStagesIsAllowed) {
  EXPECT_EQ(schedule(4, 0, 2), "F0 SF0 F1 SF1 RB0 B0 RB1 B1");
  EXPECT_EQ(schedule(4, 1, 2), "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RB1 B1 SB1");
  EXPECT_EQ(schedule(4, 2, 2), "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RB1 B1 SB1");
  EXPECT_EQ(schedule(4, 3, 2), "RF0 F0 B0 SB0 RF1 F1 B1 SB1");
}

TEST(PipelineSchedule, OneStageAlternatesWithoutCommunication) {
  EXPECT_EQ(schedule(1, 0, 1), "F0 B0");
  EXPECT_EQ(schedule(1, 0, 4), "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST(PipelineSchedule, InvariantsAndNoDeadlockOverManyShapes) {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int m = 1; m <= 16; ++m) {
      std::vector<Schedule> lists;
      for (int s = 0; s < stages; ++s) lists.push_back(one_f_one_b(stages, s, m));
      for (int s = 0; s < stages; ++s) {
        SCOPED_TRACE("stages " + std::to_string(stages) + " stage " + std::to_string(s) +
                     " micro_batches " + std::to_string(m) + ": " +
                     to_string(lists[static_cast<size_t>(s)]));
        const Schedule& a = lists[static_cast<size_t>(s)];
        // One forward and one backward per micro-batch, each kind in increasing
        // order, and (from that) forward j before backward j.
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kForward), iota(m));
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kBackward), iota(m));
        for (int j = 0; j < m; ++j) {
          auto at = [&](PipelineOp op) {
            return std::find_if(a.begin(), a.end(), [&](const PipelineAction& x) {
              return x.op == op && x.micro_batch == j;
            });
          };
          EXPECT_LT(at(PipelineOp::kForward), at(PipelineOp::kBackward)) << "micro-batch " << j;
        }
        // Each receive sits right before its compute, each send right after.
        for (size_t k = 0; k < a.size(); ++k) {
          const PipelineOp op = a[k].op;
          if (op == PipelineOp::kRecvForward || op == PipelineOp::kRecvBackward) {
            ASSERT_LT(k + 1, a.size());
            EXPECT_EQ(a[k + 1].op, op == PipelineOp::kRecvForward ? PipelineOp::kForward
                                                                  : PipelineOp::kBackward);
            EXPECT_EQ(a[k + 1].micro_batch, a[k].micro_batch);
          }
          if (op == PipelineOp::kSendForward || op == PipelineOp::kSendBackward) {
            ASSERT_GT(k, 0u);
            EXPECT_EQ(a[k - 1].op, op == PipelineOp::kSendForward ? PipelineOp::kForward
                                                                  : PipelineOp::kBackward);
            EXPECT_EQ(a[k - 1].micro_batch, a[k].micro_batch);
          }
        }
        // Ends of the pipeline have no peer on the missing side.
        const bool first = s == 0;
        const bool last = s == stages - 1;
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kRecvForward),
                  first ? std::vector<int>{} : iota(m));
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kSendBackward),
                  first ? std::vector<int>{} : iota(m));
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kSendForward),
                  last ? std::vector<int>{} : iota(m));
        EXPECT_EQ(micro_batches_of(a, PipelineOp::kRecvBackward),
                  last ? std::vector<int>{} : iota(m));
        // Sends of s meet receives of its neighbour in the same order.
        if (!last) {
          const Schedule& next = lists[static_cast<size_t>(s + 1)];
          EXPECT_EQ(micro_batches_of(a, PipelineOp::kSendForward),
                    micro_batches_of(next, PipelineOp::kRecvForward));
          EXPECT_EQ(micro_batches_of(next, PipelineOp::kSendBackward),
                    micro_batches_of(a, PipelineOp::kRecvBackward));
        }
        EXPECT_EQ(max_in_flight(a), std::min(stages - s, m));
      }
      EXPECT_EQ(run_together(lists), "") << "stages " << stages << " micro_batches " << m;
    }
  }
}

// The simulation is not vacuous: a stage that waits for a gradient before
// sending the activation that gradient depends on deadlocks.
TEST(PipelineSchedule, SimulationDetectsDeadlock) {
  const std::vector<Schedule> lists = {
      {{PipelineOp::kForward, 0},
       {PipelineOp::kRecvBackward, 0},
       {PipelineOp::kBackward, 0},
       {PipelineOp::kSendForward, 0}},
      one_f_one_b(2, 1, 1),
  };
  EXPECT_EQ(run_together(lists), "stage 0 blocks at RB0; stage 1 blocks at RF0; ");
}

TEST(PipelineSchedule, MaxInFlightCountsHeldActivations) {
  EXPECT_EQ(max_in_flight({}), 0);
  // All forwards first (GPipe order) holds every micro-batch.
  const Schedule gpipe = {{PipelineOp::kForward, 0},  {PipelineOp::kForward, 1},
                          {PipelineOp::kForward, 2},  {PipelineOp::kBackward, 0},
                          {PipelineOp::kBackward, 1}, {PipelineOp::kBackward, 2}};
  EXPECT_EQ(max_in_flight(gpipe), 3);
  EXPECT_EQ(max_in_flight(one_f_one_b(4, 0, 16)), 4);
  EXPECT_EQ(max_in_flight(one_f_one_b(4, 3, 16)), 1);
}

TEST(PipelineSchedule, BubbleShareMatchesHandValues) {
  EXPECT_DOUBLE_EQ(pipeline_bubble_share(2, 4), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_share(4, 4), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_share(4, 1), 3.0 / 4.0);
  for (int m = 1; m <= 8; ++m) EXPECT_EQ(pipeline_bubble_share(1, m), 0.0);
}

TEST(PipelineSchedule, BadArgumentsThrow) {
  auto message = [](auto call) {
    try {
      call();
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { one_f_one_b(0, 0, 1); }).find("stages (0)"), std::string::npos);
  EXPECT_NE(message([] { one_f_one_b(2, -1, 1); }).find("stage (-1)"), std::string::npos);
  EXPECT_NE(message([] { one_f_one_b(2, 2, 1); }).find("stage (2) must lie in [0, stages (2))"),
            std::string::npos);
  EXPECT_NE(message([] { one_f_one_b(2, 0, 0); }).find("micro_batches (0)"), std::string::npos);
  EXPECT_NE(message([] { pipeline_bubble_share(0, 4); }).find("stages (0)"), std::string::npos);
  EXPECT_NE(message([] { pipeline_bubble_share(2, 0); }).find("micro_batches (0)"),
            std::string::npos);
}

}  // namespace
}  // namespace colrow
