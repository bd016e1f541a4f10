// Decoding with the KV cache at tp = world size, for gpt2 and llama with
// grouped, replicated and multi-query KV heads:
//  - the cached logits of every prefill and decoding step equal a full
//    recomputation of the whole sequence (GptModel::forward), batch 1 and 3,
//    prompts of different lengths;
//  - generate()'s tokens, greedy and sampled, equal an unsharded model's full
//    recomputation, and decoding prompts together equals decoding each alone;
//  - a sequence stops at the model's context with stop reason "length";
//  - pipeline stages (pp = world size, and tp 2 x pp 2) decode the same ids
//    as the whole model;
//  - the collectives are exactly the embedding's all-reduce, 2 per layer and
//    one pick per step: a [B, 2] gather when greedy, [B, V_pad/tp] sampling.
#include "colrow/infer/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/process_mesh.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/pipeline_stage.h"
#include "nn/model_test_cases.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::model_cases;
using testing::ModelCase;
using testing::random_ids;
using testing::valid_at;
using testing::world;

constexpr uint64_t kSeed = 7;

GenerationOptions options(float temperature, int64_t top_k, float top_p, int64_t n) {
  GenerationOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.seed = 123;
  return o;
}

// Prompts of the given lengths, ids below the test vocabulary (300).
std::vector<std::vector<int32_t>> prompts_of(const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < lengths.size(); ++i) out.push_back(random_ids(40 + i, lengths[i], 300));
  return out;
}

// Row r of [rows, V_pad/tp] logits with every vocabulary column, on every rank.
std::vector<float> gathered_row(const Tensor& logits_local, int64_t r, Communicator& tp) {
  const int64_t local = logits_local.size(1);
  Tensor row = Tensor::empty({1, local});
  row.copy_from(logits_local.slice(0, r, 1).to(DType::kF32));  // bf16 logits widened
  Tensor all = Tensor::empty({static_cast<int64_t>(tp.size()), local});
  tp.all_gather(row, all);
  return all.to_vector();
}

// The last row of the full sequence's logits, recomputed from scratch with
// the model's training forward.
std::vector<float> full_last_logits(GptModel& model, Communicator& tp,
                                    const std::vector<int32_t>& sequence) {
  const int64_t length = static_cast<int64_t>(sequence.size());
  model.forward(sequence, std::vector<int32_t>(length, -100), 1, length);
  return gathered_row(model.logits_local(), length - 1, tp);
}

// Both fp32, the same weights, the attention summed over the same keys in a
// different blocking: about sqrt(K) u (K <= 192) per operation over two
// layers, far below 1e-5 of the largest logit; a wrong position, a stale
// cache row or a missing head is an O(1) error.
void expect_logits_near(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& where) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 1e-3, err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double{want[i]}));
    err = std::max(err, std::fabs(double{got[i]} - want[i]));
  }
  EXPECT_LE(err, 1e-5 * scale) << where;
}

TEST(Generator, CachedLogitsEqualFullRecomputation) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    for (const std::vector<int64_t>& lengths :
         {std::vector<int64_t>{6}, std::vector<int64_t>{7, 3, 11}}) {
      SCOPED_TRACE(std::string(c.name) + ", batch " + std::to_string(lengths.size()));
      GptModel model(tp, c.config, kSeed);
      std::vector<std::vector<int32_t>> sequences = prompts_of(lengths);
      const int64_t batch = static_cast<int64_t>(sequences.size());
      KvCache cache = model.make_kv_cache(batch, c.config.max_position_embeddings);
      for (int64_t b = 0; b < batch; ++b) {
        const Tensor& prefill = model.forward_cached(sequences[b], {b}, lengths[b], cache);
        const std::vector<float> got = gathered_row(prefill, 0, tp);
        expect_logits_near(got, full_last_logits(model, tp, sequences[b]), "prefill");
        EXPECT_EQ(cache.length(b), lengths[b]);
      }
      std::vector<int64_t> slots(batch);
      for (int64_t b = 0; b < batch; ++b) slots[b] = b;
      for (int step = 0; step < 6; ++step) {
        const std::vector<int32_t> feed = random_ids(90 + step, batch, c.config.vocab_size);
        const Tensor& logits = model.forward_cached(feed, slots, 1, cache);
        std::vector<std::vector<float>> got;
        for (int64_t b = 0; b < batch; ++b) got.push_back(gathered_row(logits, b, tp));
        for (int64_t b = 0; b < batch; ++b) {
          sequences[b].push_back(feed[b]);
          expect_logits_near(got[b], full_last_logits(model, tp, sequences[b]),
                             "step " + std::to_string(step) + ", sequence " + std::to_string(b));
        }
      }
    }
  }
}

// In bf16 the cache holds bf16 keys and values (half the bytes per
// position), and the cached logits follow the bf16 training forward. The two
// round the same activations once each, but sum in other orders, so a value
// near a rounding boundary could flip by one bf16 ulp (2^-8 relative) and the
// later layers carry it; 1e-2 of the largest logit allows two such flips
// of an activation that size (measured: at most 6.4e-5 over every model case
// at tp 1, 2 and 4), and a stale cache row or a wrong head is an O(1) error.
TEST(Generator, Bf16CacheFollowsTheBf16Forward) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    SCOPED_TRACE(c.name);
    GptModel model(tp, c.config, kSeed);
    const int64_t fp32_bytes = model.make_kv_cache(2, 16).bytes_per_position();
    model.set_compute_dtype(DType::kBF16);
    std::vector<std::vector<int32_t>> sequences = prompts_of({7, 3});
    KvCache cache = model.make_kv_cache(2, c.config.max_position_embeddings);
    EXPECT_EQ(cache.keys(0).dtype(), DType::kBF16);
    EXPECT_EQ(cache.bytes_per_position() * 2, fp32_bytes);
    auto compare = [&](const std::vector<float>& got, const std::vector<float>& want) {
      double scale = 1e-3, err = 0.0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(double{want[i]}));
        err = std::max(err, std::fabs(double{got[i]} - want[i]));
      }
      EXPECT_LE(err, 1e-2 * scale);
    };
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t length = static_cast<int64_t>(sequences[b].size());
      const Tensor& prefill = model.forward_cached(sequences[b], {b}, length, cache);
      const std::vector<float> got = gathered_row(prefill, 0, tp);  // before forward reuses it
      compare(got, full_last_logits(model, tp, sequences[b]));
    }
    for (int step = 0; step < 3; ++step) {
      const std::vector<int32_t> feed = random_ids(70 + step, 2, c.config.vocab_size);
      const Tensor& logits = model.forward_cached(feed, {0, 1}, 1, cache);
      std::vector<std::vector<float>> got = {gathered_row(logits, 0, tp),
                                             gathered_row(logits, 1, tp)};
      for (int64_t b = 0; b < 2; ++b) {
        sequences[b].push_back(feed[b]);
        compare(got[b], full_last_logits(model, tp, sequences[b]));
      }
    }
  }
}

// generate()'s rule, by full recomputation on an unsharded model.
Generation reference_generation(GptModel& unsharded, const std::vector<int32_t>& prompt,
                                const GenerationOptions& o) {
  LocalCommunicator alone;
  const ModelConfig& config = unsharded.config();
  Generation g;
  std::vector<int32_t> sequence = prompt;
  while (static_cast<int64_t>(g.tokens.size()) < o.max_new_tokens) {
    const std::vector<float> row = full_last_logits(unsharded, alone, sequence);
    const int32_t next =
        sample_token(row.data(), config.vocab_size, o.sampling, o.seed, g.tokens.size());
    g.tokens.push_back(next);
    sequence.push_back(next);
    for (int32_t stop : o.stop_tokens) {
      if (next == stop) g.stop = StopReason::kStopToken;
    }
    if (g.stop == StopReason::kStopToken) break;
    if (static_cast<int64_t>(g.tokens.size()) == o.max_new_tokens) break;
    if (static_cast<int64_t>(sequence.size()) == config.max_position_embeddings) {
      g.stop = StopReason::kLength;
      break;
    }
  }
  return g;
}

void expect_generations_match(const GenerationOptions& o, const std::vector<int64_t>& lengths) {
  Communicator& tp = world();
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, tp.size())) continue;
    SCOPED_TRACE(c.name);
    const std::vector<std::vector<int32_t>> prompts = prompts_of(lengths);
    LocalCommunicator alone;
    GptModel unsharded(alone, c.config, kSeed);
    GptModel model(tp, c.config, kSeed);
    const std::vector<Generation> together = generate(model, tp, prompts, o);
    ASSERT_EQ(together.size(), prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) {
      const Generation want = reference_generation(unsharded, prompts[b], o);
      // The logits differ from the reference by fp32 rounding (~1e-6
      // relative); with these seeds no argmax or draw sits that close to a
      // boundary, so the ids agree exactly.
      EXPECT_EQ(together[b].tokens, want.tokens) << "sequence " << b;
      EXPECT_EQ(together[b].stop, want.stop) << "sequence " << b;
      const Generation alone_b = generate(model, tp, prompts[b], o);
      EXPECT_EQ(alone_b.tokens, together[b].tokens) << "batched != one by one, sequence " << b;
      for (int32_t id : together[b].tokens) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, c.config.vocab_size);  // never a padded column
      }
    }
  }
}

TEST(Generator, GreedyEqualsFullRecomputation) {
  expect_generations_match(options(0.0f, 0, 1.0f, 8), {5, 9, 2});
}

TEST(Generator, SampledEqualsFullRecomputation) {
  expect_generations_match(options(0.9f, 40, 0.95f, 8), {5, 9, 2});
}

TEST(Generator, StopsAtTheContextWithReasonLength) {
  // Context 32: the 28-token prompt has room for 4 new tokens, the 5-token
  // prompt for all 10.
  expect_generations_match(options(0.7f, 0, 1.0f, 10), {28, 5});
  GptModel model(world(), model_cases().front().config, kSeed);
  const std::vector<Generation> g =
      generate(model, world(), prompts_of({28, 5}), options(0.0f, 0, 1.0f, 10));
  EXPECT_EQ(g[0].tokens.size(), 4u);
  EXPECT_EQ(to_string(g[0].stop), "length");
  EXPECT_EQ(g[1].tokens.size(), 10u);
  EXPECT_EQ(to_string(g[1].stop), "max_new_tokens");
}

// A stop token (EOS) ends its sequence where it appears, kept as the last
// token; the other sequences of the batch go on. The stop id is the one greedy
// decoding of the first prompt emits third, so that sequence stops early.
TEST(Generator, StopsAtAStopTokenWithReasonStop) {
  GenerationOptions o = options(0.0f, 0, 1.0f, 8);
  GptModel model(world(), model_cases().front().config, kSeed);
  const std::vector<std::vector<int32_t>> prompts = prompts_of({5, 9, 2});
  const std::vector<Generation> free_run = generate(model, world(), prompts, o);
  o.stop_tokens = {free_run[0].tokens[2]};
  expect_generations_match(o, {5, 9, 2});
  const std::vector<Generation> g = generate(model, world(), prompts, o);
  const auto first =
      std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), o.stop_tokens[0]);
  const size_t stop_at = static_cast<size_t>(first - free_run[0].tokens.begin()) + 1;
  ASSERT_LE(stop_at, 3u);
  EXPECT_EQ(g[0].tokens,
            std::vector<int32_t>(free_run[0].tokens.begin(), free_run[0].tokens.begin() + stop_at));
  EXPECT_EQ(to_string(g[0].stop), "stop");
  for (size_t b = 1; b < prompts.size(); ++b) {
    const bool emits = std::find(free_run[b].tokens.begin(), free_run[b].tokens.end(),
                                 o.stop_tokens[0]) != free_run[b].tokens.end();
    if (!emits) {
      EXPECT_EQ(g[b].tokens, free_run[b].tokens) << "sequence " << b;
    }
  }
  // A stop id outside the vocabulary is a ConfigError on every rank.
  o.stop_tokens = {static_cast<int32_t>(model.config().vocab_size)};
  EXPECT_THROW(generate(model, world(), prompts, o), ConfigError);
}

// Prefill of each prompt, then per step: embedding + 2 per layer + the pick.
std::vector<CollectiveEvent> expected_collectives(const ModelConfig& c,
                                                  const std::vector<int64_t>& lengths,
                                                  int64_t new_tokens, int64_t pick_count_per_row) {
  std::vector<CollectiveEvent> events;
  auto forward = [&](int64_t tokens) {
    for (int k = 0; k < 1 + 2 * c.n_layer; ++k) {
      events.push_back({"all_reduce_sum", tokens * c.d_model, 0.0});
    }
  };
  const int64_t batch = static_cast<int64_t>(lengths.size());
  for (int64_t length : lengths) forward(length);
  for (int64_t step = 0; step < new_tokens; ++step) {
    events.push_back({"all_gather", batch * pick_count_per_row, 0.0});
    if (step + 1 < new_tokens) forward(batch);
  }
  return events;
}

TEST(Generator, EachDecodingStepIsTwoAllReducesPerLayerAndOnePick) {
  for (const ModelCase& c : model_cases()) {
    if (!valid_at(c.config, world().size())) continue;
    SCOPED_TRACE(c.name);
    RecordingCommunicator tp(world());
    GptModel model(tp, c.config, kSeed);
    const int64_t vocab_local = model.padded_vocab_size() / world().size();
    const std::vector<int64_t> lengths = {4, 7};
    tp.clear();
    generate(model, tp, prompts_of(lengths), options(0.0f, 0, 1.0f, 5));
    EXPECT_EQ(tp.events(), expected_collectives(c.config, lengths, 5, 2)) << "greedy";
    tp.clear();
    generate(model, tp, prompts_of(lengths), options(1.0f, 0, 1.0f, 5));
    EXPECT_EQ(tp.events(), expected_collectives(c.config, lengths, 5, vocab_local)) << "sampled";
  }
}

// Pipeline stages decode what the whole model decodes: the same ops on the
// same rows in the same order (the stages only split the layers), so the ids
// agree exactly, greedy and sampled, with a stop token that ends one sequence
// early (the stages then feed fewer rows alike). pp = world size at tp 1, and
// tp 2 x pp 2 at 4 ranks; 4 layers, so every split has a middle stage at pp 4.
TEST(Generator, PipelineStagesDecodeWhatTheWholeModelDecodes) {
  if (world().size() < 2) GTEST_SKIP() << "pipeline stages need 2 or more ranks";
  for (int tp : {1, 2}) {
    const int pp = world().size() / tp;
    if (world().size() % tp != 0 || pp < 2) continue;
    ProcessMesh mesh(world(), tp, pp, /*dp=*/1);
    for (const ModelCase& c : model_cases()) {
      if (!valid_at(c.config, tp)) continue;
      SCOPED_TRACE(std::string(c.name) + " at tp " + std::to_string(tp) + " x pp " +
                   std::to_string(pp));
      ModelConfig config = c.config;
      config.n_layer = 4;
      GptModel whole(mesh.tp(), config, kSeed);
      GptModel stage(mesh.tp(), config, pipeline_stage(config.n_layer, pp, mesh.pp_rank()), kSeed,
                     /*sequence_parallel=*/false);
      const std::vector<std::vector<int32_t>> prompts = prompts_of({5, 9, 2});
      GenerationOptions greedy = options(0.0f, 0, 1.0f, 6);
      const std::vector<Generation> free_run = generate(whole, mesh.tp(), prompts, greedy);
      greedy.stop_tokens = {free_run[0].tokens[2]};
      for (const GenerationOptions& o :
           {options(0.0f, 0, 1.0f, 6), greedy, options(0.9f, 40, 0.95f, 6)}) {
        const std::vector<Generation> want = generate(whole, mesh.tp(), prompts, o);
        const std::vector<Generation> got = generate(stage, mesh.tp(), mesh.pp(), prompts, o);
        ASSERT_EQ(got.size(), want.size());
        for (size_t b = 0; b < want.size(); ++b) {
          EXPECT_EQ(got[b].tokens, want[b].tokens) << "sequence " << b;
          EXPECT_EQ(got[b].stop, want[b].stop) << "sequence " << b;
        }
      }
      EXPECT_EQ(to_string(generate(stage, mesh.tp(), mesh.pp(), prompts, greedy)[0].stop), "stop");
    }
  }
}

// A pick that fails on the last stage (NaN logits, greedy) fails on every
// stage, each with an error, not with the others left waiting for the ids.
TEST(Generator, PipelineStagesFailTogetherWhenTheLastStageCannotPick) {
  if (world().size() < 2) GTEST_SKIP() << "pipeline stages need 2 or more ranks";
  const int pp = world().size();
  ProcessMesh mesh(world(), /*tp=*/1, pp, /*dp=*/1);
  ModelConfig config = model_cases().front().config;
  config.n_layer = 4;
  GptModel stage(mesh.tp(), config, pipeline_stage(config.n_layer, pp, mesh.pp_rank()), kSeed,
                 /*sequence_parallel=*/false);
  if (stage.stage().is_last()) stage.parameters().front()->value.fill(NAN);
  try {
    generate(stage, mesh.tp(), mesh.pp(), prompts_of({5}), options(0.0f, 0, 1.0f, 4));
    ADD_FAILURE() << "no error on stage " << mesh.pp_rank();
  } catch (const InvalidInputError& e) {
    const std::string want = stage.stage().is_last() ? "hold NaN" : "the last pipeline stage";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

template <typename Error>
void expect_error(const GenerationOptions& o, const std::vector<int32_t>& prompt,
                  const std::string& message) {
  GptModel model(world(), model_cases().front().config, kSeed);
  try {
    generate(model, world(), prompt, o);
    ADD_FAILURE() << "no error for " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
  }
}

TEST(Generator, BadInputsFailOnEveryRank) {
  const std::vector<int32_t> prompt = {5, 17, 250, 3, 99};
  expect_error<ConfigError>(options(1.0f, 0, 0.0f, 4), prompt, "[sampling] top_p (0) must be");
  expect_error<ConfigError>(options(-1.0f, 0, 1.0f, 4), prompt, "[sampling] temperature (-1)");
  expect_error<ConfigError>(options(1.0f, -2, 1.0f, 4), prompt, "[sampling] top_k (-2)");
  expect_error<ConfigError>(options(1.0f, 0, 1.0f, -1), prompt,
                            "[generate] max_new_tokens (-1) must be >= 0");
  expect_error<InvalidInputError>(options(1.0f, 0, 1.0f, 4), {}, "[generate] prompt (0 tokens)");
  expect_error<InvalidInputError>(options(1.0f, 0, 1.0f, 4), {1, 300},
                                  "[generate] prompt token id (300) at position 1");
  expect_error<InvalidInputError>(options(1.0f, 0, 1.0f, 4), std::vector<int32_t>(33, 1),
                                  "[generate] prompt (33 tokens) must fit the model's context");
}

TEST(Generator, CachedForwardRefusesWhatTheCacheCannotHold) {
  const ModelConfig config = model_cases().front().config;  // 32 positions
  GptModel model(world(), config, kSeed);
  EXPECT_THROW(model.make_kv_cache(1, 33), InvalidInputError);  // past max_position_embeddings
  EXPECT_THROW(model.make_kv_cache(0, 8), InvalidInputError);
  KvCache cache = model.make_kv_cache(2, 8);
  EXPECT_THROW(model.forward_cached({1, 2, 3, 4}, {0, 1}, 2, cache), InvalidInputError)
      << "two sequences of two new tokens: neither a prefill nor a decoding step";
  EXPECT_THROW(model.forward_cached(std::vector<int32_t>(9, 1), {0}, 9, cache), InvalidInputError)
      << "9 tokens in an 8-position slot";
  EXPECT_THROW(model.forward_cached({1}, {2}, 1, cache), InvalidInputError) << "slot 2 of 2";
  EXPECT_EQ(cache.length(0), 0);  // nothing was written
  model.forward_cached(std::vector<int32_t>(8, 1), {0}, 8, cache);
  EXPECT_THROW(model.forward_cached({1}, {0}, 1, cache), InvalidInputError) << "slot 0 is full";
}

TEST(Generator, NaNLogitsOnOneRankFailOnEveryRank) {
  Communicator& tp = world();
  Tensor logits = Tensor::zeros({2, 8});
  if (tp.rank() == 0) logits.data()[8 + 3] = NAN;  // sequence 1, rank 0's shard only
  try {
    pick_next_tokens(logits, 8 * tp.size(), tp, options(0.0f, 0, 1.0f, 1), {0, 0});
    ADD_FAILURE() << "NaN logits picked a token";
  } catch (const InvalidInputError& e) {
    EXPECT_NE(std::string(e.what()).find("the logits of sequence 1 hold NaN"), std::string::npos)
        << e.what();
  }
}

TEST(Generator, AllIgnoredTargetsGiveNaNMeanWithoutError) {
  GptModel model(world(), model_cases().front().config, kSeed);
  const CrossEntropyOutput out = model.forward({1, 2, 3}, {-100, -100, -100}, 1, 3);
  EXPECT_EQ(out.counted, 0);
  EXPECT_TRUE(std::isnan(out.mean()));
}

}  // namespace
}  // namespace colrow
