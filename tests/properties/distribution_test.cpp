// Statistical test of the full decoder: the first three tokens SpeculativeDecoder emits follow
// the target's own distribution of three tokens, in every sampling mode (T = 1, T = 0.7, top-k,
// top-p, min-p, and T = 0.85 with a context-dependent logits processor) and for good, poor and
// identical drafts (chi-square goodness of fit over all 8^3 = 512 cells, 200k runs per case),
// with the certification harness's tests (specdec/testing.hpp: chi_square_test, g_test,
// samples_to_detect), whose known values are checked here too.
//
// The expected distribution is computed from the target alone with an independent reference
// implementation of the filters written in this file (cross-checked against the library's
// double kernels, against the float kernels' kept sets, and against the harness's exact
// target_law, so a boundary token cannot make the reference disagree with what the decoder
// actually does).
//
// Power check: StrategyDecoder with a verifier written here from the math passes the same test
// (control), and with the seed's bugs injected into that verifier (scalar residual, bonus from
// the wrong target row) must fail it with p < 1e-4; the exact total variation of each mutant
// (harness enumeration in double) must be large enough for kRuns to detect it. A decoding loop
// built from the library's kernels, following the decoder's documented coin order, reproduces
// SpeculativeDecoder token for token.
//
// ctest label: statistical (filter with `ctest -LE statistical` for a quick run).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/rng.hpp"
#include "specdec/sampling.hpp"
#include "specdec/testing.hpp"

#include "../restated_token_verifier.hpp"
#include "specdec/verify.hpp"

namespace {

using specdec_test::Mutation;
using specdec_test::RestatedTokenVerifier;

using specdec::SamplingParams;
using specdec::token_t;

constexpr std::size_t kVocab = 8;
constexpr std::size_t kContexts = kVocab * kVocab;  // (second-to-last, last) token pairs
constexpr std::size_t kEmitted = 3;
constexpr std::size_t kCells = kVocab * kVocab * kVocab;
constexpr std::size_t kRuns = 200'000;
// Significance threshold for every goodness-of-fit assertion: 18 cases + 1 control, so a correct
// decoder fails a full run with probability ~2e-3; the seeds are fixed, so a run's verdict is
// reproducible. The injected bugs reach p ~ 0 (chi2 in the tens of thousands), far below it.
constexpr double kMinPValue = 1e-4;
const std::vector<token_t> kPrompt{2, 5};

using specdec::testing::chi_square_survival;
using specdec::testing::chi_square_test;
using specdec::testing::GoodnessOfFit;

// ---- the harness's statistics: known values --------------------------------------------------

// The cells the χ² tests of the first tokens count runs in: the first token varies slowest,
// only the first `length` tokens count, and a law's longer sequences add up in their cell.
TEST(ChiSquareMachineryTest, CellsOfTheFirstTokens) {
  using specdec::testing::cell_of;
  EXPECT_EQ(cell_of(std::vector<token_t>{2, 1, 3}, 4, 3), (2u * 4 + 1) * 4 + 3);
  EXPECT_EQ(cell_of(std::vector<token_t>{2, 1, 3, 7}, 4, 2), 2u * 4 + 1);
  const specdec::testing::Law law{{{0, 1}, 0.25}, {{0, 1, 2}, 0.25}, {{3, 3}, 0.5}};
  std::vector<double> expected(16, 0.0);
  expected[1] = 0.5;
  expected[15] = 0.5;
  EXPECT_EQ(specdec::testing::law_cells(law, 4, 2), expected);
  EXPECT_THROW((void)cell_of(std::vector<token_t>{1}, 4, 2), std::invalid_argument);
  EXPECT_THROW((void)cell_of(std::vector<token_t>{4, 0}, 4, 2), std::invalid_argument);
  EXPECT_THROW((void)cell_of(std::vector<token_t>{0, -1}, 4, 2), std::invalid_argument);
}

TEST(ChiSquareMachineryTest, SurvivalFunctionMatchesKnownValues) {
  EXPECT_NEAR(chi_square_survival(3.841458820694124, 1), 0.05, 1e-12);
  EXPECT_NEAR(chi_square_survival(7.3, 2), std::exp(-7.3 / 2), 1e-14);  // dof 2: exp(-x/2)
  EXPECT_NEAR(chi_square_survival(0.5, 3), 0.918891411654676, 1e-12);
  EXPECT_NEAR(chi_square_survival(35.56401, 10), 1e-4, 1e-9);
  EXPECT_NEAR(chi_square_survival(99.33412, 100), 0.5, 1e-6);  // median ~ dof (1 - 2/(9 dof))^3
  EXPECT_LT(chi_square_survival(700, 500), 1e-7);
  EXPECT_GT(chi_square_survival(400, 500), 0.999);
}

TEST(ChiSquareMachineryTest, DetectsABiasedSamplerAndAcceptsAFairOne) {
  // Two dice rolled 60000 times by an Rng; one of them slightly loaded (1/6 -> 1/6 + 0.01).
  specdec::Rng rng(7);
  const std::vector<double> fair(6, 1.0 / 6.0);
  std::vector<std::uint64_t> fair_counts(6, 0);
  std::vector<std::uint64_t> loaded_counts(6, 0);
  for (int i = 0; i < 60000; ++i) {
    ++fair_counts[static_cast<std::size_t>(rng.uniform01() * 6.0)];
    const double u = rng.uniform01();
    constexpr double kLoaded = 1.0 / 6.0 + 0.01;  // face 0; faces 1-5 share the rest evenly
    ++loaded_counts[u < kLoaded
                        ? 0
                        : 1 + static_cast<std::size_t>((u - kLoaded) / (1.0 - kLoaded) * 5.0)];
  }
  EXPECT_GT(chi_square_test(fair_counts, fair).p_value, kMinPValue);
  EXPECT_LT(chi_square_test(loaded_counts, fair).p_value, kMinPValue);
  EXPECT_GT(specdec::testing::g_test(fair_counts, fair).p_value, kMinPValue);
  EXPECT_LT(specdec::testing::g_test(loaded_counts, fair).p_value, kMinPValue);
  // A count in a probability-0 cell is reported, never silently pooled.
  const std::vector<double> with_zero{0.5, 0.5, 0.0};
  const std::vector<std::uint64_t> one_impossible{10, 10, 1};
  EXPECT_EQ(chi_square_test(one_impossible, with_zero).impossible, 1u);
  EXPECT_EQ(specdec::testing::g_test(one_impossible, with_zero).impossible, 1u);
  // One count per cell, or an error.
  EXPECT_THROW((void)chi_square_test(fair_counts, with_zero), std::invalid_argument);
}

TEST(ChiSquareMachineryTest, StatisticsAndPoolingMatchHandComputedValues) {
  // 30 / 70 against a fair coin: Pearson 20^2/50 * 2 = 16, G = 2 (30 ln 0.6 + 70 ln 1.4); one
  // degree of freedom, so p = erfc(sqrt(x / 2)).
  const std::vector<double> coin{0.5, 0.5};
  const std::vector<std::uint64_t> counts{30, 70};
  const GoodnessOfFit pearson = chi_square_test(counts, coin);
  EXPECT_NEAR(pearson.statistic, 16.0, 1e-12);
  EXPECT_EQ(pearson.cells, 2u);
  EXPECT_NEAR(pearson.p_value, std::erfc(std::sqrt(8.0)), 1e-15);
  const GoodnessOfFit g = specdec::testing::g_test(counts, coin);
  EXPECT_NEAR(g.statistic, 16.456575701010358, 1e-12);
  EXPECT_NEAR(g.p_value, std::erfc(std::sqrt(16.456575701010358 / 2)), 1e-15);
  // Expected 50, 46, 2, 2: the two small cells pool (4 < 5) into the smallest regular cell
  // (46 -> 50), leaving two cells that match exactly.
  const GoodnessOfFit pooled = chi_square_test(std::vector<std::uint64_t>{50, 44, 3, 3},
                                               std::vector<double>{0.5, 0.46, 0.02, 0.02});
  EXPECT_EQ(pooled.cells, 2u);
  EXPECT_NEAR(pooled.statistic, 0.0, 1e-12);
  EXPECT_EQ(pooled.p_value, 1.0);
}

// A TV too small to detect within 2^64 samples saturates at SIZE_MAX: the count used to overflow
// (below ~1e-9) or reach +inf (below ~1e-154) and be cast to size_t (undefined; 2^63 seen).
TEST(ChiSquareMachineryTest, SamplesToDetectSaturatesForAnUndetectableDeviation) {
  using specdec::testing::samples_to_detect;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  for (const double tv : {1e-9, 1e-10, 1e-200, std::numeric_limits<double>::denorm_min()}) {
    EXPECT_EQ(samples_to_detect(tv, 6), kMax) << tv;
  }
  EXPECT_LT(samples_to_detect(1e-8, 6), kMax);  // still counted, and growing as tv shrinks
  EXPECT_GT(samples_to_detect(1e-8, 6), samples_to_detect(1e-7, 6));
}

// samples_to_detect(d, k) is enough: a die off by total variation 0.01 spread evenly (the
// hardest way to hide it: faces 0-2 gain 0.01/3 each, faces 3-5 lose it) fails p < 1e-4 at that
// many rolls, for every one of 20 seeds; and it grows as d shrinks or k grows.
TEST(ChiSquareMachineryTest, SamplesToDetectIsEnoughForTheHardestDeviation) {
  using specdec::testing::samples_to_detect;
  const std::size_t n = samples_to_detect(0.01, 6);
  EXPECT_GT(n, samples_to_detect(0.02, 6));
  EXPECT_LT(n, samples_to_detect(0.01, 60));
  EXPECT_LT(n, 1'000'000u);
  const std::vector<double> fair(6, 1.0 / 6.0);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    specdec::Rng rng(100 + seed);
    std::vector<std::uint64_t> counts(6, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const double u = rng.uniform01();
      constexpr double kHigh = 1.0 / 6.0 + 0.01 / 3.0;
      const std::size_t face =
          u < 3 * kHigh ? static_cast<std::size_t>(u / kHigh)
                        : 3 + static_cast<std::size_t>((u - 3 * kHigh) / ((1.0 - 3 * kHigh) / 3));
      ++counts[std::min<std::size_t>(face, 5)];
    }
    EXPECT_LT(chi_square_test(counts, fair).p_value, kMinPValue)
        << "seed " << seed << ", " << n << " rolls";
  }
  EXPECT_THROW((void)samples_to_detect(0.0, 6), std::invalid_argument);
}

// ---- scripted models: logits from a hash of the last two tokens -------------------------------

using specdec::testing::detail::mix;

double hash_unit(std::uint64_t salt, std::size_t index) {
  return static_cast<double>(mix(mix(salt) ^ index) >> 11) * 0x1.0p-53;
}

// Standard normal from two hash values (Box-Muller).
double hash_normal(std::uint64_t salt, std::size_t index) {
  const double u1 = 1.0 - hash_unit(salt, 2 * index);
  const double u2 = hash_unit(salt, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// (kContexts, kVocab) logits; row (a * V + b) follows a context ending in tokens a, b.
using LogitTable = std::array<float, kContexts * kVocab>;

std::size_t context_index(std::span<const token_t> context) {
  // A decoder that overshoots its budget (or never terminates) fails at once, not by timeout.
  if (context.size() > 10'000) {
    throw std::runtime_error("test model: runaway context; the decoder is not terminating");
  }
  const auto last = static_cast<std::size_t>(context.back());
  const auto before =
      context.size() >= 2 ? static_cast<std::size_t>(context[context.size() - 2]) : 0;
  return before * kVocab + last;
}

LogitTable target_table() {
  LogitTable table{};
  for (std::size_t i = 0; i < table.size(); ++i) {
    table[i] = static_cast<float>(1.6 * hash_normal(0x7a59e7, i));
  }
  return table;
}

enum class DraftQuality { well_matched, poor, identical };

const char* name_of(DraftQuality quality) {
  switch (quality) {
    case DraftQuality::well_matched:
      return "well-matched";
    case DraftQuality::poor:
      return "poor";
    case DraftQuality::identical:
      return "identical";
  }
  return "?";
}

// Readable test names in ctest / gtest output.
void PrintTo(DraftQuality quality, std::ostream* os) { *os << name_of(quality); }

// Draft = the target's logits, shrunk by `shrink` and perturbed by `noise` standard normals.
LogitTable draft_table(const LogitTable& target, DraftQuality quality) {
  if (quality == DraftQuality::identical) return target;
  const double shrink = quality == DraftQuality::well_matched ? 1.0 : 0.3;
  const double noise = quality == DraftQuality::well_matched ? 0.5 : 2.0;
  LogitTable table{};
  for (std::size_t i = 0; i < table.size(); ++i) {
    table[i] = static_cast<float>(shrink * target[i] + noise * hash_normal(0xd4af7, i));
  }
  return table;
}

// DraftModel: a zero-copy view into the table.
struct TableDraft {
  const LogitTable* table;
  std::span<const float> operator()(std::span<const token_t> context) const {
    return std::span<const float>(table->data() + context_index(context) * kVocab, kVocab);
  }
};

// TargetModel: n rows, row i follows the first context.size() - n + 1 + i tokens.
struct TableTarget {
  const LogitTable* table;
  std::vector<float> rows = std::vector<float>(16 * kVocab);
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    if (rows.size() < n * kVocab) rows.resize(n * kVocab);
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = context.first(context.size() - n + 1 + i);
      std::copy_n(table->data() + context_index(row) * kVocab, kVocab, rows.data() + i * kVocab);
    }
    return std::span<const float>(rows.data(), n * kVocab);
  }
};

// The same tables as models of double logits, for the harness's exact laws.
struct DoubleTableDraft {
  const LogitTable* table;
  std::vector<double> operator()(std::span<const token_t> context) const {
    const float* row = table->data() + context_index(context) * kVocab;
    return std::vector<double>(row, row + kVocab);
  }
};

struct DoubleTableTarget {
  const LogitTable* table;
  std::vector<double> operator()(std::span<const token_t> context, std::size_t n) const {
    std::vector<double> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const float* row =
          table->data() + context_index(context.first(context.size() - n + 1 + i)) * kVocab;
      rows.insert(rows.end(), row, row + kVocab);
    }
    return rows;
  }
};

std::size_t cell_of(std::span<const token_t> tokens);

// ---- independent reference of the documented filters ------------------------------------------

// p(x) for one row, in double, straight from the documented semantics: temperature, then top-k
// (ties with the k-th logit kept), then top-p on the renormalised top-k distribution (smallest
// high-probability set of mass >= top_p, never splitting a tie), then min-p (p >= min_p p_max).
std::vector<double> reference_probabilities(std::span<const float> row,
                                            const SamplingParams& params) {
  const std::size_t vocab = row.size();
  std::vector<double> logits(row.begin(), row.end());
  const double temperature = params.temperature;
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<bool> kept(vocab, true);
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab) {
    std::vector<double> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<std::size_t>(params.top_k) - 1];
    for (std::size_t v = 0; v < vocab; ++v) kept[v] = kept[v] && logits[v] >= kth;
  }
  auto weight = [&](std::size_t v) { return std::exp((logits[v] - max) / temperature); };
  if (params.top_p < 1.0f) {
    std::vector<std::size_t> order;
    double total = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      if (kept[v]) {
        order.push_back(v);
        total += weight(v);
      }
    }
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
    double cumulative = 0;
    double boundary = logits[order.back()];
    for (std::size_t v : order) {
      cumulative += weight(v);
      if (cumulative >= static_cast<double>(params.top_p) * total) {
        boundary = logits[v];
        break;
      }
    }
    for (std::size_t v = 0; v < vocab; ++v) kept[v] = kept[v] && logits[v] >= boundary;
  }
  if (params.min_p > 0.0f) {
    for (std::size_t v = 0; v < vocab; ++v) kept[v] = kept[v] && weight(v) >= params.min_p;
  }
  std::vector<double> p(vocab, 0.0);
  double total = 0;
  for (std::size_t v = 0; v < vocab; ++v) {
    if (kept[v]) total += (p[v] = weight(v));
  }
  for (double& x : p) x /= total;
  return p;
}

// Exact law of the target's first three tokens after kPrompt: 512 cells, index t1*64+t2*8+t3.
// The logits processor, if any, sees the whole context (prompt + tokens so far).
std::vector<double> target_three_token_law(const LogitTable& table, const SamplingParams& params) {
  std::vector<double> law(kCells, 0.0);
  auto row_after = [&](const std::vector<token_t>& context) {
    std::vector<float> row(table.data() + context_index(context) * kVocab,
                           table.data() + (context_index(context) + 1) * kVocab);
    if (params.logits_processor) params.logits_processor(context, row);
    return reference_probabilities(row, params);
  };
  auto extend = [](std::vector<token_t> context, std::size_t token) {
    context.push_back(static_cast<token_t>(token));
    return context;
  };
  const std::vector<double> p1 = row_after(kPrompt);
  for (std::size_t t1 = 0; t1 < kVocab; ++t1) {
    if (p1[t1] == 0) continue;
    const std::vector<token_t> c1 = extend(kPrompt, t1);
    const std::vector<double> p2 = row_after(c1);
    for (std::size_t t2 = 0; t2 < kVocab; ++t2) {
      if (p2[t2] == 0) continue;
      const std::vector<double> p3 = row_after(extend(c1, t2));
      for (std::size_t t3 = 0; t3 < kVocab; ++t3) {
        law[(t1 * kVocab + t2) * kVocab + t3] = p1[t1] * p2[t2] * p3[t3];
      }
    }
  }
  return law;
}

// ---- cases -----------------------------------------------------------------------------------

struct Mode {
  std::string name;
  SamplingParams params;
};

// Frequency penalty over the whole context (logit -= 0.7 x occurrences): it depends on tokens
// far beyond the last two, so a decoder that hands a row the wrong context prefix gets it
// wrong. Additive, so it reshapes p and q alike without changing how well they match.
void frequency_penalty(std::span<const token_t> context, std::span<float> logits) {
  for (token_t t : context) logits[static_cast<std::size_t>(t)] -= 0.7f;
}

std::vector<Mode> sampling_modes() {
  std::vector<Mode> modes(6);
  modes[0].name = "T=1";
  modes[1].name = "T=0.7";
  modes[1].params.temperature = 0.7f;
  modes[2].name = "top_k=3";
  modes[2].params.top_k = 3;
  modes[3].name = "top_p=0.8";
  modes[3].params.top_p = 0.8f;
  modes[4].name = "min_p=0.1";
  modes[4].params.min_p = 0.1f;
  modes[5].name = "T=0.85+freq";
  modes[5].params.temperature = 0.85f;
  modes[5].params.logits_processor = frequency_penalty;
  return modes;
}

// The reference must agree with the library on every context the test can reach: the double
// kernels to 1e-12, and the float kernels (what the decoder runs) on which tokens are kept.
TEST(DistributionTest, ReferenceFiltersAgreeWithLibraryKernels) {
  const LogitTable target = target_table();
  for (const DraftQuality quality :
       {DraftQuality::well_matched, DraftQuality::poor, DraftQuality::identical}) {
    const LogitTable table =
        quality == DraftQuality::identical ? target : draft_table(target, quality);
    for (const Mode& mode : sampling_modes()) {
      if (mode.params.logits_processor) continue;  // filters only (the processor needs a context)
      for (std::size_t c = 0; c < kContexts; ++c) {
        const std::span<const float> row(table.data() + c * kVocab, kVocab);
        const std::vector<double> expected = reference_probabilities(row, mode.params);
        const std::vector<double> row_double(row.begin(), row.end());
        std::vector<double> scratch_d;
        std::vector<float> scratch_f;
        const auto dist_d =
            specdec::process_logits(std::span<const double>(row_double), mode.params, scratch_d);
        const auto dist_f = specdec::process_logits(row, mode.params, scratch_f);
        for (std::size_t v = 0; v < kVocab; ++v) {
          const auto token = static_cast<token_t>(v);
          EXPECT_NEAR(dist_d.probability(token), expected[v], 1e-12)
              << name_of(quality) << " " << mode.name << " context " << c << " token " << v;
          EXPECT_EQ(dist_f.kept(token), expected[v] > 0)
              << name_of(quality) << " " << mode.name << " context " << c << " token " << v;
        }
      }
    }
  }
}

// The whole three-token reference law, logits processor included, equals the harness's exact
// law of the target (library double kernels, the processor on the whole context).
TEST(DistributionTest, ReferenceLawAgreesWithTheHarnessTargetLaw) {
  const LogitTable target = target_table();
  for (const Mode& mode : sampling_modes()) {
    const std::vector<double> reference = target_three_token_law(target, mode.params);
    const std::vector<double> harness = specdec::testing::law_cells(
        specdec::testing::target_law(DoubleTableTarget{&target}, mode.params, kPrompt, kEmitted),
        kVocab, kEmitted);
    for (std::size_t cell = 0; cell < kCells; ++cell) {
      EXPECT_NEAR(harness[cell], reference[cell], 1e-12) << mode.name << " cell " << cell;
      EXPECT_EQ(harness[cell] > 0, reference[cell] > 0) << mode.name << " cell " << cell;
    }
  }
}

// ---- running the decoder -------------------------------------------------------------------

struct SampleSummary {
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(kCells, 0);
  std::size_t accepted = 0;
  std::size_t rejecting_rounds = 0;
  std::size_t drafted = 0;
  double seconds = 0;

  double alpha_hat() const {
    return static_cast<double>(accepted) / static_cast<double>(accepted + rejecting_rounds);
  }
};

std::size_t cell_of(std::span<const token_t> tokens) {
  return specdec::testing::cell_of(tokens, kVocab, kEmitted);
}

specdec::GenerationConfig three_token_config(const SamplingParams& params,
                                             std::size_t draft_length) {
  specdec::GenerationConfig config;
  config.draft_length = draft_length;
  config.max_new_tokens = kEmitted;
  config.sampling = params;
  config.logprobs = false;
  return config;
}

SampleSummary sample_decoder(const LogitTable& target_logits, const LogitTable& draft_logits,
                             const SamplingParams& params, std::size_t draft_length,
                             std::uint64_t seed_base, std::size_t runs) {
  TableDraft draft{&draft_logits};
  TableTarget target{&target_logits};
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config = three_token_config(params, draft_length);
  SampleSummary summary;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < runs; ++i) {
    config.seed = seed_base + i;
    const specdec::GenerationResult result = decoder.generate(kPrompt, config);
    if (result.tokens.size() != kEmitted) {
      ADD_FAILURE() << "run " << i << " emitted " << result.tokens.size() << " tokens";
      return summary;
    }
    ++summary.counts[cell_of(result.tokens)];
    summary.accepted += result.stats.accepted;
    summary.rejecting_rounds += result.stats.rejecting_rounds;
    summary.drafted += result.stats.drafted;
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

struct Band {
  double low, high;
};

Band intended_alpha(DraftQuality quality) {
  switch (quality) {
    case DraftQuality::well_matched:
      return {0.7, 0.9};
    case DraftQuality::poor:
      return {0.2, 0.4};
    case DraftQuality::identical:
      return {1.0, 1.0};
  }
  return {0, 1};
}

class DistributionTest : public ::testing::TestWithParam<DraftQuality> {};

TEST_P(DistributionTest, FirstThreeTokensFollowTheTarget) {
  const DraftQuality quality = GetParam();
  const LogitTable target = target_table();
  const LogitTable draft = draft_table(target, quality);
  const std::vector<Mode> modes = sampling_modes();
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const Mode& mode = modes[m];
    // K = 2 covers one full three-token round (bonus included); K = 5 is cut to K_eff = 2 by
    // the budget; alternate so both paths are sampled.
    const std::size_t draft_length = m % 2 == 0 ? 2 : 5;
    const std::uint64_t seed_base =
        mix(0x5eed0000 + 16 * static_cast<std::uint64_t>(quality) + m) & ~0xfffffULL;
    const SampleSummary summary =
        sample_decoder(target, draft, mode.params, draft_length, seed_base, kRuns);
    const std::vector<double> law = target_three_token_law(target, mode.params);
    const GoodnessOfFit fit = chi_square_test(summary.counts, law);
    const double alpha = summary.alpha_hat();
    std::printf(
        "[ stats ] %-12s %-10s K=%zu alpha_hat=%.4f (%zu rejecting rounds) chi2=%.1f "
        "cells=%zu p=%.4g (G-test p=%.4g) (%.2fs)\n",
        name_of(quality), mode.name.c_str(), draft_length, alpha, summary.rejecting_rounds,
        fit.statistic, fit.cells, fit.p_value,
        specdec::testing::g_test(summary.counts, law).p_value, summary.seconds);
    const std::string label = std::string(name_of(quality)) + " " + mode.name;
    EXPECT_EQ(fit.impossible, 0u) << label << ": emitted a sequence the target cannot produce";
    EXPECT_GT(fit.p_value, kMinPValue)
        << label << ": chi2 = " << fit.statistic << " over " << fit.cells << " cells";
    const Band band = intended_alpha(quality);
    if (quality == DraftQuality::identical) {
      // p == q: every draft is accepted (a rejection could only come from float rounding of
      // p(x)/q(x) = 1 - 1 ulp, with probability ~6e-8 per token).
      EXPECT_GE(alpha, 1.0 - 1e-5) << label;
    } else {
      EXPECT_GE(alpha, band.low) << label << ": the draft is not what the case claims";
      EXPECT_LE(alpha, band.high) << label << ": the draft is not what the case claims";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DraftQualities, DistributionTest,
                         ::testing::Values(DraftQuality::well_matched, DraftQuality::poor,
                                           DraftQuality::identical),
                         [](const ::testing::TestParamInfo<DraftQuality>& info) {
                           switch (info.param) {
                             case DraftQuality::well_matched:
                               return std::string("WellMatched");
                             case DraftQuality::poor:
                               return std::string("Poor");
                             case DraftQuality::identical:
                               return std::string("Identical");
                           }
                           return std::string("Unknown");
                         });

// ---- control: a decoding loop from the library's kernels reproduces the decoder -------------

// One generate() of the speculative decoder, re-assembled from the public kernels following the
// documented round structure and coin order (K_eff draft coins, K_eff acceptance coins, one
// final coin). It must reproduce SpeculativeDecoder exactly.
class KernelLoop {
 public:
  KernelLoop(const LogitTable& draft, const LogitTable& target)
      : draft_{&draft}, target_{&target} {}

  std::vector<token_t> generate(const specdec::GenerationConfig& config) {
    const SamplingParams& params = config.sampling;
    const std::size_t draft_length = config.draft_length;
    specdec::Rng rng(config.seed);
    std::vector<token_t> context = kPrompt;
    std::vector<token_t> emitted;
    weights_.assign(draft_length * kVocab, 0.0f);
    normalizers_.assign(draft_length, 0.0f);
    while (emitted.size() < config.max_new_tokens) {
      const std::size_t round_length =
          std::min(draft_length, config.max_new_tokens - emitted.size() - 1);
      const std::size_t committed = context.size();
      std::vector<token_t> drafted;
      for (std::size_t k = 0; k < round_length; ++k) {
        const std::span<float> weights(weights_.data() + k * kVocab, kVocab);
        const std::span<const float> draft_logits =
            specdec::apply_logits_processor(params, context, draft_(context), processed_);
        const auto q = specdec::process_logits(draft_logits, params, filter_scratch_, weights);
        normalizers_[k] = q.normalizer;
        drafted.push_back(specdec::sample_from_weights(std::span<const float>(weights),
                                                       q.normalizer, rng.uniform01()));
        context.push_back(drafted.back());
      }
      const std::span<const float> rows = target_(context, round_length + 1);
      // Target row j follows the committed tokens plus x_0..x_{j-1}.
      auto p_row = [&](std::size_t j) {
        const std::span<const float> logits = specdec::apply_logits_processor(
            params, std::span<const token_t>(context.data(), committed + j),
            rows.subspan(j * kVocab, kVocab), processed_);
        return specdec::process_logits(logits, params, filter_scratch_);
      };
      std::vector<double> coins(round_length);
      for (double& coin : coins) coin = rng.uniform01();
      const double final_coin = rng.uniform01();
      const std::span<float> scratch(scratch_.data(), kVocab);

      std::size_t accepted = 0;
      token_t next = -1;
      for (; accepted < round_length; ++accepted) {
        const auto p = p_row(accepted);
        const token_t x = drafted[accepted];
        const std::span<const float> q_weights(weights_.data() + accepted * kVocab, kVocab);
        const float q_x = q_weights[static_cast<std::size_t>(x)] / normalizers_[accepted];
        if (coins[accepted] <
            static_cast<double>(specdec::acceptance_probability(p.probability(x), q_x)))
          continue;
        next = specdec::sample_residual(p, q_weights, normalizers_[accepted], final_coin, scratch);
        break;
      }
      if (accepted == round_length)
        next = specdec::sample(p_row(round_length), final_coin, scratch);
      context.resize(committed + accepted);
      emitted.insert(emitted.end(), drafted.begin(),
                     drafted.begin() + static_cast<std::ptrdiff_t>(accepted));
      emitted.push_back(next);
      context.push_back(next);
    }
    return emitted;
  }

 private:
  TableDraft draft_;
  TableTarget target_;
  std::vector<float> weights_;
  std::vector<float> normalizers_;
  std::vector<float> filter_scratch_;
  std::vector<float> processed_;
  std::array<float, kVocab> scratch_{};
};

TEST(DistributionPowerTest, KernelLoopReproducesTheDecoder) {
  const LogitTable target = target_table();
  for (const DraftQuality quality : {DraftQuality::well_matched, DraftQuality::poor}) {
    const LogitTable draft = draft_table(target, quality);
    for (const Mode& mode : sampling_modes()) {
      TableDraft draft_model{&draft};
      TableTarget target_model{&target};
      specdec::SpeculativeDecoder decoder(draft_model, target_model);
      KernelLoop loop(draft, target);
      for (std::size_t draft_length : {1u, 2u, 4u}) {
        specdec::GenerationConfig config = three_token_config(mode.params, draft_length);
        config.max_new_tokens = 12;
        for (std::uint64_t seed = 0; seed < 300; ++seed) {
          config.seed = seed;
          ASSERT_EQ(loop.generate(config), decoder.generate(kPrompt, config).tokens)
              << name_of(quality) << " " << mode.name << " K=" << draft_length << " seed " << seed;
        }
      }
    }
  }
}

// ---- power check: StrategyDecoder with the restated verifier, with bugs injected --------------
// (RestatedTokenVerifier and its mutants: tests/restated_token_verifier.hpp)

// The power-check case: well-matched draft, T = 1, K = 2, three tokens.
constexpr std::size_t kPowerDraftLength = 2;

// The exact law of the three tokens StrategyDecoder emits with this verifier (harness
// enumeration of the same strategies in double), as 512 cells.
std::vector<double> exact_three_token_law(Mutation mutation) {
  const LogitTable target = target_table();
  const LogitTable draft = draft_table(target, DraftQuality::well_matched);
  DoubleTableDraft draft_model{&draft};
  const specdec::ModelProposer proposer(draft_model);
  return specdec::testing::law_cells(
      specdec::testing::speculative_law(proposer, specdec::StaticDraftLength{},
                                        RestatedTokenVerifier{mutation}, DoubleTableTarget{&target},
                                        SamplingParams{}, kPrompt, kEmitted, kPowerDraftLength),
      kVocab, kEmitted);
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] - b[i]);
  return 0.5 * sum;
}

double mutant_p_value(Mutation mutation, const char* label) {
  const LogitTable target = target_table();
  const LogitTable draft = draft_table(target, DraftQuality::well_matched);
  const SamplingParams params;  // T = 1
  TableDraft draft_model{&draft};
  TableTarget target_model{&target};
  specdec::StrategyDecoder decoder(target_model, specdec::ModelProposer(draft_model),
                                   specdec::StaticDraftLength{}, RestatedTokenVerifier{mutation});
  specdec::GenerationConfig config = three_token_config(params, kPowerDraftLength);
  SampleSummary summary;
  for (std::size_t i = 0; i < kRuns; ++i) {
    config.seed = 0xbad5eed000000ULL + i;
    const specdec::GenerationResult result = decoder.generate(kPrompt, config);
    if (result.tokens.size() != kEmitted) {
      ADD_FAILURE() << label << ": run " << i << " emitted " << result.tokens.size() << " tokens";
      return 0.0;
    }
    ++summary.counts[cell_of(result.tokens)];
  }
  const std::vector<double> law = target_three_token_law(target, params);
  const GoodnessOfFit fit = chi_square_test(summary.counts, law);
  const double tv = total_variation(exact_three_token_law(mutation), law);
  std::printf(
      "[ power ] %-16s exact TV=%.3g chi2=%.1f cells=%zu p=%.3g (G-test p=%.3g) "
      "impossible=%llu\n",
      label, tv, fit.statistic, fit.cells, fit.p_value,
      specdec::testing::g_test(summary.counts, law).p_value,
      static_cast<unsigned long long>(fit.impossible));
  return fit.impossible > 0 ? 0.0 : fit.p_value;
}

TEST(DistributionPowerTest, CorrectRestatedVerifierPasses) {
  EXPECT_GT(mutant_p_value(Mutation::none, "no bug (control)"), kMinPValue);
}

TEST(DistributionPowerTest, ScalarResidualFailsTheTest) {
  EXPECT_LT(mutant_p_value(Mutation::scalar_residual, "scalar residual"), kMinPValue)
      << "the chi-square test cannot see the seed's scalar-residual bug";
}

TEST(DistributionPowerTest, WrongBonusRowFailsTheTest) {
  EXPECT_LT(mutant_p_value(Mutation::wrong_bonus_row, "wrong bonus row"), kMinPValue)
      << "the chi-square test cannot see a bonus token taken from the wrong target row";
}

// kRuns is not luck: by the harness's exact enumeration the control's law is the target's, and
// each mutant is off by a total variation that kRuns samples detect with high probability over
// all 512 cells, however the error were spread.
TEST(DistributionPowerTest, RunsSufficeForTheSmallestMutantError) {
  const LogitTable target = target_table();
  const std::vector<double> law = target_three_token_law(target, SamplingParams{});
  EXPECT_LT(total_variation(exact_three_token_law(Mutation::none), law), 1e-9);
  double smallest = 1.0;
  for (Mutation mutation : {Mutation::scalar_residual, Mutation::wrong_bonus_row}) {
    smallest = std::min(smallest, total_variation(exact_three_token_law(mutation), law));
  }
  const std::size_t needed = specdec::testing::samples_to_detect(smallest, kCells, kMinPValue);
  std::printf("[ power ] smallest mutant TV %.4g: %zu runs detect it (kRuns = %zu)\n", smallest,
              needed, kRuns);
  EXPECT_GE(kRuns, needed);
}

}  // namespace
