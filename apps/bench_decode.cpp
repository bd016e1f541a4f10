// `colrow bench decode`: see bench_decode.h. Every timed region ends in a
// collective (the pick of the next tokens), so rank 0's clock times the
// whole tp group.
#include "bench_decode.h"

#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "colrow/core/allocator.h"
#include "colrow/core/error.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/infer/generator.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"
#include "colrow/runtime/threads.h"

namespace colrow::apps {
namespace {

// The read bandwidth of this node with every rank streaming through its own
// 256 MiB buffer at once (far beyond any cache), in bytes per second over
// all ranks: the rate the weights and the cache can reach the cores. The sum
// keeps 64 independent float accumulators (several vector registers) so that
// the adds never wait on each other: a single accumulator chain would make the
// probe add-latency bound, below the memory's rate. Blocks of ones sum exactly.
double measured_read_bandwidth(Communicator& world) {
  constexpr int64_t kLanes = 64, kBlock = 4096;
  const int64_t count = int64_t{64} << 20;  // floats, a multiple of kBlock
  std::vector<float> buffer(count, 1.0f);
  // The best of 20 passes (about 0.1 s): a shared machine's noise only slows a pass down.
  double best = 0.0;
  for (int repeat = 0; repeat < 20; ++repeat) {
    world.barrier();
    const auto t0 = BenchClock::now();
    double sum = 0.0;
    const float* p = buffer.data();
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t b = 0; b < count; b += kBlock) {
      float lanes[kLanes] = {};
      for (int64_t i = b; i < b + kBlock; i += kLanes) {
#pragma omp simd
        for (int64_t j = 0; j < kLanes; ++j) lanes[j] += p[i + j];
      }
      float block = 0.0f;
      for (float lane : lanes) block += lane;
      sum += block;
    }
    Tensor slowest = Tensor::full({1}, static_cast<float>(seconds_since(t0)));
    world.all_reduce_max(slowest);
    if (sum != static_cast<double>(count)) throw InternalError("[bench] bandwidth probe misread");
    best = std::max(best, world.size() * count * 4.0 / slowest.data()[0]);
  }
  return best;
}

}  // namespace

int run_decode_bench(const DecodeBenchOptions& o, const Launch& launch) {
  Communicator& world = launch.world;
  validate(o, world.size());
  const int tp_size = world.size();
  const ModelConfig config = resolve_model_config(o.model);
  const bool checkpoint = std::filesystem::is_directory(o.model);
  validate(config, tp_size);
  // Subtracted, not added: both are flags, and their sum could overflow.
  if (o.prompt_len > config.max_position_embeddings - o.new_tokens) {
    throw ConfigError("[bench] prompt_len (" + std::to_string(o.prompt_len) + ") + new_tokens (" +
                      std::to_string(o.new_tokens) + ") must fit max_position_embeddings (" +
                      std::to_string(config.max_position_embeddings) + ").");
  }
  const Placement placement = resolve_placement(o.device, launch.local_rank);
  set_threads(threads_per_rank(o.threads, launch.local_ranks));
  std::optional<MemoryPhase> phase(std::in_place, "communicators");
  ProcessMesh mesh(world, tp_size, /*pp=*/1, /*dp=*/1, placement.device, placement.comm);
  phase.emplace("model parameters");
  GptModel model(mesh.tp(), config, o.seed);
  if (checkpoint) load_checkpoint(model, o.model);
  model.to(placement.device);
  model.set_compute_dtype(placement.dtype);
  phase.emplace("decoding (KV cache and activations)");

  std::mt19937_64 gen(o.seed);
  std::vector<std::vector<int32_t>> prompts(o.batch, std::vector<int32_t>(o.prompt_len));
  for (auto& p : prompts) {
    for (int32_t& id : p) id = static_cast<int32_t>(gen() % config.vocab_size);
  }
  GenerationOptions greedy;
  greedy.sampling.temperature = 0.0f;
  std::vector<int64_t> slots(o.batch);
  for (int64_t b = 0; b < o.batch; ++b) slots[b] = b;
  const std::vector<uint64_t> steps(o.batch, 0);  // unused by greedy picks

  // One untimed round (page faults, BLAS buffers), then the timed one.
  double prefill_seconds = 0.0;
  std::vector<double> step_seconds;
  int64_t kv_bytes_per_position = 0;
  for (int round = 0; round < 2; ++round) {
    const int64_t new_tokens = round == 0 ? 4 : o.new_tokens;
    KvCache cache = model.make_kv_cache(o.batch, o.prompt_len + new_tokens);
    kv_bytes_per_position = cache.bytes_per_position();
    Tensor last =
        Tensor::empty({o.batch, model.vocab_size_local()}, model.device(), model.compute_dtype());
    world.barrier();
    auto t0 = BenchClock::now();
    for (int64_t b = 0; b < o.batch; ++b) {
      last.slice(0, b, 1).copy_from(model.forward_cached(prompts[b], {b}, o.prompt_len, cache));
    }
    std::vector<int32_t> next = pick_next_tokens(last, config.vocab_size, mesh.tp(), greedy, steps);
    prefill_seconds = seconds_since(t0);
    step_seconds.clear();
    for (int64_t s = 1; s < new_tokens; ++s) {
      t0 = BenchClock::now();
      const Tensor& logits = model.forward_cached(next, slots, 1, cache);
      next = pick_next_tokens(logits, config.vocab_size, mesh.tp(), greedy, steps);
      step_seconds.push_back(seconds_since(t0));
    }
  }
  const double bandwidth = measured_read_bandwidth(world);

  // Bytes one step reads over all ranks: every weight once, and each
  // sequence's cached keys and values (per rank: its KV heads, or replicas).
  // Summed over the ranks in one all-reduce: [parameters, KV bytes per position].
  Tensor totals = Tensor::from_vector({2}, {static_cast<float>(model.local_parameter_count()),
                                            static_cast<float>(kv_bytes_per_position)});
  world.all_reduce_sum(totals);
  // The weights decoding reads: the bf16 copies in mixed precision.
  const double weight_bytes = static_cast<double>(dtype_bytes(placement.dtype)) * totals.data()[0];
  const double kv_position_bytes = totals.data()[1];
  auto floor_ms = [&](double context) {
    return 1e3 * (weight_bytes + o.batch * context * kv_position_bytes) / bandwidth;
  };
  const size_t edge = std::max<size_t>(1, std::min<size_t>(16, step_seconds.size() / 4));
  const double ms_median = 1e3 * median(step_seconds);
  const double ms_start = 1e3 * median({step_seconds.begin(), step_seconds.begin() + edge});
  const double ms_end = 1e3 * median({step_seconds.end() - edge, step_seconds.end()});
  const double context_mid = o.prompt_len + o.new_tokens / 2.0;
  const double prefill_tokens_per_s = o.batch * o.prompt_len / prefill_seconds;
  if (world.rank() != 0) return 0;
  if (o.json) {
    const nlohmann::json j = {{"model", o.model},
                              {"tp", tp_size},
                              {"batch", o.batch},
                              {"prompt_len", o.prompt_len},
                              {"new_tokens", o.new_tokens},
                              {"device", placement.device.str()},
                              {"prefill_tokens_per_s", prefill_tokens_per_s},
                              {"decode_ms_per_step_median", ms_median},
                              {"decode_ms_per_step_start", ms_start},
                              {"decode_ms_per_step_end", ms_end},
                              {"end_over_start", ms_end / ms_start},
                              {"decode_tokens_per_s", o.batch * 1e3 / ms_median},
                              {"weight_bytes", weight_bytes},
                              {"kv_bytes_per_position", kv_position_bytes},
                              {"read_bandwidth_gb_s", bandwidth / 1e9},
                              {"floor_ms_per_step", floor_ms(context_mid)},
                              {"median_over_floor", ms_median / floor_ms(context_mid)}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  std::printf("colrow bench decode: %s, tp %d, batch %ld, prompt %ld + %ld new tokens (%s)\n",
              o.model.c_str(), tp_size, static_cast<long>(o.batch), static_cast<long>(o.prompt_len),
              static_cast<long>(o.new_tokens), placement.device.str().c_str());
  std::printf("  prefill     %.0f tokens/s\n", prefill_tokens_per_s);
  std::printf(
      "  decode      %.2f ms/step median (%.1f tokens/s); start %.2f, end %.2f ms (x%.2f)\n",
      ms_median, o.batch * 1e3 / ms_median, ms_start, ms_end, ms_end / ms_start);
  std::printf(
      "  floor       %.2f ms/step: %.0f MB weights + %.2f MB KV cache at context %.0f, "
      "read at %.1f GB/s (measured); median / floor = %.2f\n",
      floor_ms(context_mid), weight_bytes / 1e6, o.batch * context_mid * kv_position_bytes / 1e6,
      context_mid, bandwidth / 1e9, ms_median / floor_ms(context_mid));
  return 0;
}

}  // namespace colrow::apps
