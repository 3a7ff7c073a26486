// measure_speedup / SpeedupRow / print_speedup_table (speedup.hpp): run order and cache resets
// as recorded by the models themselves, greedy identity (including a decoder that breaks it),
// pooled statistics against DecodeStats summed by hand, the summary statistics on known inputs,
// and input validation.
#include "specdec/speedup.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::SpeedupRow;
using specdec::token_t;

// The scripted pair (V = 5) with every model call recorded in one shared log: 'd' for a draft
// call, 't' for a target call, 'r' for a cache reset. A run is speculative iff it calls the draft.
struct RecordedPair {
  specdec::testing::ScriptedPair pair;
  std::string log;

  struct Draft {
    RecordedPair* owner;
    std::vector<float> operator()(std::span<const token_t> context) {
      owner->log += 'd';
      return owner->pair.draft<float>()(context);
    }
  };
  struct Target {
    RecordedPair* owner;
    std::vector<float> operator()(std::span<const token_t> context, std::size_t n) {
      owner->log += 't';
      return owner->pair.target<float>()(context, n);
    }
  };
};

// The runs in the log, in order: 'S' (called the draft) or 'P' (target only), each preceded by
// its reset; 'x' marks a run without a reset before it, or a reset without a run after it.
std::string runs_of(const std::string& log) {
  std::string runs;
  bool reset = false;
  bool in_run = false;
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i] == 'r') {
      if (reset) runs += 'x';  // two resets in a row: a reset with no run
      reset = true;
      in_run = false;
      continue;
    }
    if (!in_run) {
      if (!reset) runs += 'x';
      const std::size_t end = log.find('r', i);
      runs += log.substr(i, end - i).find('d') != std::string::npos ? 'S' : 'P';
      in_run = true;
      reset = false;
    }
  }
  if (reset) runs += 'x';
  return runs;
}

std::vector<std::vector<token_t>> prompts_for_test(std::size_t count) {
  std::vector<std::vector<token_t>> prompts;
  for (std::size_t i = 0; i < count; ++i) {
    prompts.push_back({static_cast<token_t>(i % 5), static_cast<token_t>((i * 3 + 1) % 5)});
  }
  return prompts;
}

GenerationConfig config_for_test(float temperature) {
  GenerationConfig config;
  config.max_new_tokens = 24;
  config.seed = 7;
  config.sampling.temperature = temperature;
  return config;
}

TEST(SpeedupTest, AlternatesTheOrderPerPromptAndResetsBeforeEveryRun) {
  RecordedPair models;
  RecordedPair::Draft draft{&models};
  RecordedPair::Target target{&models};
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const auto prompts = prompts_for_test(3);
  const std::vector<std::size_t> draft_lengths{1, 3};

  const auto table = specdec::measure_speedup(speculative, plain, prompts, config_for_test(0.0f),
                                              draft_lengths, [&] { models.log += 'r'; });

  // Prompt 0 (even): speculative first; prompt 1 (odd): plain first; prompt 2: speculative.
  EXPECT_EQ(runs_of(models.log),
            "SPSP"
            "PSPS"
            "SPSP");
  EXPECT_EQ(table.prompts, 3u);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0].setting.name, "K=1");
  EXPECT_EQ(table.rows[1].draft_length(), 3u);
  EXPECT_EQ(table.rows[0].pairs(), 3u);
}

// Records the draft length of every generate() call, then forwards it.
template <class Decoder>
struct DraftLengthLog {
  Decoder* decoder;
  std::vector<std::size_t>* lengths;
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config) {
    lengths->push_back(config.draft_length);
    return decoder->generate(prompt, config);
  }
};

TEST(SpeedupTest, SharedBaselineRunsPlainOncePerPromptOnAlternatingSidesAndRotatesTheSettings) {
  RecordedPair models;
  RecordedPair::Draft draft{&models};
  RecordedPair::Target target{&models};
  specdec::SpeculativeDecoder speculative_decoder(draft, target);
  std::vector<std::size_t> lengths;
  DraftLengthLog<decltype(speculative_decoder)> speculative{&speculative_decoder, &lengths};
  specdec::AutoregressiveDecoder plain(target);
  const auto prompts = prompts_for_test(3);
  const std::vector<std::size_t> draft_lengths{1, 2, 4};
  specdec::SpeedupOptions options;
  options.shared_baseline = true;
  std::vector<std::size_t> progress;
  options.on_prompt = [&](std::size_t i, std::size_t count) {
    EXPECT_EQ(count, 3u);
    progress.push_back(i);
  };

  const auto table = specdec::measure_speedup(
      speculative, plain, prompts, config_for_test(0.0f), draft_lengths, [&] { models.log += 'r'; },
      options);

  EXPECT_EQ(runs_of(models.log),
            "SSSP"
            "PSSS"
            "SSSP");
  // Prompt i starts with setting i mod 3: none always runs first or last.
  EXPECT_EQ(lengths, (std::vector<std::size_t>{1, 2, 4, 2, 4, 1, 4, 1, 2}));
  EXPECT_EQ(progress, (std::vector<std::size_t>{0, 1, 2}));
  for (const SpeedupRow& row : table.rows) {
    EXPECT_EQ(row.pairs(), 3u);
    EXPECT_EQ(row.greedy_mismatches, 0u);
  }
  // The one plain run per prompt is pooled into every row.
  EXPECT_EQ(table.rows[0].plain.emitted, table.rows[2].plain.emitted);
  EXPECT_EQ(table.rows[0].plain.target_calls, table.rows[2].plain.target_calls);
}

// A "speculative" decoder whose output differs from plain decoding: the last token is changed.
template <class Decoder>
struct TamperingDecoder {
  Decoder* decoder;
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config) {
    GenerationResult result = decoder->generate(prompt, config);
    if (!result.tokens.empty()) result.tokens.back() = (result.tokens.back() + 1) % 5;
    return result;
  }
};

TEST(SpeedupTest, GreedyIdentityHoldsForTheRealDecoderAndFailsForATamperedOne) {
  specdec::testing::ScriptedPair pair;
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  TamperingDecoder<decltype(speculative)> tampered{&speculative};
  const auto prompts = prompts_for_test(4);
  const std::vector<std::size_t> draft_lengths{1, 2, 5};
  const auto no_caches = [] {};

  const auto good = specdec::measure_speedup(speculative, plain, prompts, config_for_test(0.0f),
                                             draft_lengths, no_caches);
  EXPECT_EQ(good.greedy_mismatches(), 0u);
  for (const SpeedupRow& row : good.rows) EXPECT_TRUE(row.greedy());

  const auto bad = specdec::measure_speedup(tampered, plain, prompts, config_for_test(0.0f),
                                            draft_lengths, no_caches);
  for (const SpeedupRow& row : bad.rows) EXPECT_EQ(row.greedy_mismatches, 4u);
  EXPECT_EQ(bad.greedy_mismatches(), 12u);

  // Sampled settings are not expected to match, so nothing is counted there.
  const auto sampled = specdec::measure_speedup(tampered, plain, prompts, config_for_test(1.0f),
                                                draft_lengths, no_caches);
  EXPECT_EQ(sampled.greedy_mismatches(), 0u);
  EXPECT_FALSE(sampled.rows[0].greedy());
}

TEST(SpeedupTest, PooledStatisticsEqualDecodeStatsSummedByHand) {
  specdec::testing::ScriptedPair pair;
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const auto prompts = prompts_for_test(5);
  const GenerationConfig config = config_for_test(1.0f);  // sampled: rejections happen
  const std::vector<std::size_t> draft_lengths{2, 4};

  const auto table =
      specdec::measure_speedup(speculative, plain, prompts, config, draft_lengths, [] {});

  for (std::size_t s = 0; s < draft_lengths.size(); ++s) {
    GenerationConfig by_hand_config = config;
    by_hand_config.draft_length = draft_lengths[s];
    specdec::DecodeStats speculative_sum, plain_sum;
    for (const auto& prompt : prompts) {
      speculative_sum += speculative.generate(prompt, by_hand_config).stats;
      plain_sum += plain.generate(prompt, by_hand_config).stats;
    }
    const SpeedupRow& row = table.rows[s];
    EXPECT_GT(row.speculative.rejecting_rounds, 0u);
    EXPECT_EQ(row.speculative.accepted, speculative_sum.accepted);
    EXPECT_EQ(row.speculative.rejecting_rounds, speculative_sum.rejecting_rounds);
    EXPECT_EQ(row.speculative.rounds, speculative_sum.rounds);
    EXPECT_EQ(row.speculative.emitted, speculative_sum.emitted);
    EXPECT_EQ(row.speculative.drafted_at, speculative_sum.drafted_at);
    EXPECT_EQ(row.plain.target_calls, plain_sum.target_calls);
    EXPECT_EQ(row.plain.emitted, plain_sum.emitted);
    EXPECT_DOUBLE_EQ(row.speculative.alpha_hat(), speculative_sum.alpha_hat());
    EXPECT_DOUBLE_EQ(row.speculative.tokens_per_round(), speculative_sum.tokens_per_round());
  }
}

TEST(SpeedupTest, QuartilesInterpolateBetweenOrderStatistics) {
  const std::vector<double> four{4.0, 1.0, 3.0, 2.0};
  const specdec::Quartiles q = specdec::quartiles(four);
  EXPECT_DOUBLE_EQ(q.p25, 1.75);
  EXPECT_DOUBLE_EQ(q.median, 2.5);
  EXPECT_DOUBLE_EQ(q.p75, 3.25);
  const std::vector<double> three{3.0, 1.0, 2.0};
  EXPECT_DOUBLE_EQ(specdec::quartiles(three).median, 2.0);
  EXPECT_DOUBLE_EQ(specdec::quartiles(three).p25, 1.5);
  const std::vector<double> one{1.7};
  EXPECT_DOUBLE_EQ(specdec::quartiles(one).p25, 1.7);
  EXPECT_DOUBLE_EQ(specdec::quartiles(one).p75, 1.7);
  EXPECT_DOUBLE_EQ(specdec::quartiles({}).median, 0.0);
}

// A NaN q was cast to size_t (undefined; an index of 2^63 on x86-64); a NaN value breaks the
// sort's ordering. Both are rejected; q outside [0, 1] is clamped, infinities included.
TEST(SpeedupTest, QuantileRejectsNaNAndClampsOutOfRangeQ) {
  const std::vector<double> values{3.0, 1.0, 2.0};
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  try {
    (void)specdec::quantile(values, kNaN);
    ADD_FAILURE() << "a NaN q was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(), "specdec: quantile: q = nan; expected a probability in [0, 1]");
  }
  try {
    (void)specdec::quantile({1.0, kNaN, 2.0}, 0.5);
    ADD_FAILURE() << "a NaN value was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: quantile: value 1 of 3 is NaN; expected numbers (a sample can be "
                 "ordered)");
  }
  EXPECT_DOUBLE_EQ(specdec::quantile(values, -std::numeric_limits<double>::infinity()), 1.0);
  EXPECT_DOUBLE_EQ(specdec::quantile(values, 7.0), 3.0);
}

GenerationResult fabricated(std::size_t tokens, double seconds, std::size_t target_calls,
                            double target_seconds) {
  GenerationResult result;
  result.tokens.assign(tokens, 1);
  result.stats.emitted = tokens;
  result.stats.rounds = target_calls;
  result.stats.total_seconds = seconds;
  result.stats.target_calls = target_calls;
  result.stats.target_seconds = target_seconds;
  return result;
}

TEST(SpeedupTest, RowStatisticsOnKnownInputs) {
  SpeedupRow row;
  row.setting.config.draft_length = 3;
  row.setting.config.sampling.temperature = 1.0f;
  // Four pairs of 100 tokens each: plain 1 s every time, speculative 1, 1/2, 1/3, 1/4 s, so the
  // per-pair speedups are 1, 2, 3, 4; CPU times make them 2 each.
  const double speculative_seconds[] = {1.0, 0.5, 1.0 / 3.0, 0.25};
  for (const double seconds : speculative_seconds) {
    row.add(fabricated(100, 1.0, 100, 0.8), 1.0, fabricated(100, seconds, 25, 0.1), 0.5);
  }
  EXPECT_EQ(row.pairs(), 4u);
  EXPECT_DOUBLE_EQ(row.speedup().median, 2.5);
  EXPECT_DOUBLE_EQ(row.speedup().p25, 1.75);
  EXPECT_DOUBLE_EQ(row.speedup().p75, 3.25);
  EXPECT_DOUBLE_EQ(row.cpu_speedup().median, 2.0);
  // Aggregate: total plain time / total speculative time (same tokens on both sides).
  const double speculative_total = 1.0 + 0.5 + 1.0 / 3.0 + 0.25;
  EXPECT_DOUBLE_EQ(row.aggregate_speedup(), 4.0 / speculative_total);
  EXPECT_DOUBLE_EQ(row.plain_tokens_per_second(), 100.0);
  // T(K+1)/T(1): (0.4 s / 100 calls) / (3.2 s / 400 calls) = 0.004 / 0.008.
  EXPECT_DOUBLE_EQ(row.verify_cost(), 0.5);
  EXPECT_DOUBLE_EQ(row.predicted(), row.speculative.predicted_speedup(3, 0.5));
  EXPECT_FALSE(row.greedy());
  EXPECT_EQ(row.greedy_mismatches, 0u);

  // Unequal token counts: the ratio is of token rates, not of times.
  EXPECT_DOUBLE_EQ(specdec::speedup_ratio(100, 2.0, 50, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(specdec::speedup_ratio(100, 0.0, 50, 0.5), 0.0);
}

TEST(SpeedupTest, GreedyRowCountsDifferingOutputs) {
  SpeedupRow row;
  row.setting.config.sampling.temperature = 0.0f;
  GenerationResult plain = fabricated(4, 1.0, 4, 1.0);
  GenerationResult same = plain;
  GenerationResult different = plain;
  different.tokens[2] = 3;
  row.add(plain, 1.0, same, 1.0);
  row.add(plain, 1.0, different, 1.0);
  EXPECT_TRUE(row.greedy());
  EXPECT_EQ(row.greedy_mismatches, 1u);
}

// The message of the std::invalid_argument `call` throws ("" if it throws nothing).
template <class Call>
std::string invalid_argument_message(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(SpeedupTest, RejectsEmptyInputsWithMessagesThatSayWhatWasExpected) {
  specdec::testing::ScriptedPair pair;
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const auto prompts = prompts_for_test(2);
  const std::vector<std::vector<token_t>> no_prompts;
  const std::vector<std::size_t> ks{1, 2};
  const std::vector<std::size_t> no_ks;
  const std::vector<specdec::SpeedupSetting> no_settings;
  const GenerationConfig config = config_for_test(0.0f);
  int resets = 0;
  const auto reset = [&] { ++resets; };

  EXPECT_EQ(invalid_argument_message([&] {
              (void)specdec::measure_speedup(speculative, plain, no_prompts, config, ks, reset);
            }),
            "specdec: measure_speedup: the prompt list is empty; expected at least one prompt (one "
            "pair of runs per prompt and setting)");
  EXPECT_EQ(invalid_argument_message([&] {
              (void)specdec::measure_speedup(speculative, plain, prompts, config, no_ks, reset);
            }),
            "specdec: draft_length_settings: the list of draft lengths is empty; expected at least "
            "one K >= 1");
  EXPECT_NE(invalid_argument_message([&] {
              (void)specdec::measure_speedup(speculative, plain, prompts, no_settings, reset);
            }).find("the settings list is empty; expected at least one setting"),
            std::string::npos);
  const std::vector<std::size_t> zero_k{2, 0};
  EXPECT_EQ(invalid_argument_message([&] { (void)specdec::draft_length_settings(config, zero_k); }),
            "specdec: draft_length_settings: draft length 0 at index 1; expected K >= 1 (tokens "
            "drafted per round)");
  const std::vector<std::vector<token_t>> with_empty{{1, 2}, {}};
  EXPECT_EQ(invalid_argument_message([&] {
              (void)specdec::measure_speedup(speculative, plain, with_empty, config, ks, reset);
            }),
            "specdec: measure_speedup: prompt 1 is empty; expected at least one token (e.g. BOS)");
  EXPECT_EQ(resets, 0);  // validation happens before any run
}

// An adaptive policy's row: the formula at the mean drafted length, not at the cap. Known
// inputs: 10 rounds drafting 20 tokens (K̄ = 2), α̂ = 0.5, c = 0.01 / 0.05 = 0.2, v = 0.05 / 0.04
// = 1.25: (1 - 0.5^3) / 0.5 / ((2 · 0.2 + 1) · 1.25) = 1.75 / 1.75 = 1. (At the cap K = 16
// the formula says 0.38.)
TEST(SpeedupTest, AnAdaptiveRowIsPredictedAtItsMeanDraftedLength) {
  SpeedupRow row;
  row.setting.config.draft_length = 16;
  row.setting.config.draft_length_policy.kind = specdec::DraftLengthKind::schedule;
  GenerationResult speculative = fabricated(30, 1.0, 10, 0.5);
  speculative.stats.drafted = 20;
  speculative.stats.accepted = 10;
  speculative.stats.rejecting_rounds = 10;
  speculative.stats.draft_calls = 20;
  speculative.stats.draft_seconds = 0.2;
  row.add(fabricated(30, 2.0, 30, 1.2), 2.0, speculative, 1.0);
  EXPECT_EQ(row.prediction_basis(), specdec::PredictionBasis::mean_drafted_length);
  EXPECT_DOUBLE_EQ(row.mean_drafted_length(), 2.0);
  EXPECT_NEAR(row.predicted(), 1.0, 1e-12);
  // A fixed K keeps the formula at K.
  row.setting.config.draft_length_policy.kind = specdec::DraftLengthKind::fixed;
  row.setting.config.draft_length = 2;
  EXPECT_EQ(row.prediction_basis(), specdec::PredictionBasis::draft_length);
  EXPECT_DOUBLE_EQ(row.predicted(), row.speculative.predicted_speedup(2, row.verify_cost()));
}

// A policy that stated its expectations (goodput with measured costs): its expected tokens per
// second of model time over plain decoding's. Known inputs: 30 tokens in 0.6 s expected (50/s)
// against 30 plain tokens in 1.2 s of target time (25/s): 2x.
TEST(SpeedupTest, APolicyRowShowsWhatThePolicyPredicted) {
  SpeedupRow row;
  row.setting.config.draft_length = 16;
  row.setting.config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
  GenerationResult speculative = fabricated(30, 1.0, 10, 0.5);
  speculative.stats.drafted = 20;
  speculative.stats.predicted_rounds = 10;
  speculative.stats.predicted_tokens = 30;
  speculative.stats.predicted_seconds = 0.6;
  row.add(fabricated(30, 2.0, 30, 1.2), 2.0, speculative, 1.0);
  EXPECT_EQ(row.prediction_basis(), specdec::PredictionBasis::policy);
  EXPECT_NEAR(row.predicted(), 2.0, 1e-12);
  specdec::SpeedupTable table;
  table.rows.push_back(row);
  std::ostringstream out;
  specdec::print_speedup_table(out, table);
  EXPECT_NE(out.str().find("predicted  from"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("2.00x  policy"), std::string::npos) << out.str();
}

// Synthetic models where the prediction is known: the draft is the target (greedy: every token
// accepted, α̂ = 1) and unsure of every token (its argmax has probability e^0.5 / (e^0.5 + 7)
// = 0.19 < 0.75), so the confidence policy drafts exactly one token a round; with an even
// budget every round drafts one. The row must predict (1 + 1) / ((c + 1) v), the geometric model
// at K = 1 with the measured c and v, not the formula at the cap K = 16.
struct UnsureModel {
  std::vector<float> rows;
  void fill(std::span<const token_t> prefix, float* row) const {
    std::fill(row, row + 8, 0.0f);
    row[(static_cast<std::size_t>(prefix.back()) * 3 + prefix.size()) % 8] = 0.5f;
  }
  std::span<const float> operator()(std::span<const token_t> context) {
    rows.resize(8);
    fill(context, rows.data());
    return rows;
  }
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    rows.resize(n * 8);
    for (std::size_t i = 0; i < n; ++i) {
      fill(context.first(context.size() - n + 1 + i), rows.data() + i * 8);
    }
    return rows;
  }
};

TEST(SpeedupTest, TheConfidencePolicysRowIsPredictedAtTheLengthItDrafted) {
  UnsureModel draft, target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  GenerationConfig config = config_for_test(0.0f);
  config.max_new_tokens = 40;
  config.draft_length = 16;
  config.draft_length_policy.kind = specdec::DraftLengthKind::confidence;
  const std::vector<specdec::SpeedupSetting> settings{{"confidence", config}};
  const auto prompts = prompts_for_test(3);
  const specdec::SpeedupTable table = specdec::measure_speedup(
      speculative, plain, prompts, std::span<const specdec::SpeedupSetting>(settings), [] {});
  const SpeedupRow& row = table.rows.front();
  ASSERT_EQ(row.speculative.drafted, row.speculative.rounds);  // one token every round
  ASSERT_EQ(row.speculative.alpha_hat(), 1.0);
  EXPECT_EQ(row.prediction_basis(), specdec::PredictionBasis::mean_drafted_length);
  const double c = row.speculative.cost_ratio(), v = row.verify_cost();
  EXPECT_NEAR(row.predicted(), 2.0 / ((c + 1.0) * v), 1e-12);
  std::ostringstream out;
  specdec::print_speedup_table(out, table);
  EXPECT_NE(out.str().find("mean 1.00"), std::string::npos) << out.str();
}

TEST(SpeedupTest, PrintsOneLinePerSettingWithGreedyIdentity) {
  specdec::SpeedupTable table;
  table.prompts = 2;
  table.rows.reserve(3);  // `good` is copied below: no reallocation
  SpeedupRow& good = table.rows.emplace_back();
  good.setting.name = "K=2";
  good.setting.config.draft_length = 2;
  good.setting.config.sampling.temperature = 0.0f;
  good.add(fabricated(10, 1.0, 10, 1.0), 1.0, fabricated(10, 0.5, 4, 0.6), 0.5);
  good.add(fabricated(10, 1.0, 10, 1.0), 1.0, fabricated(10, 0.5, 4, 0.6), 0.5);
  SpeedupRow& bad = table.rows.emplace_back(good);
  bad.setting.name = "broken";
  bad.greedy_mismatches = 1;
  SpeedupRow& sampled = table.rows.emplace_back(good);
  sampled.setting.name = "sampled";
  sampled.setting.config.sampling.temperature = 1.0f;

  std::ostringstream out;
  specdec::print_speedup_table(out, table);
  const std::string text = out.str();
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << text;
  EXPECT_NE(lines[0].find("speedup median [p25, p75]"), std::string::npos) << text;
  EXPECT_NE(lines[1].find("2.00x [2.00, 2.00]"), std::string::npos) << text;
  EXPECT_NE(lines[1].find("yes (2/2)"), std::string::npos) << text;
  EXPECT_NE(lines[2].find("NO: 1/2 differ"), std::string::npos) << text;
  EXPECT_EQ(lines[3].substr(lines[3].size() - 1), "-") << text;
}

}  // namespace
