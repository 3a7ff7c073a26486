// Robustness of the decoders against bad input, bad configuration and misbehaving models.
//
// One test per row of the bad-input table (docs/design.md, "Errors"): each checks
//  1. the exception *type* (std::invalid_argument for bad configuration / caller input,
//     std::domain_error for bad model output, the model's own exception unchanged);
//  2. that the message starts with "specdec: " and names the bad value / what was expected;
//  3. that the decoder works afterwards: with the fault removed, the *same* decoder object
//     produces exactly the tokens (and log-probs) a freshly constructed decoder produces with
//     the same seed. "All state is per-generate call" is what makes this hold.
//
// Faults are injected by scripted models: deterministic toy models whose logits are a pure
// function of the prefix they follow, plus a switch that turns a fault on from the Nth call on.

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;

constexpr std::size_t kVocab = 16;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Scripted models
// ---------------------------------------------------------------------------------------------

constexpr std::uint64_t mix64(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t extend_hash(std::uint64_t hash, token_t token) noexcept {
  return mix64(hash ^ (0x9e3779b97f4a7c15ULL + static_cast<std::uint32_t>(token)));
}

std::uint64_t prefix_hash(std::span<const token_t> prefix) noexcept {
  std::uint64_t hash = 0x5eed;
  for (const token_t token : prefix) hash = extend_hash(hash, token);
  return hash;
}

// A value in [-2, 2) determined by (prefix hash, token, salt).
float pseudo_logit(std::uint64_t hash, std::size_t token, std::uint64_t salt) noexcept {
  const std::uint64_t bits = mix64(hash ^ mix64(token * 0x100000001b3ULL + salt));
  return static_cast<float>(bits >> 40) * 0x1.0p-24f * 4.0f - 2.0f;
}

// The "true" next-token logits after a prefix; the draft is a noisy copy of them, so drafts
// are often but not always accepted (both acceptance and rejection paths run).
float target_logit(std::uint64_t hash, std::size_t token) noexcept {
  return pseudo_logit(hash, token, 1);
}
float draft_logit(std::uint64_t hash, std::size_t token) noexcept {
  return target_logit(hash, token) + 0.8f * pseudo_logit(hash, token, 2);
}

enum class Fault {
  none,
  nan_logit,             // logit of token 3 is NaN
  positive_inf_logit,    // logit of token 5 is +inf
  all_negative_inf,      // every logit is -inf
  vocab_plus_one,        // returns V + 1 logits per row
  flat_size_off_by_one,  // target only: returns n*V + 1 floats
  one_row_too_many,      // target only (RowMajor matrix output): n + 1 rows
  one_row_too_few,       // target only (RowMajor matrix output): n - 1 rows
  throw_model_error,     // throws ScriptedModelError
  throw_non_std,         // throws NotAStdException (not derived from std::exception)
};

// Exceptions a model may throw; generate() must let them through unchanged.
struct ScriptedModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct NotAStdException {
  int code;
};

// The fault fires on every call whose 1-based index is >= from_call.
struct FaultSwitch {
  Fault fault = Fault::none;
  std::size_t from_call = 1;
  std::size_t calls = 0;
  std::size_t fired = 0;

  void arm(Fault f, std::size_t first_faulty_call = 1) {
    fault = f;
    from_call = first_faulty_call;
  }
  void disarm() { fault = Fault::none; }
  // Counts the call; returns the fault to apply to it.
  Fault next_call() {
    ++calls;
    if (fault == Fault::none || calls < from_call) return Fault::none;
    ++fired;
    return fault;
  }
};

void throw_if_requested(Fault fault, std::string_view who, std::size_t call) {
  if (fault == Fault::throw_model_error) {
    throw ScriptedModelError(std::string(who) + " model failed on call " + std::to_string(call));
  }
  if (fault == Fault::throw_non_std) throw NotAStdException{static_cast<int>(call)};
}

void corrupt_row(Fault fault, std::span<float> row) {
  switch (fault) {
    case Fault::nan_logit:
      row[3] = kNaN;
      break;
    case Fault::positive_inf_logit:
      row[5] = kInf;
      break;
    case Fault::all_negative_inf:
      std::fill(row.begin(), row.end(), -kInf);
      break;
    default:
      break;
  }
}

// Returns a view into its own buffer (valid until its next call, as the contract allows).
class ScriptedDraft {
 public:
  std::span<const float> operator()(std::span<const token_t> context) {
    const Fault fault = faults.next_call();
    throw_if_requested(fault, "draft", faults.calls);
    const std::size_t vocab = fault == Fault::vocab_plus_one ? kVocab + 1 : kVocab;
    row_.resize(vocab);
    const std::uint64_t hash = prefix_hash(context);
    for (std::size_t v = 0; v < vocab; ++v) row_[v] = draft_logit(hash, v);
    corrupt_row(fault, row_);
    return row_;
  }

  FaultSwitch faults;

 private:
  std::vector<float> row_;
};

enum class TargetOutput { flat_span, row_major_matrix };

using RowMajorMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <TargetOutput Output>
class ScriptedTarget {
 public:
  using Result = std::conditional_t<Output == TargetOutput::flat_span, std::span<const float>,
                                    Eigen::Map<const RowMajorMatrixXf>>;

  Result operator()(std::span<const token_t> context, std::size_t n) {
    const Fault fault = faults.next_call();
    throw_if_requested(fault, "target", faults.calls);
    last_n = n;
    const std::size_t vocab = fault == Fault::vocab_plus_one ? kVocab + 1 : kVocab;
    std::size_t rows = n;
    if (fault == Fault::one_row_too_many) rows = n + 1;
    if (fault == Fault::one_row_too_few) rows = n - 1;
    returned_rows = rows;

    // Row i follows the first context.size() - n + 1 + i tokens.
    values_.assign(rows * vocab + 1, 0.0f);  // +1: room for flat_size_off_by_one
    const std::size_t first_prefix = context.size() + 1 - n;
    std::uint64_t hash = prefix_hash(context.first(first_prefix));
    for (std::size_t i = 0; i < rows; ++i) {
      if (i > 0 && first_prefix + i - 1 < context.size()) {
        hash = extend_hash(hash, context[first_prefix + i - 1]);
      }
      const std::span<float> row(values_.data() + i * vocab, vocab);
      for (std::size_t v = 0; v < vocab; ++v) row[v] = target_logit(hash, v);
      corrupt_row(fault, row);
    }
    const std::size_t size = rows * vocab + (fault == Fault::flat_size_off_by_one ? 1 : 0);
    returned_size = size;
    if constexpr (Output == TargetOutput::flat_span) {
      return {values_.data(), size};
    } else {
      return Result(values_.data(), static_cast<Eigen::Index>(rows),
                    static_cast<Eigen::Index>(vocab));
    }
  }

  FaultSwitch faults;
  std::size_t last_n = 0;         // n of the last call
  std::size_t returned_rows = 0;  // rows actually returned by the last call
  std::size_t returned_size = 0;  // floats actually returned by the last call

 private:
  std::vector<float> values_;
};

using SpanTarget = ScriptedTarget<TargetOutput::flat_span>;
using MatrixTarget = ScriptedTarget<TargetOutput::row_major_matrix>;

// ---------------------------------------------------------------------------------------------
// Scenario: a decoder over scripted models, a bad generate() and a recovery check
// ---------------------------------------------------------------------------------------------

specdec::GenerationConfig valid_config() {
  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 40;
  config.seed = 1234;
  config.sampling.temperature = 1.0f;
  return config;
}

// A second valid config for the recovery checks, exercising the filter and processor paths.
specdec::GenerationConfig valid_filtered_config() {
  specdec::GenerationConfig config = valid_config();
  config.draft_length = 3;
  config.seed = 99;
  config.sampling.temperature = 0.7f;
  config.sampling.top_k = 10;
  config.sampling.top_p = 0.9f;
  config.sampling.min_p = 0.01f;
  config.sampling.logits_processor = [](std::span<const token_t> context, std::span<float> logits) {
    logits[static_cast<std::size_t>(context.back())] -= 1.0f;  // repetition penalty
  };
  return config;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Checks the message contract: "specdec: " prefix and every key substring (case-insensitive,
// so "NaN"/"nan" and "Inf"/"inf" both count).
::testing::AssertionResult message_names(std::string_view message,
                                         std::initializer_list<std::string_view> keys) {
  if (!message.starts_with("specdec: ")) {
    return ::testing::AssertionFailure()
           << "message does not start with \"specdec: \": \"" << message << "\"";
  }
  const std::string haystack = lowercase(message);
  for (const std::string_view key : keys) {
    if (haystack.find(lowercase(key)) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" does not mention \"" << key << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

template <class Exception, class Generate>
::testing::AssertionResult throws_with_message(Generate&& generate,
                                               std::initializer_list<std::string_view> keys) {
  try {
    generate();
  } catch (const Exception& error) {
    if (typeid(error) != typeid(Exception)) {
      return ::testing::AssertionFailure()
             << "threw " << typeid(error).name() << ", a subclass of the expected "
             << typeid(Exception).name() << ": " << error.what();
    }
    return message_names(error.what(), keys);
  } catch (const std::exception& error) {
    return ::testing::AssertionFailure() << "threw " << typeid(error).name() << " instead of "
                                         << typeid(Exception).name() << ": " << error.what();
  } catch (...) {
    return ::testing::AssertionFailure()
           << "threw a non-std exception instead of " << typeid(Exception).name();
  }
  return ::testing::AssertionFailure() << "no exception; expected " << typeid(Exception).name();
}

::testing::AssertionResult same_output(const specdec::GenerationResult& actual,
                                       const specdec::GenerationResult& expected) {
  if (expected.tokens.empty()) {
    return ::testing::AssertionFailure() << "the reference generation emitted no tokens";
  }
  if (actual.tokens != expected.tokens) {
    return ::testing::AssertionFailure() << "tokens differ from a fresh decoder's: got "
                                         << ::testing::PrintToString(actual.tokens) << ", expected "
                                         << ::testing::PrintToString(expected.tokens);
  }
  if (actual.logprobs != expected.logprobs) {
    return ::testing::AssertionFailure()
           << "log-probs differ from a fresh decoder's: got "
           << ::testing::PrintToString(actual.logprobs) << ", expected "
           << ::testing::PrintToString(expected.logprobs);
  }
  if (actual.finish_reason != expected.finish_reason) {
    return ::testing::AssertionFailure() << "finish reason differs from a fresh decoder's";
  }
  return ::testing::AssertionSuccess();
}

template <class Target = SpanTarget>
struct SpeculativeScenario {
  ScriptedDraft draft;
  Target target;
  specdec::SpeculativeDecoder<ScriptedDraft, Target> decoder{draft, target};
  specdec::GenerationConfig config = valid_config();
  std::vector<token_t> prompt = {1, 2, 3};

  template <class Exception>
  ::testing::AssertionResult fails_with(std::initializer_list<std::string_view> keys) {
    return throws_with_message<Exception>([&] { (void)decoder.generate(prompt, config); }, keys);
  }

  // With every fault removed, the decoder that just threw must behave exactly like a new one.
  ::testing::AssertionResult recovers() {
    draft.faults.disarm();
    target.faults.disarm();
    const std::vector<token_t> good_prompt = {1, 2, 3};
    for (const specdec::GenerationConfig& good : {valid_config(), valid_filtered_config()}) {
      const specdec::GenerationResult after = decoder.generate(good_prompt, good);
      ScriptedDraft fresh_draft;
      Target fresh_target;
      specdec::SpeculativeDecoder<ScriptedDraft, Target> fresh(fresh_draft, fresh_target);
      const ::testing::AssertionResult same = same_output(after, fresh.generate(good_prompt, good));
      if (!same) return same;
    }
    return ::testing::AssertionSuccess();
  }
};

template <class Target = SpanTarget>
struct AutoregressiveScenario {
  Target target;
  specdec::AutoregressiveDecoder<Target> decoder{target};
  specdec::GenerationConfig config = valid_config();
  std::vector<token_t> prompt = {1, 2, 3};

  template <class Exception>
  ::testing::AssertionResult fails_with(std::initializer_list<std::string_view> keys) {
    return throws_with_message<Exception>([&] { (void)decoder.generate(prompt, config); }, keys);
  }

  ::testing::AssertionResult recovers() {
    target.faults.disarm();
    const std::vector<token_t> good_prompt = {1, 2, 3};
    for (const specdec::GenerationConfig& good : {valid_config(), valid_filtered_config()}) {
      const specdec::GenerationResult after = decoder.generate(good_prompt, good);
      Target fresh_target;
      specdec::AutoregressiveDecoder<Target> fresh(fresh_target);
      const ::testing::AssertionResult same = same_output(after, fresh.generate(good_prompt, good));
      if (!same) return same;
    }
    return ::testing::AssertionSuccess();
  }
};

// Temperatures the model-output checks run at: sampling (1) and greedy (0) take different
// paths through the decoder (greedy never normalises a row), both must validate the rows.
class ModelOutputErrors : public ::testing::TestWithParam<float> {
 protected:
  template <class Scenario>
  void configure(Scenario& scenario) const {
    scenario.config.sampling.temperature = GetParam();
  }
};

INSTANTIATE_TEST_SUITE_P(Temperatures, ModelOutputErrors, ::testing::Values(1.0f, 0.0f),
                         [](const ::testing::TestParamInfo<float>& info) {
                           return info.param == 0.0f ? std::string("greedy")
                                                     : std::string("sampling");
                         });

// ---------------------------------------------------------------------------------------------
// Vocabulary size
// ---------------------------------------------------------------------------------------------

TEST_P(ModelOutputErrors, DraftAndTargetVocabularySizesDiffer) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::vocab_plus_one);  // draft V = 17, target V = 16
  EXPECT_TRUE(s.fails_with<std::domain_error>({"17", "16", "vocabulary size"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, TargetVocabularyDiffersFromDraft) {
  SpeculativeScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::vocab_plus_one);  // target V = 17, draft V = 16
  EXPECT_TRUE(s.fails_with<std::domain_error>({"17", "16", "vocabulary size"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, DraftVocabularyChangesBetweenCalls) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::vocab_plus_one, 2);  // second draft call of the first round
  EXPECT_TRUE(s.fails_with<std::domain_error>({"17", "16", "vocabulary size"}));
  EXPECT_GE(s.draft.faults.calls, 2u);
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, TargetVocabularyChangesBetweenCalls) {
  SpeculativeScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::vocab_plus_one, 2);  // second round
  EXPECT_TRUE(s.fails_with<std::domain_error>({"17", "16", "vocabulary size"}));
  EXPECT_EQ(s.target.faults.calls, 2u);
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveTargetVocabularyChangesBetweenCalls) {
  AutoregressiveScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::vocab_plus_one, 3);
  EXPECT_TRUE(s.fails_with<std::domain_error>({"17", "16", "vocabulary size"}));
  EXPECT_EQ(s.target.faults.calls, 3u);
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// Row count / flat size of the target's answer
// ---------------------------------------------------------------------------------------------

TEST_P(ModelOutputErrors, TargetReturnsOneRowTooMany) {
  SpeculativeScenario<MatrixTarget> s;
  configure(s);
  s.target.faults.arm(Fault::one_row_too_many);
  // First round: K_eff = 4 drafts, so the target is asked for n = 5 rows and returns 6.
  EXPECT_TRUE(s.fails_with<std::domain_error>({"6 rows", "expected 5"}));
  EXPECT_EQ(s.target.last_n, 5u);
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, TargetReturnsOneRowTooFewInALaterRound) {
  SpeculativeScenario<MatrixTarget> s;
  configure(s);
  s.target.faults.arm(Fault::one_row_too_few, 2);
  EXPECT_TRUE(s.fails_with<std::domain_error>({"4 rows", "expected 5"}));
  EXPECT_EQ(s.target.last_n, 5u);
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, TargetFlatSizeNotDivisibleByRowCount) {
  SpeculativeScenario<SpanTarget> s;
  configure(s);
  s.target.faults.arm(Fault::flat_size_off_by_one);
  // n = 5 rows of V = 16 plus one float: 81 floats, not a multiple of 5.
  EXPECT_TRUE(s.fails_with<std::domain_error>({"81 logits", "5 rows", "multiple of 5"}));
  EXPECT_EQ(s.target.returned_size, 81u);
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveTargetReturnsNoRows) {
  AutoregressiveScenario<MatrixTarget> s;
  configure(s);
  s.target.faults.arm(Fault::one_row_too_few);  // asked for 1 row, returns 0
  EXPECT_TRUE(s.fails_with<std::domain_error>({"0 rows", "expected 1"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveTargetReturnsTwoRows) {
  AutoregressiveScenario<MatrixTarget> s;
  configure(s);
  s.target.faults.arm(Fault::one_row_too_many, 2);
  EXPECT_TRUE(s.fails_with<std::domain_error>({"2 rows", "expected 1"}));
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// Non-finite logits (-inf is a legal "banned token"; NaN and +inf are not)
// ---------------------------------------------------------------------------------------------

TEST_P(ModelOutputErrors, NaNLogitInDraftRow) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::nan_logit);
  // The first draft call follows the 3-token prompt.
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"draft model logits for position 3 (context length 3): logits row contains nan",
       "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, NaNLogitInDraftRowOfALaterRound) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::nan_logit, 7);
  EXPECT_TRUE(
      s.fails_with<std::domain_error>({"draft model logits for position ", "(context length ",
                                       "logits row contains nan", "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, NaNLogitInTargetRows) {
  SpeculativeScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::nan_logit);
  // K = 4: the first target call scores 5 rows; row 0 follows the prompt.
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model row 0 of 5 (position 3, context length 3): logits row contains nan",
       "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, PositiveInfLogitInDraftRow) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::positive_inf_logit);
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"draft model logits for position 3 (context length 3): logits row contains +inf",
       "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, PositiveInfLogitInTargetRows) {
  SpeculativeScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::positive_inf_logit, 2);
  EXPECT_TRUE(
      s.fails_with<std::domain_error>({"target model row 0 of ", "(position ", ", context length ",
                                       "): logits row contains +inf", "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveNaNLogit) {
  AutoregressiveScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::nan_logit, 2);
  // Call 2 follows the prompt and one emitted token.
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model logits for position 4 (context length 4): logits row contains nan",
       "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressivePositiveInfLogit) {
  AutoregressiveScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::positive_inf_logit);
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model logits for position 3 (context length 3): logits row contains +inf",
       "expected finite"}));
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// Rows in which no token survives
// ---------------------------------------------------------------------------------------------

TEST_P(ModelOutputErrors, DraftRowAllNegativeInfinity) {
  SpeculativeScenario<> s;
  configure(s);
  s.draft.faults.arm(Fault::all_negative_inf);
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"draft model logits for position 3 (context length 3): every logit in the row is -inf",
       "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, TargetRowAllNegativeInfinity) {
  SpeculativeScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::all_negative_inf);
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model row 0 of 5 (position 3, context length 3): every logit in the row is -inf",
       "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, LogitsProcessorBansEveryToken) {
  SpeculativeScenario<> s;
  configure(s);
  s.config.sampling.logits_processor = [](std::span<const token_t>, std::span<float> logits) {
    std::fill(logits.begin(), logits.end(), -kInf);
  };
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"draft model logits for position 3 (context length 3): every logit in the row is -inf",
       "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, LogitsProcessorBansEveryTokenInALaterRound) {
  SpeculativeScenario<> s;
  configure(s);
  // Fine for the prompt and the first few tokens, then nothing is allowed any more.
  s.config.sampling.logits_processor = [](std::span<const token_t> context,
                                          std::span<float> logits) {
    if (context.size() >= 9) std::fill(logits.begin(), logits.end(), -kInf);
  };
  // Whichever model's row reaches context length 9 first, the message names it.
  EXPECT_TRUE(s.fails_with<std::domain_error>({"model ", "position 9",
                                               "context length 9): every logit in the row is -inf",
                                               "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveLogitsProcessorBansEveryToken) {
  AutoregressiveScenario<> s;
  configure(s);
  s.config.sampling.logits_processor = [](std::span<const token_t>, std::span<float> logits) {
    std::fill(logits.begin(), logits.end(), -kInf);
  };
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model logits for position 3 (context length 3): every logit in the row is -inf",
       "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

TEST_P(ModelOutputErrors, AutoregressiveTargetRowAllNegativeInfinity) {
  AutoregressiveScenario<> s;
  configure(s);
  s.target.faults.arm(Fault::all_negative_inf, 2);
  EXPECT_TRUE(s.fails_with<std::domain_error>(
      {"target model logits for position 4 (context length 4): every logit in the row is -inf",
       "expected at least one finite"}));
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// The verifier's final draw (bonus or correction) names its target row
// ---------------------------------------------------------------------------------------------

// Token-level-shaped test double whose bonus draw fails the way a sample from a row without
// any kept token does ("cannot sample: every weight is 0"), while `broken`. Accepts every
// drafted token (not lossless: only the error path matters here).
struct BonusDrawFailingVerifier {
  bool broken = true;

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    const std::size_t n = proposal.size();
    for (std::size_t j = 0; j < n; ++j) (void)target.distribution(j);
    specdec::TokenDistribution<Scalar> bonus = target.distribution(n);
    if (broken) bonus.threshold = std::numeric_limits<Scalar>::infinity();  // nothing kept
    return {n, coins.draw(specdec::DistributionLaw<Scalar>{bonus, target.scratch()}), true};
  }
};

TEST(FinalDrawErrors, BonusDrawNamesTheTargetRow) {
  using Decoder = specdec::StrategyDecoder<SpanTarget, specdec::ModelProposer<ScriptedDraft>,
                                           specdec::StaticDraftLength, BonusDrawFailingVerifier>;
  ScriptedDraft draft;
  SpanTarget target;
  Decoder decoder(target, specdec::ModelProposer<ScriptedDraft>(draft));
  const std::vector<token_t> prompt = {1, 2, 3};
  // K = 4 after a 3-token prompt: the bonus row is row 4 of 5, at position 7.
  EXPECT_TRUE(throws_with_message<std::domain_error>(
      [&] { (void)decoder.generate(prompt, valid_config()); },
      {"specdec: target model row 4 of 5 (position 7, context length 7): cannot sample: every "
       "weight is 0"}));
  // Usable afterwards: the same decoder, repaired, matches a fresh one.
  decoder.verifier().broken = false;
  ScriptedDraft fresh_draft;
  SpanTarget fresh_target;
  Decoder fresh(fresh_target, specdec::ModelProposer<ScriptedDraft>(fresh_draft));
  fresh.verifier().broken = false;
  EXPECT_TRUE(same_output(decoder.generate(prompt, valid_config()),
                          fresh.generate(prompt, valid_config())));
}

// ---------------------------------------------------------------------------------------------
// The models' context limit (GenerationConfig::max_context)
// ---------------------------------------------------------------------------------------------

// Models that throw if called with a context longer than `limit`, and record the longest.
struct ContextLimitExceeded : std::logic_error {
  using std::logic_error::logic_error;
};

struct LimitedDraft : ScriptedDraft {
  std::size_t limit = SIZE_MAX;
  std::size_t longest = 0;
  std::span<const float> operator()(std::span<const token_t> context) {
    if (context.size() > limit) throw ContextLimitExceeded("draft called past its context limit");
    longest = std::max(longest, context.size());
    return ScriptedDraft::operator()(context);
  }
};

struct LimitedTarget : SpanTarget {
  std::size_t limit = SIZE_MAX;
  std::size_t longest = 0;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    if (context.size() > limit) throw ContextLimitExceeded("target called past its context limit");
    longest = std::max(longest, context.size());
    return SpanTarget::operator()(context, n);
  }
};

TEST(ContextLimit, SpeculativeDecoderNeverExceedsIt) {
  const std::vector<token_t> prompt = {1, 2, 3};
  for (const specdec::VerifierKind verifier :
       {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
    for (const float temperature : {1.0f, 0.0f}) {
      for (const std::size_t max_context : {std::size_t{3}, std::size_t{4}, std::size_t{20}}) {
        SCOPED_TRACE(::testing::Message()
                     << "T = " << temperature << ", max_context = " << max_context
                     << ", block = " << (verifier == specdec::VerifierKind::block));
        LimitedDraft draft;
        LimitedTarget target;
        draft.limit = target.limit = max_context;
        specdec::SpeculativeDecoder decoder(draft, target);
        specdec::GenerationConfig config = valid_config();
        config.sampling.temperature = temperature;
        config.verifier = verifier;
        config.max_new_tokens = 100;
        config.max_context = max_context;
        std::vector<token_t> streamed;
        const specdec::GenerationResult result =
            decoder.generate(prompt, config, [&](std::span<const token_t> chunk) {
              streamed.insert(streamed.end(), chunk.begin(), chunk.end());
              return true;
            });
        EXPECT_EQ(result.finish_reason, specdec::FinishReason::context_limit);
        EXPECT_EQ(result.tokens.size(), max_context + 1 - prompt.size());
        EXPECT_EQ(streamed, result.tokens);
        EXPECT_EQ(target.longest, max_context);  // the limit is used, not just respected
        EXPECT_LT(draft.longest, max_context);
        if (temperature == 0.0f) {  // greedy: the unlimited output, cut
          ScriptedDraft free_draft;
          SpanTarget free_target;
          specdec::SpeculativeDecoder free(free_draft, free_target);
          config.max_context = 0;
          const auto unlimited = free.generate(prompt, config);
          EXPECT_EQ(result.tokens,
                    std::vector<token_t>(unlimited.tokens.begin(),
                                         unlimited.tokens.begin() +
                                             static_cast<std::ptrdiff_t>(result.tokens.size())));
        }
      }
    }
  }
}

TEST(ContextLimit, AutoregressiveDecoderNeverExceedsIt) {
  const std::vector<token_t> prompt = {1, 2, 3};
  for (const float temperature : {1.0f, 0.0f}) {
    SCOPED_TRACE(temperature);
    LimitedTarget target;
    target.limit = 20;
    specdec::AutoregressiveDecoder decoder(target);
    specdec::GenerationConfig config = valid_config();
    config.sampling.temperature = temperature;
    config.max_new_tokens = 100;
    config.max_context = 20;
    const specdec::GenerationResult result = decoder.generate(prompt, config);
    EXPECT_EQ(result.finish_reason, specdec::FinishReason::context_limit);
    ASSERT_EQ(result.tokens.size(), 18u);
    EXPECT_EQ(target.longest, 20u);
    SpanTarget free_target;
    specdec::AutoregressiveDecoder free(free_target);
    config.max_context = 0;
    const auto unlimited = free.generate(prompt, config);  // one coin per token: same prefix
    EXPECT_EQ(result.tokens,
              std::vector<token_t>(unlimited.tokens.begin(), unlimited.tokens.begin() + 18));
  }
}

TEST(ContextLimit, TheBudgetTakesPrecedence) {
  const std::vector<token_t> prompt = {1, 2, 3};
  LimitedDraft draft;
  LimitedTarget target;
  draft.limit = target.limit = 20;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config = valid_config();
  config.max_context = 20;
  config.max_new_tokens = 18;  // ends exactly where the context does
  EXPECT_EQ(decoder.generate(prompt, config).finish_reason, specdec::FinishReason::length);
  EXPECT_EQ(plain.generate(prompt, config).finish_reason, specdec::FinishReason::length);
  config.max_new_tokens = 17;
  EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), 17u);
}

TEST(ContextLimit, PromptLongerThanTheLimit) {
  SpeculativeScenario<> s;
  s.config.max_context = 2;  // the prompt has 3 tokens
  EXPECT_TRUE(s.fails_with<std::invalid_argument>({"prompt", "3 tokens", "max_context = 2"}));
  EXPECT_EQ(s.draft.faults.calls + s.target.faults.calls, 0u);
  EXPECT_TRUE(s.recovers());
  AutoregressiveScenario<> a;
  a.config.max_context = 2;
  EXPECT_TRUE(a.fails_with<std::invalid_argument>({"prompt", "3 tokens", "max_context = 2"}));
  EXPECT_EQ(a.target.faults.calls, 0u);
  EXPECT_TRUE(a.recovers());
}

// ---------------------------------------------------------------------------------------------
// Bad configuration and caller input: rejected up front, before any model call
// ---------------------------------------------------------------------------------------------

struct BadConfig {
  const char* name;
  void (*apply)(specdec::GenerationConfig&);
  std::vector<std::string> keys;  // what the message must mention (field and value)
  bool applies_to_autoregressive = true;
};

void PrintTo(const BadConfig& bad, std::ostream* os) { *os << bad.name; }

const BadConfig kBadConfigs[] = {
    {"DraftLengthZero",
     [](auto& c) { c.draft_length = 0; },
     {"draft_length", "0", "expected"},
     false},
    {"DraftLengthAboveBound",
     [](auto& c) {
       c.draft_length = 5000;
       c.max_new_tokens = 10000;
     },
     {"draft_length", "5000", "4096"},
     false},
    {"TemperatureNegative",
     [](auto& c) { c.sampling.temperature = -0.5f; },
     {"temperature", "-0.5", "expected"}},
    {"TemperatureNaN",
     [](auto& c) { c.sampling.temperature = kNaN; },
     {"temperature", "nan", "expected"}},
    {"TemperatureBelowMinimum",
     [](auto& c) { c.sampling.temperature = 1e-35f; },
     {"temperature", "1e-35", "1e-30"}},
    {"TemperatureReciprocalOverflows",
     [](auto& c) { c.sampling.temperature = 1e-40f; },
     {"temperature", "e-41", "1e-30"}},
    {"TopPZero", [](auto& c) { c.sampling.top_p = 0.0f; }, {"top_p", "0", "expected"}},
    {"TopPNegative", [](auto& c) { c.sampling.top_p = -0.1f; }, {"top_p", "-0.1", "expected"}},
    {"TopPAboveOne", [](auto& c) { c.sampling.top_p = 1.5f; }, {"top_p", "1.5", "expected"}},
    {"TopPNaN", [](auto& c) { c.sampling.top_p = kNaN; }, {"top_p", "nan", "expected"}},
    {"MinPNegative", [](auto& c) { c.sampling.min_p = -0.1f; }, {"min_p", "-0.1", "expected"}},
    {"MinPOne", [](auto& c) { c.sampling.min_p = 1.0f; }, {"min_p", "1", "expected"}},
    {"MinPNaN", [](auto& c) { c.sampling.min_p = kNaN; }, {"min_p", "nan", "expected"}},
    {"TopKNegative", [](auto& c) { c.sampling.top_k = -1; }, {"top_k", "-1", "expected"}},
    // An enum value cast from a config file or a command line (the autoregressive decoder
    // reads neither field).
    {"VerifierKindOutOfRange",
     [](auto& c) { c.verifier = static_cast<specdec::VerifierKind>(7); },
     {"verifier = 7", "token (0) or block (1)", "expected"},
     false},
    {"DraftLengthKindOutOfRange",
     [](auto& c) { c.draft_length_policy.kind = static_cast<specdec::DraftLengthKind>(-1); },
     {"draft_length_policy.kind = -1", "goodput (3)", "expected"},
     false},
};

class ConfigErrors : public ::testing::TestWithParam<BadConfig> {};

INSTANTIATE_TEST_SUITE_P(Table, ConfigErrors, ::testing::ValuesIn(kBadConfigs),
                         [](const ::testing::TestParamInfo<BadConfig>& info) {
                           return std::string(info.param.name);
                         });

template <class Scenario>
::testing::AssertionResult rejects(Scenario& s, const std::vector<std::string>& keys) {
  try {
    (void)s.decoder.generate(s.prompt, s.config);
  } catch (const std::invalid_argument& error) {
    const std::string_view message = error.what();
    if (!message.starts_with("specdec: ")) {
      return ::testing::AssertionFailure() << "message lacks the \"specdec: \" prefix: " << message;
    }
    for (const std::string& key : keys) {
      if (lowercase(message).find(lowercase(key)) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << message << "\" does not mention \"" << key << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& error) {
    return ::testing::AssertionFailure() << "threw " << typeid(error).name()
                                         << " instead of std::invalid_argument: " << error.what();
  }
  return ::testing::AssertionFailure() << "accepted the bad configuration";
}

TEST_P(ConfigErrors, SpeculativeDecoderRejectsBeforeCallingAModel) {
  SpeculativeScenario<> s;
  GetParam().apply(s.config);
  EXPECT_TRUE(rejects(s, GetParam().keys));
  EXPECT_EQ(s.draft.faults.calls, 0u) << "the draft model ran before the config was checked";
  EXPECT_EQ(s.target.faults.calls, 0u) << "the target model ran before the config was checked";
  EXPECT_TRUE(s.recovers());
}

TEST_P(ConfigErrors, AutoregressiveDecoderRejectsBeforeCallingTheModel) {
  AutoregressiveScenario<> s;
  GetParam().apply(s.config);
  if (!GetParam().applies_to_autoregressive) {
    // draft_length is ignored by the autoregressive decoder: the config is valid for it.
    EXPECT_NO_THROW((void)s.decoder.generate(s.prompt, s.config));
    return;
  }
  EXPECT_TRUE(rejects(s, GetParam().keys));
  EXPECT_EQ(s.target.faults.calls, 0u) << "the target model ran before the config was checked";
  EXPECT_TRUE(s.recovers());
}

TEST_P(ConfigErrors, ValidateNamesTheField) {
  specdec::GenerationConfig config = valid_config();
  GetParam().apply(config);
  const std::vector<std::string>& keys = GetParam().keys;
  EXPECT_TRUE(throws_with_message<std::invalid_argument>([&] { config.validate(); },
                                                         {keys[0], keys[1], keys[2]}));
  if (GetParam().applies_to_autoregressive) {  // a SamplingParams field
    EXPECT_TRUE(throws_with_message<std::invalid_argument>([&] { config.sampling.validate(); },
                                                           {keys[0], keys[1], keys[2]}));
  }
}

// The smallest usable temperature works through both decoders: with logits this far apart it
// is a point mass at the argmax, so the tokens are greedy decoding's. The processor moves each
// row's max to 0 (exactly: the logits are multiples of 2^-22 in [-2, 2)), so the exponents
// are x / T on every build; with FMA exponents a max of 2 at T = 1e-30 is reported as a
// temperature too small for the logits (sampling_test TemperatureBoundary).
TEST(InputErrors, SmallestTemperatureSamplesTheArgmax) {
  const auto max_to_zero = [](std::span<const token_t>, std::span<float> logits) {
    const float max = *std::max_element(logits.begin(), logits.end());
    for (float& x : logits) x -= max;
  };
  SpeculativeScenario<> s;
  s.config.sampling.temperature = specdec::SamplingParams::kMinTemperature;
  s.config.sampling.logits_processor = max_to_zero;
  const specdec::GenerationResult tiny = s.decoder.generate(s.prompt, s.config);
  AutoregressiveScenario<> a;
  a.config.sampling.temperature = specdec::SamplingParams::kMinTemperature;
  a.config.sampling.logits_processor = max_to_zero;
  const specdec::GenerationResult tiny_plain = a.decoder.generate(a.prompt, a.config);
  a.config.sampling.temperature = 0.0f;
  const specdec::GenerationResult greedy = a.decoder.generate(a.prompt, a.config);
  EXPECT_EQ(tiny.tokens, greedy.tokens);
  EXPECT_EQ(tiny_plain.tokens, greedy.tokens);
  EXPECT_TRUE(s.recovers());
}

// Buffers are sized by the draft length a round can use, min(K, max_new_tokens - 1), not by K:
// a huge K with a small budget costs O(budget) (K = 1e9 used to reserve K-sized statistics,
// coins and context: gigabytes, or std::bad_alloc).
TEST(InputErrors, HugeDraftLengthWithASmallBudgetIsSizedByTheBudget) {
  for (const std::size_t k : {std::size_t{1000}, std::size_t{1000000000}, SIZE_MAX}) {
    SCOPED_TRACE(k);
    SpeculativeScenario<> s;
    s.config.draft_length = k;
    s.config.max_new_tokens = 4;
    const specdec::GenerationResult result = s.decoder.generate(s.prompt, s.config);
    EXPECT_EQ(result.tokens.size(), 4u);
    EXPECT_EQ(result.stats.drafted_at.size(), 3u);
    EXPECT_EQ(result.stats.accepted_at.size(), 3u);
    EXPECT_TRUE(s.recovers());
  }
  // The bound applies to the usable length: K = 5000 with a budget of 100 drafts at most 99.
  SpeculativeScenario<> s;
  s.config.draft_length = 5000;
  s.config.max_new_tokens = 100;
  EXPECT_NO_THROW(s.config.validate());
  EXPECT_EQ(s.decoder.generate(s.prompt, s.config).stats.drafted_at.size(), 99u);
  s.config.draft_length = specdec::GenerationConfig::kMaxDraftLength;
  s.config.max_new_tokens = SIZE_MAX;
  EXPECT_NO_THROW(s.config.validate());
  s.config.draft_length += 1;
  EXPECT_THROW(s.config.validate(), std::invalid_argument);
}

// Prompt token ids: negative ones are rejected before any model call; ids >= V as soon as V is
// known (the first model call), once per generate().
TEST(InputErrors, NegativePromptToken) {
  SpeculativeScenario<> s;
  s.prompt = {1, -1, 3};
  EXPECT_TRUE(s.fails_with<std::invalid_argument>({"prompt token -1 at index 1", "expected"}));
  EXPECT_EQ(s.draft.faults.calls + s.target.faults.calls, 0u);
  EXPECT_TRUE(s.recovers());
  AutoregressiveScenario<> a;
  a.prompt = {-7, 1, 3};
  EXPECT_TRUE(a.fails_with<std::invalid_argument>({"prompt token -7 at index 0", "expected"}));
  EXPECT_EQ(a.target.faults.calls, 0u);
  EXPECT_TRUE(a.recovers());
}

TEST(InputErrors, PromptTokenNotInTheVocabulary) {
  for (const float temperature : {1.0f, 0.0f}) {
    SCOPED_TRACE(temperature);
    SpeculativeScenario<> s;
    s.config.sampling.temperature = temperature;
    s.prompt = {1, 2, 16, 3};
    EXPECT_TRUE(
        s.fails_with<std::invalid_argument>({"prompt token 16 at index 2", "[0, 16)", "V = 16"}));
    EXPECT_EQ(s.target.faults.calls, 0u);  // caught after the first draft call
    EXPECT_TRUE(s.recovers());
    AutoregressiveScenario<> a;
    a.config.sampling.temperature = temperature;
    a.prompt = {1000, 2};
    EXPECT_TRUE(
        a.fails_with<std::invalid_argument>({"prompt token 1000 at index 0", "[0, 16)", "V = 16"}));
    EXPECT_EQ(a.target.faults.calls, 1u);
    EXPECT_TRUE(a.recovers());
  }
}

TEST(InputErrors, EmptyPromptSpeculative) {
  SpeculativeScenario<> s;
  s.prompt.clear();
  EXPECT_TRUE(
      s.fails_with<std::invalid_argument>({"prompt", "empty", "expected at least one token"}));
  EXPECT_EQ(s.draft.faults.calls + s.target.faults.calls, 0u);
  EXPECT_TRUE(s.recovers());
}

TEST(InputErrors, EmptyPromptAutoregressive) {
  AutoregressiveScenario<> s;
  s.prompt.clear();
  EXPECT_TRUE(
      s.fails_with<std::invalid_argument>({"prompt", "empty", "expected at least one token"}));
  EXPECT_EQ(s.target.faults.calls, 0u);
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// Model exceptions propagate unchanged (same type, same message), first round and later
// ---------------------------------------------------------------------------------------------

struct ModelThrowCase {
  const char* name;
  bool in_draft;          // which model throws
  std::size_t from_call;  // 1 = first round; later calls = a later round
};

void PrintTo(const ModelThrowCase& c, std::ostream* os) { *os << c.name; }

// With K = 4 and a 40-token budget, draft calls 1-4 are round 1 and call 7 is in round 2;
// target call 1 is round 1 and call 3 is round 3.
const ModelThrowCase kModelThrowCases[] = {
    {"DraftFirstRound", true, 1},
    {"DraftLaterRound", true, 7},
    {"TargetFirstRound", false, 1},
    {"TargetLaterRound", false, 3},
};

class ModelExceptions : public ::testing::TestWithParam<ModelThrowCase> {};

INSTANTIATE_TEST_SUITE_P(Table, ModelExceptions, ::testing::ValuesIn(kModelThrowCases),
                         [](const ::testing::TestParamInfo<ModelThrowCase>& info) {
                           return std::string(info.param.name);
                         });

TEST_P(ModelExceptions, StdExceptionPropagatesUnchanged) {
  const ModelThrowCase& c = GetParam();
  for (const float temperature : {1.0f, 0.0f}) {
    SCOPED_TRACE(temperature == 0.0f ? "greedy" : "sampling");
    SpeculativeScenario<> s;
    s.config.sampling.temperature = temperature;
    FaultSwitch& faults = c.in_draft ? s.draft.faults : s.target.faults;
    faults.arm(Fault::throw_model_error, c.from_call);
    const std::string expected_message = std::string(c.in_draft ? "draft" : "target") +
                                         " model failed on call " + std::to_string(c.from_call);
    try {
      (void)s.decoder.generate(s.prompt, s.config);
      ADD_FAILURE() << "no exception";
    } catch (const ScriptedModelError& error) {
      EXPECT_EQ(typeid(error), typeid(ScriptedModelError));
      EXPECT_EQ(std::string(error.what()), expected_message);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "the model's exception was replaced by " << typeid(error).name() << ": "
                    << error.what();
    }
    EXPECT_EQ(faults.calls, c.from_call);
    EXPECT_EQ(faults.fired, 1u);
    EXPECT_TRUE(s.recovers());
  }
}

TEST_P(ModelExceptions, NonStdExceptionPropagatesUnchanged) {
  const ModelThrowCase& c = GetParam();
  SpeculativeScenario<> s;
  FaultSwitch& faults = c.in_draft ? s.draft.faults : s.target.faults;
  faults.arm(Fault::throw_non_std, c.from_call);
  try {
    (void)s.decoder.generate(s.prompt, s.config);
    ADD_FAILURE() << "no exception";
  } catch (const NotAStdException& error) {
    EXPECT_EQ(error.code, static_cast<int>(c.from_call));
  } catch (...) {
    ADD_FAILURE() << "the model's exception was replaced by another one";
  }
  EXPECT_TRUE(s.recovers());
}

TEST(AutoregressiveModelExceptions, TargetExceptionPropagatesUnchanged) {
  for (const std::size_t from_call : {std::size_t{1}, std::size_t{5}}) {
    SCOPED_TRACE(from_call);
    AutoregressiveScenario<> s;
    s.target.faults.arm(Fault::throw_model_error, from_call);
    try {
      (void)s.decoder.generate(s.prompt, s.config);
      ADD_FAILURE() << "no exception";
    } catch (const ScriptedModelError& error) {
      EXPECT_EQ(std::string(error.what()),
                "target model failed on call " + std::to_string(from_call));
    } catch (const std::exception& error) {
      ADD_FAILURE() << "the model's exception was replaced by " << typeid(error).name() << ": "
                    << error.what();
    }
    EXPECT_TRUE(s.recovers());
  }
}

// The other user callables (logits processor, chunk callback) get the same treatment.
TEST(UserCallbackExceptions, LogitsProcessorExceptionPropagatesUnchanged) {
  SpeculativeScenario<> s;
  std::size_t calls = 0;
  s.config.sampling.logits_processor = [&calls](std::span<const token_t>, std::span<float>) {
    if (++calls == 9) throw ScriptedModelError("processor failed on call 9");
  };
  try {
    (void)s.decoder.generate(s.prompt, s.config);
    ADD_FAILURE() << "no exception";
  } catch (const ScriptedModelError& error) {
    EXPECT_EQ(std::string(error.what()), "processor failed on call 9");
  } catch (const std::exception& error) {
    ADD_FAILURE() << "replaced by " << typeid(error).name() << ": " << error.what();
  }
  EXPECT_TRUE(s.recovers());
}

TEST(UserCallbackExceptions, ChunkCallbackExceptionPropagatesUnchanged) {
  SpeculativeScenario<> s;
  std::size_t chunks = 0;
  try {
    (void)s.decoder.generate(s.prompt, s.config, [&chunks](std::span<const token_t>) -> bool {
      if (++chunks == 2) throw ScriptedModelError("callback failed on chunk 2");
      return true;
    });
    ADD_FAILURE() << "no exception";
  } catch (const ScriptedModelError& error) {
    EXPECT_EQ(std::string(error.what()), "callback failed on chunk 2");
  } catch (const std::exception& error) {
    ADD_FAILURE() << "replaced by " << typeid(error).name() << ": " << error.what();
  }
  EXPECT_TRUE(s.recovers());
}

// ---------------------------------------------------------------------------------------------
// A strategy breaking its contract: a clear invalid_argument before the target sees the round
// ---------------------------------------------------------------------------------------------

// What a lying proposer does to the honest draft-model proposal it wraps.
enum class Lie {
  none,
  short_point_mass,  // 3 tokens, 1 point-mass flag
  long_point_mass,   // n tokens, n + 2 point-mass flags
  too_many_tokens,   // limit + 1 tokens
  raised_limit,      // limit + 1 tokens, after raising request.limit to match
  token_v,           // the last token = V
  negative_token,    // the first token = -1
  tree,              // every node's parent is the committed context
  short_parents,     // n tokens, 1 parent
  missing_q_row,     // n - 1 q rows for n sampled tokens
  nan_normalizer,    // the first q normalizer NaN
  zero_normalizer,   // the first q normalizer 0
};

// The draft model's proposal (so V is known before the target call), altered by `lie` from
// round `from_round` on. Every altered span lives in its own heap vector of exactly the lying
// size, so AddressSanitizer sees any read past it.
struct LyingProposer {
  explicit LyingProposer(ScriptedDraft& draft) : honest(draft) {}

  specdec::ModelProposer<ScriptedDraft> honest;
  Lie lie = Lie::none;
  std::size_t from_round = 0;
  std::size_t rounds = 0;
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::uint8_t> point_mass;
  std::vector<float> normalizers;

  template <class Config>
  void begin(const Config&) {
    rounds = 0;
  }

  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<float> proposal = honest.propose(request, coins);
    if (lie == Lie::none || rounds++ < from_round) return proposal;
    const std::size_t n = proposal.size();
    tokens.assign(proposal.tokens.begin(), proposal.tokens.end());
    normalizers.assign(proposal.q_normalizers.begin(), proposal.q_normalizers.end());
    switch (lie) {
      case Lie::none:
        break;
      case Lie::short_point_mass:
        point_mass.assign(1, 0);
        proposal.point_mass = point_mass;
        break;
      case Lie::long_point_mass:
        point_mass.assign(n + 2, 0);
        proposal.point_mass = point_mass;
        break;
      case Lie::too_many_tokens:
        tokens.push_back(tokens.empty() ? 0 : tokens.back());
        point_mass.assign(tokens.size(), 1);
        proposal.point_mass = point_mass;
        break;
      case Lie::raised_limit:
        ++request.limit;
        tokens.push_back(tokens.empty() ? 0 : tokens.back());
        point_mass.assign(tokens.size(), 1);
        proposal.point_mass = point_mass;
        break;
      case Lie::token_v:
        tokens.back() = static_cast<token_t>(kVocab);
        break;
      case Lie::negative_token:
        tokens.front() = -1;
        break;
      case Lie::tree:
        parents.assign(n, -1);
        proposal.parents = parents;
        break;
      case Lie::short_parents:
        parents.assign(1, -1);
        proposal.parents = parents;
        break;
      case Lie::missing_q_row:
        proposal.q_weights = specdec::LogitsRows<float>(
            proposal.q_weights.values().first((n - 1) * proposal.q_weights.row_stride()),
            proposal.q_weights.vocab_size(), proposal.q_weights.row_stride());
        break;
      case Lie::nan_normalizer:
        normalizers.front() = kNaN;
        break;
      case Lie::zero_normalizer:
        normalizers.front() = 0.0f;
        break;
    }
    proposal.tokens = tokens;
    proposal.q_normalizers = normalizers;
    return proposal;
  }
};

// A target that records what it was called with.
struct RecordingTarget : SpanTarget {
  std::size_t longest_context = 0;
  std::size_t most_rows = 0;
  std::vector<std::vector<token_t>> contexts;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    longest_context = std::max(longest_context, context.size());
    most_rows = std::max(most_rows, n);
    contexts.emplace_back(context.begin(), context.end());
    return SpanTarget::operator()(context, n);
  }
};

struct LyingScenario {
  using Decoder = specdec::StrategyDecoder<RecordingTarget, LyingProposer,
                                           specdec::StaticDraftLength, specdec::ConfiguredVerifier>;
  ScriptedDraft draft;
  RecordingTarget target;
  Decoder decoder{target, LyingProposer(draft)};
  specdec::GenerationConfig config = valid_config();
  std::vector<token_t> prompt = {1, 2, 3};

  ::testing::AssertionResult fails_with(std::initializer_list<std::string_view> keys) {
    return throws_with_message<std::invalid_argument>(
        [&] { (void)decoder.generate(prompt, config); }, keys);
  }

  // The honest proposer again: the same decoder matches a fresh one.
  ::testing::AssertionResult recovers() {
    decoder.proposer().lie = Lie::none;
    ScriptedDraft fresh_draft;
    RecordingTarget fresh_target;
    Decoder fresh(fresh_target, LyingProposer(fresh_draft));
    for (const specdec::GenerationConfig& good : {valid_config(), valid_filtered_config()}) {
      const ::testing::AssertionResult same =
          same_output(decoder.generate(prompt, good), fresh.generate(prompt, good));
      if (!same) return same;
    }
    return ::testing::AssertionSuccess();
  }
};

struct LieCase {
  const char* name;
  Lie lie;
  std::vector<std::string_view> keys;
};

void PrintTo(const LieCase& lie, std::ostream* os) { *os << lie.name; }

class ProposerContract : public ::testing::TestWithParam<std::tuple<LieCase, float>> {};

const LieCase kLies[] = {
    {"ShortPointMass", Lie::short_point_mass, {"1 point-mass flags for 4 tokens", "one per token"}},
    {"LongPointMass", Lie::long_point_mass, {"6 point-mass flags for 4 tokens", "one per token"}},
    {"TooManyTokens", Lie::too_many_tokens, {"returned 5 tokens", "limit 4"}},
    {"RaisedLimit", Lie::raised_limit, {"returned 5 tokens", "limit 4"}},
    {"TokenV", Lie::token_v, {"token 16 at node 3", "[0, 16)"}},
    {"NegativeToken", Lie::negative_token, {"token -1 at node 0", "[0, 16)"}},
    // A tree for a target without score_tree (tree.hpp): refused before the target call.
    {"Tree", Lie::tree, {"a tree of", "parents not a chain", "without score_tree"}},
    {"ShortParents", Lie::short_parents, {"1 parents for 4 tokens", "one per token"}},
};

const LieCase kSampledLies[] = {
    {"MissingQRow", Lie::missing_q_row, {"3 q rows", "4 sampled tokens", "V = 16"}},
    {"NaNNormalizer", Lie::nan_normalizer, {"normalizer nan at node 0", "positive, finite"}},
    {"ZeroNormalizer", Lie::zero_normalizer, {"normalizer 0 at node 0", "positive, finite"}},
};

std::string lie_name(const ::testing::TestParamInfo<std::tuple<LieCase, float>>& info) {
  return std::string(std::get<0>(info.param).name) +
         (std::get<1>(info.param) == 0.0f ? "Greedy" : "Sampled");
}

INSTANTIATE_TEST_SUITE_P(EveryTemperature, ProposerContract,
                         ::testing::Combine(::testing::ValuesIn(kLies),
                                            ::testing::Values(0.0f, 1.0f)),
                         lie_name);
INSTANTIATE_TEST_SUITE_P(Sampled, ProposerContract,
                         ::testing::Combine(::testing::ValuesIn(kSampledLies),
                                            ::testing::Values(1.0f)),
                         lie_name);

// In the first round (the draft model has told V) and in a later one: the same error, before
// the target call of that round, at every temperature and with either verifier.
TEST_P(ProposerContract, RejectedBeforeTheTargetCallAndTheDecoderRecovers) {
  const auto& [lie, temperature] = GetParam();
  for (const std::size_t from_round : {std::size_t{0}, std::size_t{2}}) {
    for (const specdec::VerifierKind verifier :
         {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      SCOPED_TRACE(::testing::Message() << "from round " << from_round << ", block = "
                                        << (verifier == specdec::VerifierKind::block));
      LyingScenario s;
      s.decoder.proposer().lie = lie.lie;
      s.decoder.proposer().from_round = from_round;
      s.config.sampling.temperature = temperature;
      s.config.verifier = verifier;
      s.config.max_context = 20;  // no honest round comes near it
      s.config.max_new_tokens = 17;
      EXPECT_TRUE(s.fails_with({"proposer", lie.keys[0], lie.keys[1]}));
      // Stopped before the lying round's target call.
      EXPECT_EQ(s.target.faults.calls, from_round);
      EXPECT_LE(s.target.longest_context, s.config.max_context);
      EXPECT_LE(s.target.most_rows, s.config.draft_length + 1);
      EXPECT_TRUE(s.recovers());
    }
  }
}

// Too many tokens at the end of the context: the target would have seen max_context + 1.
TEST(ProposerContractLimits, AProposalPastMaxContextNeverReachesTheTarget) {
  LyingScenario s;
  s.decoder.proposer().lie = Lie::too_many_tokens;
  s.decoder.proposer().from_round = 0;
  s.config.max_context = 6;  // prompt 3: the first round's limit is min(4, 6 - 3) = 3
  EXPECT_TRUE(s.fails_with({"returned 4 tokens", "limit 3"}));
  EXPECT_EQ(s.target.faults.calls, 0u);
  EXPECT_TRUE(s.recovers());
}

// A proposer that calls no model: before the first target call V is unknown, so its token ids
// are checked against V right after that call (as the prompt's are); negative ids, spans and the
// shape before it.
struct FixedProposer {
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::uint8_t> point_mass;
  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins&) {
    const std::size_t n = std::min(tokens.size(), request.limit);
    point_mass.assign(n, 1);
    return {.tokens = std::span<const token_t>(tokens).first(n),
            .parents = std::span<const std::int32_t>(parents).first(std::min(parents.size(), n)),
            .point_mass = point_mass};
  }
};

TEST(ProposerContractLimits, WithoutADraftModelTokensAreCheckedAgainstVAfterTheFirstTargetCall) {
  using Decoder = specdec::StrategyDecoder<RecordingTarget, FixedProposer,
                                           specdec::StaticDraftLength, specdec::TokenVerifier>;
  for (const float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE(temperature);
    RecordingTarget target;
    Decoder decoder(target, FixedProposer{{2, 3, static_cast<token_t>(kVocab) + 2}, {}, {}});
    specdec::GenerationConfig config = valid_config();
    config.sampling.temperature = temperature;
    const std::vector<token_t> prompt = {1, 2, 3};
    EXPECT_TRUE(throws_with_message<std::invalid_argument>(
        [&] { (void)decoder.generate(prompt, config); }, {"token 18 at node 2", "[0, 16)"}));
    EXPECT_EQ(target.faults.calls, 1u);
    decoder.proposer().tokens = {2, -3};
    EXPECT_TRUE(throws_with_message<std::invalid_argument>(
        [&] { (void)decoder.generate(prompt, config); }, {"token -3 at node 1", "[0, V)"}));
    EXPECT_EQ(target.faults.calls, 1u);  // no call for that one
    decoder.proposer().tokens = {2, 3};
    decoder.proposer().parents = {-1, -1};
    EXPECT_TRUE(throws_with_message<std::invalid_argument>(
        [&] { (void)decoder.generate(prompt, config); },
        {"a tree of 2 nodes", "parents not a chain", "without score_tree"}));
    EXPECT_EQ(target.faults.calls, 1u);
    decoder.proposer().parents = {-1, 0};  // a chain spelled out is a chain
    EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), config.max_new_tokens);
  }
}

// ---------------------------------------------------------------------------------------------
// Sanity checks on the harness itself, so a passing suite means something
// ---------------------------------------------------------------------------------------------

TEST(Harness, UnfaultedScenarioGeneratesTheFullBudgetWithRejections) {
  SpeculativeScenario<> s;
  const specdec::GenerationResult result = s.decoder.generate(s.prompt, s.config);
  EXPECT_EQ(result.tokens.size(), s.config.max_new_tokens);
  // Both the accept and the reject paths must run, or the fault tests cover only half.
  EXPECT_GT(result.stats.accepted, 0u);
  EXPECT_GT(result.stats.rejecting_rounds, 0u);
  EXPECT_GE(result.stats.rounds, 3u);  // "later round" faults really are in later rounds
}

TEST(Harness, MatrixAndSpanTargetsAgree) {
  SpeculativeScenario<SpanTarget> with_span;
  SpeculativeScenario<MatrixTarget> with_matrix;
  EXPECT_TRUE(same_output(with_matrix.decoder.generate(with_matrix.prompt, with_matrix.config),
                          with_span.decoder.generate(with_span.prompt, with_span.config)));
}

TEST(Harness, RecoveryCheckDetectsADifferentResult) {
  // recovers() compares against a fresh decoder; a different seed must make it fail.
  SpeculativeScenario<> s;
  specdec::GenerationConfig other = valid_config();
  other.seed += 1;
  const auto a = s.decoder.generate(s.prompt, other);
  const auto b = s.decoder.generate(s.prompt, valid_config());
  EXPECT_FALSE(same_output(a, b));
}

}  // namespace
