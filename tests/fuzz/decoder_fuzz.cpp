// libFuzzer harness over specdec's public API: SpeculativeDecoder, AutoregressiveDecoder,
// StrategyDecoder with a user's proposer and verifier that break their contracts, tree shapes
// and sibling modes (TreeShape, TreeProposer) and tree decoding with lies at the tree proposal
// seam (TreeVerifier, TraversalVerifier), NgramDecoder and
// NgramThenModelDecoder with hostile NgramOptions, the draft-length policies with hostile
// options, the pure functions of sampling.hpp / verify.hpp, and measure_speedup and the
// testing.hpp helpers with hostile arguments; driven by hostile configurations, prompts, model
// outputs, models and callbacks that throw. Built by tests/fuzz/CMakeLists.txt (Clang only,
// -DSPECDEC_BUILD_FUZZERS=ON); docs/fuzzing.md says how to run it.
//
// Oracle (a violation aborts, which libFuzzer reports as a crash with the input saved):
//   - no sanitizer report (ASan, UBSan) and no assert;
//   - every exception is a std::exception whose message begins with "specdec: ", or the
//     model's / callback's / logits processor's own exception type (FuzzModelError);
//   - a generate() that returns keeps its contract (budget, token range, logprobs, finish);
//   - greedy output of every speculative decoder equals AutoregressiveDecoder's when a
//     generation completes (models without faults or a processor: pure functions of the
//     context), whatever its proposer drafted and its verifier would have done;
//   - after any failure the same decoder object, run on a fixed valid request, produces
//     exactly what a freshly constructed decoder produces (nothing left corrupted).

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/speedup.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::token_t;

/// What a model, the chunk callback or the logits processor throws on purpose.
struct FuzzModelError {
  int code = 0;
};

[[noreturn]] void fail(const char* what, const char* detail = "") {
  std::fprintf(stderr, "decoder_fuzz: oracle violated: %s %s\n", what, detail);
  std::abort();
}

/// One exception escaped a specdec call: it must be ours or the injected one.
void check_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const FuzzModelError&) {
  } catch (const std::exception& e) {
    if (!std::string_view(e.what()).starts_with("specdec: "))
      fail("unprefixed exception:", e.what());
  } catch (...) {
    fail("an exception that is not a std::exception");
  }
}

/// A float from a menu of hostile values, or an ordinary logit.
float pick_logit(FuzzedDataProvider& data) {
  switch (data.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return -std::numeric_limits<float>::infinity();
    case 3:
      return std::numeric_limits<float>::max();
    case 4:
      return -std::numeric_limits<float>::max();
    case 5:
      return std::numeric_limits<float>::denorm_min();
    case 6:
      return 1e30f;
    case 7:
      return -1e30f;
    default:
      return data.ConsumeFloatingPointInRange<float>(-20.0f, 20.0f);
  }
}

/// A double from a menu of hostile values (NaN, infinities, 0, extremes), or one in [lo, hi].
double hostile_double(FuzzedDataProvider& data, double lo, double hi) {
  switch (data.ConsumeIntegralInRange<int>(0, 11)) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -std::numeric_limits<double>::infinity();
    case 3:
      return 0.0;
    case 4:
      return std::numeric_limits<double>::max();
    case 5:
      return std::numeric_limits<double>::denorm_min();
    case 6:
      return -0.0;
    default:
      return data.ConsumeFloatingPointInRange<double>(lo, hi);
  }
}

/// A size from {0, SIZE_MAX, SIZE_MAX - 1, 2^63} or [1, ordinary].
std::size_t hostile_size(FuzzedDataProvider& data, std::size_t ordinary) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  switch (data.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return 0;
    case 1:
      return kMax;
    case 2:
      return kMax - 1;
    case 3:
      return kMax / 2 + 1;
    default:
      return data.ConsumeIntegralInRange<std::size_t>(1, ordinary);
  }
}

/// A small index derived from any float (NaN, inf, negative, huge included).
std::size_t small_index(float value) {
  return std::isfinite(value) ? static_cast<std::size_t>(std::fmod(std::fabs(value), 4096.0f)) : 0;
}

/// A deterministic pretend network. A row is a fixed pattern over the vocabulary, read from
/// `table`, with one context-dependent token raised, so drafts and targets agree often and the
/// argmax moves with the context; cheap (a copy per row), which keeps the fuzzer fast. `faults`
/// (armed unless `clean`) corrupt specific calls: wrong vocabulary, wrong row count, a short
/// row, a hostile value, an empty result, a throw.
struct FuzzModel {
  enum class Fault : std::uint8_t {
    none,
    throw_error,
    vocab_change,
    extra_row,
    missing_row,
    short_row,
    poison_value,
    empty
  };
  struct PlannedFault {
    std::size_t call = 0;
    Fault fault = Fault::none;
    float value = 0;
  };

  std::size_t vocab_size = 8;
  std::vector<float> table{0.0f};
  std::vector<PlannedFault> faults;
  bool clean = false;  // the reference requests' model: V = 8, finite, no faults
  std::size_t calls = 0;
  std::vector<float> pattern;
  std::vector<float> buffer;

  void fill_row(std::span<const token_t> prefix, float* row, std::size_t vocab) {
    const std::size_t last = prefix.empty() ? 0 : static_cast<std::uint32_t>(prefix.back());
    const std::vector<float>& values = clean ? kCleanTable : table;
    if (pattern.size() != vocab || pattern_clean_ != clean) {
      pattern.resize(vocab);
      for (std::size_t v = 0; v < vocab; ++v) pattern[v] = values[(v * 7) % values.size()];
      pattern_clean_ = clean;
    }
    std::copy(pattern.begin(), pattern.end(), row);
    const std::size_t raised = (last * 31 + prefix.size() * 5) % vocab;
    row[raised] = clean ? 6.0f : values[(last + prefix.size()) % values.size()] + 3.0f;
  }

  /// `rows` rows following the context's last `rows` prefixes; the flat buffer the caller views.
  std::span<const float> produce(std::span<const token_t> context, std::size_t rows) {
    const std::size_t call = calls++;
    std::size_t vocab = clean ? kCleanTable.size() : vocab_size;
    std::size_t row_count = rows;
    std::size_t trim = 0;
    const PlannedFault* poison = nullptr;
    if (!clean) {
      for (const PlannedFault& planned : faults) {
        if (planned.call != call) continue;
        switch (planned.fault) {
          case Fault::none:
            break;
          case Fault::throw_error:
            throw FuzzModelError{static_cast<int>(call)};
          case Fault::vocab_change:
            vocab += 1 + small_index(planned.value) % 5;
            break;
          case Fault::extra_row:
            ++row_count;
            break;
          case Fault::missing_row:
            row_count = row_count == 0 ? 0 : row_count - 1;
            break;
          case Fault::short_row:
            trim = 1;
            break;
          case Fault::poison_value:
            poison = &planned;
            break;
          case Fault::empty:
            row_count = 0;
            break;
        }
      }
    }
    buffer.resize(row_count * vocab);
    for (std::size_t r = 0; r < row_count; ++r) {
      // Row r follows the first context.size() - rows + 1 + r tokens (see model.hpp).
      const std::size_t prefix_length =
          context.size() + 1 + r >= rows ? context.size() + 1 + r - rows : 0;
      fill_row(context.first(std::min(prefix_length, context.size())), buffer.data() + r * vocab,
               vocab);
    }
    if (poison != nullptr && !buffer.empty()) {
      buffer[small_index(poison->value) % buffer.size()] = poison->value;
    }
    if (trim > 0 && !buffer.empty()) buffer.pop_back();
    return buffer;
  }

 private:
  static inline const std::vector<float> kCleanTable{0.5f, 1.5f, 0.0f, 2.5f,
                                                     1.0f, 3.0f, 2.0f, 0.25f};
  bool pattern_clean_ = false;
};

struct FuzzDraft {
  FuzzModel* model;
  std::span<const float> operator()(std::span<const token_t> context) {
    return model->produce(context, 1);
  }
};

struct FuzzTarget {
  FuzzModel* model;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    return model->produce(context, n);
  }
};

// ---- a user's strategies that break their contracts ----------------------------------------

/// One round's lie: what a FuzzProposer does to the honest draft-model proposal it wraps.
struct ProposalLie {
  enum class Kind : std::uint8_t {
    none,
    token,             // one token replaced by `token`
    extra_tokens,      // `count` more tokens (past the limit, or not; `flag`: request.limit raised)
    drop_tokens,       // `count` fewer tokens, the spans left as they were
    parents,           // a parents span: `count` entries, chain or not (`flag`)
    point_mass,        // a point-mass span of `count` entries, all `flag`
    q_rows,            // q rows: `count` rows of V + `token` weights (own buffer)
    q_values,          // the honest q rows with `value` written at one weight
    normalizer,        // one normalizer = `value`
    normalizers_size,  // `count` normalizers
    probabilities,     // `count` token probabilities, all `value`
  };
  Kind kind = Kind::none;
  std::size_t node = 0;
  std::size_t count = 0;
  token_t token = 0;
  double value = 0;
  bool flag = false;
};

/// The draft model's proposal, altered round by round by `lies` (cycled); honest when empty.
struct FuzzProposer {
  explicit FuzzProposer(FuzzDraft& draft) : honest(draft) {}

  specdec::ModelProposer<FuzzDraft> honest;
  std::vector<ProposalLie> lies;
  std::size_t round = 0;
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::uint8_t> point_mass;
  std::vector<float> weights;
  std::vector<float> normalizers;
  std::vector<double> probabilities;

  template <class Config>
  void begin(const Config&) {
    round = 0;
  }

  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<float> proposal = honest.propose(request, coins);
    if (lies.empty()) return proposal;
    const ProposalLie& lie = lies[round++ % lies.size()];
    tokens.assign(proposal.tokens.begin(), proposal.tokens.end());
    normalizers.assign(proposal.q_normalizers.begin(), proposal.q_normalizers.end());
    const std::size_t n = tokens.size();
    const std::size_t node = n == 0 ? 0 : lie.node % n;
    const std::size_t vocab = std::max<std::size_t>(request.vocab_size, 1);
    switch (lie.kind) {
      case ProposalLie::Kind::none:
        break;
      case ProposalLie::Kind::token:
        if (n > 0) tokens[node] = lie.token;
        break;
      case ProposalLie::Kind::extra_tokens:
        for (std::size_t i = 0; i < lie.count; ++i) tokens.push_back(lie.token);
        if (lie.flag) request.limit += lie.count;  // and raises the limit it was given to match
        break;
      case ProposalLie::Kind::drop_tokens:
        tokens.resize(n - std::min(n, lie.count));
        break;
      case ProposalLie::Kind::parents:
        parents.resize(lie.count);
        for (std::size_t i = 0; i < lie.count; ++i) {
          parents[i] = lie.flag ? static_cast<std::int32_t>(i) - 1 : lie.token;
        }
        proposal.parents = parents;
        break;
      case ProposalLie::Kind::point_mass:
        point_mass.assign(lie.count, lie.flag ? 1 : 0);
        proposal.point_mass = point_mass;
        break;
      case ProposalLie::Kind::q_rows: {
        const std::size_t width = vocab + static_cast<std::size_t>(lie.token & 3);
        weights.assign(lie.count * width, static_cast<float>(lie.value));
        proposal.q_weights = specdec::LogitsRows<float>(weights, width);
        break;
      }
      case ProposalLie::Kind::q_values:
        if (proposal.q_weights.rows() > 0) {
          weights.assign(proposal.q_weights.values().begin(), proposal.q_weights.values().end());
          weights[lie.node % weights.size()] = static_cast<float>(lie.value);
          proposal.q_weights = specdec::LogitsRows<float>(weights, proposal.q_weights.vocab_size(),
                                                          proposal.q_weights.row_stride());
        }
        break;
      case ProposalLie::Kind::normalizer:
        if (!normalizers.empty())
          normalizers[node % normalizers.size()] = static_cast<float>(lie.value);
        break;
      case ProposalLie::Kind::normalizers_size:
        normalizers.resize(lie.count, 1.0f);
        break;
      case ProposalLie::Kind::probabilities:
        probabilities.assign(lie.count, lie.value);
        proposal.token_probabilities = probabilities;
        break;
    }
    proposal.tokens = tokens;
    proposal.q_normalizers = normalizers;
    return proposal;
  }
};

std::vector<ProposalLie> plan_lies(FuzzedDataProvider& data) {
  std::vector<ProposalLie> lies(data.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (ProposalLie& lie : lies) {
    lie.kind = static_cast<ProposalLie::Kind>(data.ConsumeIntegralInRange<int>(0, 10));
    lie.node = data.ConsumeIntegralInRange<std::size_t>(0, 16);
    lie.count = data.ConsumeIntegralInRange<std::size_t>(0, 12);
    switch (data.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        lie.token = -1;
        break;
      case 1:
        lie.token = std::numeric_limits<token_t>::max();
        break;
      case 2:
        lie.token = std::numeric_limits<token_t>::min();
        break;
      default:
        lie.token = data.ConsumeIntegralInRange<token_t>(0, 24);
        break;
    }
    lie.value = hostile_double(data, -2, 2);
    lie.flag = data.ConsumeBool();
  }
  return lies;
}

/// A user's verifier: asks TargetRows for rows in the order its plan says (argmax and
/// distribution mixed, rows past the end included), then verifies with the token or block
/// verifier, or returns a verdict of its own (accepting more than drafted, a token outside
/// [0, V)). Honest when `plan` is empty.
struct FuzzVerifier {
  struct Step {
    std::uint8_t access = 0;  // 0 argmax, 1 distribution, 2 log_probability
    std::size_t row = 0;
  };
  std::vector<Step> plan;
  int verdict = 0;  // 0 token, 1 block, 2 made up
  specdec::VerifyResult made_up{};

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    for (const Step& step : plan) {
      if (step.access == 0) {
        (void)target.argmax(step.row);
      } else if (step.access == 1) {
        (void)target.distribution(step.row);
      } else if (step.row < target.size()) {  // log_probability's precondition: a token < V
        (void)target.log_probability(step.row, target.argmax(step.row));
      }
    }
    if (verdict == 2) return made_up;
    if (verdict == 1) return specdec::BlockVerifier{}.verify(proposal, target, coins);
    return specdec::TokenVerifier{}.verify(proposal, target, coins);
  }
};

FuzzVerifier plan_verifier(FuzzedDataProvider& data) {
  FuzzVerifier verifier;
  verifier.plan.resize(data.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (FuzzVerifier::Step& step : verifier.plan) {
    step.access = data.ConsumeIntegralInRange<std::uint8_t>(0, 2);
    step.row = data.ConsumeIntegralInRange<std::size_t>(0, 12);
  }
  verifier.verdict = data.ConsumeIntegralInRange<int>(0, 2);
  verifier.made_up.accepted = data.ConsumeIntegralInRange<std::size_t>(0, 12);
  verifier.made_up.next_token = data.ConsumeIntegralInRange<token_t>(-2, 20);
  return verifier;
}

specdec::NgramOptions fuzz_ngram_options(FuzzedDataProvider& data) {
  specdec::NgramOptions options;
  if (data.ConsumeBool()) {
    options.min_ngram = data.ConsumeBool() ? hostile_size(data, 8)
                                           : data.ConsumeIntegralInRange<std::size_t>(0, 66);
    options.max_ngram = data.ConsumeBool() ? hostile_size(data, 12)
                                           : data.ConsumeIntegralInRange<std::size_t>(0, 66);
  }
  return options;
}

void plan_faults(FuzzedDataProvider& data, FuzzModel& model) {
  // Up to 1100: more than one 1024-token block of the kernels.
  model.vocab_size = data.ConsumeIntegralInRange<std::size_t>(1, data.ConsumeBool() ? 12 : 1100);
  const std::size_t table_size = data.ConsumeIntegralInRange<std::size_t>(1, 24);
  model.table.clear();
  for (std::size_t i = 0; i < table_size; ++i) model.table.push_back(pick_logit(data));
  const std::size_t fault_count = data.ConsumeIntegralInRange<std::size_t>(0, 3);
  for (std::size_t i = 0; i < fault_count; ++i) {
    FuzzModel::PlannedFault planned;
    planned.call = data.ConsumeIntegralInRange<std::size_t>(0, 12);
    planned.fault = static_cast<FuzzModel::Fault>(data.ConsumeIntegralInRange<int>(0, 7));
    planned.value = pick_logit(data);
    model.faults.push_back(planned);
  }
}

specdec::GenerationConfig fuzz_config(FuzzedDataProvider& data, std::vector<int>& processor_plan) {
  specdec::GenerationConfig config;
  switch (data.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      config.draft_length = 0;
      break;
    case 1:
      config.draft_length = std::numeric_limits<std::size_t>::max();
      break;
    case 2:
      config.draft_length = data.ConsumeIntegralInRange<std::size_t>(4000, 5000);
      break;
    default:
      config.draft_length = data.ConsumeIntegralInRange<std::size_t>(1, 9);
      break;
  }
  switch (data.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      config.max_new_tokens = std::numeric_limits<std::size_t>::max();
      break;
    case 1:
      config.max_new_tokens = data.ConsumeIntegralInRange<std::size_t>(4000, 5000);
      break;
    default:
      config.max_new_tokens = data.ConsumeIntegralInRange<std::size_t>(0, 24);
      break;
  }
  const std::size_t stops = data.ConsumeIntegralInRange<std::size_t>(0, 3);
  for (std::size_t i = 0; i < stops; ++i)
    config.stop_tokens.push_back(data.ConsumeIntegral<token_t>() % 16);
  switch (data.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      config.sampling.temperature = 0;
      break;
    case 1:
      config.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
      break;
    case 2:
      config.sampling.temperature = -1;
      break;
    case 3:
      config.sampling.temperature = 1e-38f;
      break;
    case 4:
      config.sampling.temperature = specdec::SamplingParams::kMinTemperature;
      break;
    case 5:
      config.sampling.temperature = std::numeric_limits<float>::max();
      break;
    case 6:
      config.sampling.temperature = std::numeric_limits<float>::infinity();
      break;
    default:
      config.sampling.temperature = data.ConsumeFloatingPointInRange<float>(0.01f, 4.0f);
  }
  if (data.ConsumeBool()) config.sampling.top_k = data.ConsumeIntegralInRange<int>(-2, 3000);
  if (data.ConsumeBool()) {
    config.sampling.top_p =
        data.ConsumeBool() ? pick_logit(data) : data.ConsumeFloatingPointInRange<float>(0, 1);
  }
  if (data.ConsumeBool()) {
    config.sampling.min_p =
        data.ConsumeBool() ? pick_logit(data) : data.ConsumeFloatingPointInRange<float>(0, 1);
  }
  config.seed = data.ConsumeIntegral<std::uint64_t>();
  config.logprobs = data.ConsumeBool();
  config.verifier =
      data.ConsumeBool() ? specdec::VerifierKind::block : specdec::VerifierKind::token;
  if (data.ConsumeBool()) config.max_context = data.ConsumeIntegralInRange<std::size_t>(0, 30);
  // The draft-length policy, its parameters sometimes out of range (validate() must say so).
  config.draft_length_policy.kind =
      static_cast<specdec::DraftLengthKind>(data.ConsumeIntegralInRange<int>(0, 3));
  if (data.ConsumeBool()) {
    auto& policy = config.draft_length_policy;
    if (data.ConsumeBool()) {  // a value cast from a config file
      policy.kind = static_cast<specdec::DraftLengthKind>(data.ConsumeIntegralInRange<int>(-2, 6));
    }
    policy.confidence.min_probability = hostile_double(data, -0.5, 1.5);
    policy.schedule.initial_draft_length = hostile_size(data, 20);
    policy.schedule.grow = hostile_size(data, 20);
    policy.schedule.shrink = hostile_size(data, 20);
    policy.goodput.forgetting = hostile_double(data, -0.5, 1.5);
    policy.goodput.probe_interval = hostile_size(data, 8);
    policy.goodput.keep_calibration = data.ConsumeBool();
    if (data.ConsumeBool()) {  // fixed costs (reproducible), or a mismatched pair
      policy.goodput.draft_token_cost = hostile_double(data, -1, 2);
      policy.goodput.verify_row_cost = hostile_double(data, -1, 2);
      // a measured cost table (possibly with a line as well, or bad entries)
      const std::size_t table = data.ConsumeIntegralInRange<std::size_t>(0, 20);
      for (std::size_t n = 0; n < table; ++n) {
        policy.goodput.verify_costs.push_back(hostile_double(data, -1, 8));
      }
    }
  }
  if (data.ConsumeBool()) {
    config.verifier = static_cast<specdec::VerifierKind>(data.ConsumeIntegralInRange<int>(-1, 3));
  }
  // A logits processor: -inf bans, a NaN, or a throw, at planned calls.
  if (data.ConsumeBool()) {
    processor_plan.clear();
    const std::size_t steps = data.ConsumeIntegralInRange<std::size_t>(1, 6);
    for (std::size_t i = 0; i < steps; ++i)
      processor_plan.push_back(data.ConsumeIntegralInRange<int>(0, 5));
    config.sampling.logits_processor = [plan = processor_plan, call = std::size_t{0}](
                                           std::span<const token_t> context,
                                           std::span<float> logits) mutable {
      const int step = plan[call++ % plan.size()];
      const std::size_t at = context.size() % logits.size();
      switch (step) {
        case 1:
          logits[at] = -std::numeric_limits<float>::infinity();
          break;
        case 2:
          logits[at] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 3:
          throw FuzzModelError{-1};
        case 4:
          for (float& x : logits) x = -std::numeric_limits<float>::infinity();
          break;
        case 5:
          logits[at] += 100.0f;
          break;
        default:
          break;
      }
    };
  }
  return config;
}

std::vector<token_t> fuzz_prompt(FuzzedDataProvider& data) {
  std::vector<token_t> prompt;
  const std::size_t length = data.ConsumeIntegralInRange<std::size_t>(0, 8);
  for (std::size_t i = 0; i < length; ++i) {
    switch (data.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        prompt.push_back(-1);
        break;
      case 1:
        prompt.push_back(std::numeric_limits<token_t>::max());
        break;
      case 2:
        prompt.push_back(std::numeric_limits<token_t>::min());
        break;
      default:
        prompt.push_back(data.ConsumeIntegralInRange<token_t>(0, 20));
        break;
    }
  }
  return prompt;
}

/// What a successful generate() promises, whatever the models returned.
void check_result(const specdec::GenerationResult& result, const specdec::GenerationConfig& config,
                  std::size_t vocab_size) {
  if (result.tokens.size() > config.max_new_tokens) fail("budget exceeded");
  if (config.logprobs && result.logprobs.size() != result.tokens.size()) fail("logprobs size");
  if (!config.logprobs && !result.logprobs.empty()) fail("logprobs without logprobs");
  if (result.stats.emitted != result.tokens.size()) fail("stats.emitted");
  for (const token_t token : result.tokens) {
    if (token < 0 || static_cast<std::size_t>(token) >= vocab_size) fail("token out of range");
  }
  for (std::size_t i = 0; i + 1 < result.tokens.size(); ++i) {
    if (specdec::detail::is_stop_token(config.stop_tokens, result.tokens[i]))
      fail("token after stop");
  }
  if (result.finish_reason == specdec::FinishReason::stop_token &&
      (result.tokens.empty() ||
       !specdec::detail::is_stop_token(config.stop_tokens, result.tokens.back()))) {
    fail("stop_token without a stop token");
  }
  if (result.finish_reason == specdec::FinishReason::length &&
      result.tokens.size() != config.max_new_tokens) {
    fail("length finish below the budget");
  }
}

/// The fixed valid requests every decoder must still answer exactly as a fresh one does.
std::vector<specdec::GenerationConfig> reference_configs() {
  std::vector<specdec::GenerationConfig> configs(3);
  configs[0].sampling.temperature = 0;
  configs[0].max_new_tokens = 12;
  configs[1].sampling.temperature = 0.9f;
  configs[1].sampling.top_k = 5;
  configs[1].max_new_tokens = 12;
  configs[1].seed = 7;
  configs[2] = configs[1];
  configs[2].verifier = specdec::VerifierKind::block;
  configs[2].sampling.top_k = 0;
  configs[2].sampling.top_p = 0.9f;
  return configs;
}

bool same(const specdec::GenerationResult& a, const specdec::GenerationResult& b) {
  return a.tokens == b.tokens && a.finish_reason == b.finish_reason &&
         a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)) == 0;
}

template <class Decoder, class MakeFresh>
void check_still_usable(Decoder& used, MakeFresh make_fresh, FuzzModel& draft, FuzzModel& target) {
  draft.clean = target.clean = true;
  const std::vector<token_t> prompt{1, 2, 3};
  for (const specdec::GenerationConfig& config : reference_configs()) {
    const specdec::GenerationResult again = used.generate(prompt, config);
    auto fresh_decoder = make_fresh();
    const specdec::GenerationResult fresh = fresh_decoder.generate(prompt, config);
    if (!same(again, fresh)) fail("a decoder differs from a fresh one after earlier calls");
  }
  draft.clean = target.clean = false;
}

/// Chunks after which the callback stops any generation (keeps one input fast): 48, fewer when
/// rounds are expensive (a round drafts up to K rows of V weights: K = 4096, V = 1100 is 4.5 M
/// exps, a tenth of a second under ASan).
std::size_t max_chunks(const specdec::GenerationConfig& config, std::size_t vocab_size) {
  const std::size_t round_work = (std::min<std::size_t>(config.usable_draft_length(), 8192) + 1) *
                                 std::max<std::size_t>(vocab_size, 1);
  return std::clamp<std::size_t>(std::size_t{4'000'000} / round_work, 1, 48);
}

/// Runs one generate() under the oracle; its result, or nothing if it threw.
template <class Decoder>
std::optional<specdec::GenerationResult> run_generate(FuzzedDataProvider& data, Decoder& decoder,
                                                      std::span<const token_t> prompt,
                                                      const specdec::GenerationConfig& config,
                                                      std::size_t vocab_bound) {
  const std::size_t chunk_limit = max_chunks(config, vocab_bound);
  const int callback_mode = data.ConsumeIntegralInRange<int>(0, 3);
  const std::size_t callback_at = data.ConsumeIntegralInRange<std::size_t>(0, 8);
  std::size_t chunks = 0;
  try {
    const specdec::GenerationResult result =
        decoder.generate(prompt, config, [&](std::span<const token_t> chunk) {
          for (const token_t token : chunk) {
            if (token < 0 || static_cast<std::size_t>(token) >= vocab_bound) {
              const std::string detail =
                  std::to_string(token) + " (bound " + std::to_string(vocab_bound) + ")";
              fail("chunk token out of range:", detail.c_str());
            }
          }
          const bool here = chunks == callback_at;
          if (here && callback_mode == 1) return false;
          if (here && callback_mode == 2) throw FuzzModelError{-2};
          // Huge budgets (SIZE_MAX) stay huge for the decoder's arithmetic; the work is capped.
          return ++chunks < chunk_limit;
        });
    check_result(result, config, vocab_bound);
    return result;
  } catch (...) {
    check_exception(std::current_exception());
    return std::nullopt;
  }
}

/// The pure functions with caller-supplied token ids and sizes.
void fuzz_pure_functions(FuzzedDataProvider& data) {
  const std::size_t vocab = data.ConsumeIntegralInRange<std::size_t>(1, 40);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = pick_logit(data);
  specdec::SamplingParams params;
  params.temperature = data.ConsumeBool() ? pick_logit(data) : 1.0f;
  params.top_k = data.ConsumeIntegralInRange<int>(-1, 50);
  params.top_p = data.ConsumeBool() ? 1.0f : pick_logit(data);
  const token_t token = data.ConsumeIntegralInRange<token_t>(-3, static_cast<token_t>(vocab) + 3);
  const double coin = data.ConsumeBool() ? data.ConsumeProbability<double>() : pick_logit(data);
  const std::size_t scratch_size =
      data.ConsumeBool() ? vocab : data.ConsumeIntegralInRange<std::size_t>(0, 50);
  std::vector<float> scratch(scratch_size), filter_scratch;
  std::vector<float> weights(data.ConsumeBool() ? vocab : scratch_size);
  std::vector<float> block_sums(specdec::weight_block_count(vocab) + (data.ConsumeBool() ? 0 : 1));
  std::vector<token_t> drafted(data.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (token_t& x : drafted)
    x = data.ConsumeIntegralInRange<token_t>(-2, static_cast<token_t>(vocab) + 2);
  const std::vector<double> coins(drafted.size() + 1, coin);

  auto guarded = [](auto&& call) {
    try {
      call();
    } catch (...) {
      check_exception(std::current_exception());
    }
  };
  guarded([&] {
    const auto p = specdec::process_logits(std::span<const float>(logits), params, filter_scratch);
    (void)specdec::sample(p, coin, std::span<float>(scratch));
    (void)specdec::acceptance_probability(p, p, token);
    (void)specdec::sample_excluding(p, token, coin, std::span<float>(scratch));
    (void)specdec::residual_distribution(p, std::span<const float>(weights), 1.0f,
                                         std::span<float>(scratch));
    (void)specdec::sample_residual(p, std::span<const float>(weights), 1.0f, coin,
                                   std::span<float>(scratch));
    (void)specdec::residual_mass(p, std::span<const float>(weights), 1.0f, 0.5f);
  });
  guarded([&] {
    const auto q = specdec::process_logits(std::span<const float>(logits), params, filter_scratch,
                                           std::span<float>(weights), std::span<float>(block_sums));
    (void)specdec::sample_from_weights(std::span<const float>(weights),
                                       std::span<const float>(block_sums), coin);
    (void)specdec::sample_from_weights(std::span<const float>(weights), q.normalizer, coin);
  });
  guarded([&] {
    const std::size_t rows = drafted.size() + (data.ConsumeBool() ? 1 : 0);
    std::vector<float> target(rows * vocab);
    for (std::size_t i = 0; i < target.size(); ++i) target[i] = logits[i % vocab];
    const specdec::LogitsRows<float> target_rows(target, vocab);
    (void)specdec::verify_greedy(std::span<const token_t>(drafted), target_rows);
    std::vector<float> draft_weights(drafted.size() * vocab, 1.0f);
    const std::vector<float> normalizers(drafted.size(), static_cast<float>(vocab));
    const specdec::LogitsRows<float> draft_rows(draft_weights, vocab);
    (void)specdec::verify_stochastic(std::span<const token_t>(drafted), draft_rows,
                                     std::span<const float>(normalizers), target_rows, params,
                                     std::span<const double>(coins), coin,
                                     std::span<float>(scratch), filter_scratch);
  });
}

/// measure_speedup, print_speedup_table and the statistics helpers of speedup.hpp and
/// testing.hpp, and the draft-length policies driven directly, all with hostile arguments.
void fuzz_helpers(FuzzedDataProvider& data) {
  auto guarded = [](auto&& call) {
    try {
      call();
    } catch (...) {
      check_exception(std::current_exception());
    }
  };
  std::vector<double> values(data.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (double& x : values) x = hostile_double(data, -10, 10);
  const double q = hostile_double(data, -0.5, 1.5);
  guarded([&] { (void)specdec::quantile(values, q); });
  guarded([&] { (void)specdec::quartiles(values); });
  const double total_variation = hostile_double(data, 0, 0.5);
  const std::size_t cells = hostile_size(data, 100);
  const double p_threshold = hostile_double(data, 0, 1);
  guarded([&] { (void)specdec::testing::samples_to_detect(total_variation, cells, p_threshold); });
  guarded([&] {
    std::vector<std::uint64_t> counts(data.ConsumeIntegralInRange<std::size_t>(0, 6));
    for (auto& c : counts) c = data.ConsumeBool() ? data.ConsumeIntegral<std::uint64_t>() : 3;
    std::vector<double> probabilities(data.ConsumeBool() ? counts.size() : counts.size() + 1);
    for (double& p : probabilities) p = hostile_double(data, 0, 1);
    (void)specdec::testing::chi_square_test(counts, probabilities);
    (void)specdec::testing::g_test(counts, probabilities);
  });

  // The policies, built from hostile options and driven by hostile states and reports.
  specdec::GenerationConfig config;
  config.draft_length = hostile_size(data, 9);
  config.max_new_tokens = hostile_size(data, 24);
  std::vector<double> probabilities(data.ConsumeIntegralInRange<std::size_t>(0, 8));
  for (double& p : probabilities) p = hostile_double(data, 0, 1);
  const auto drive = [&](auto& policy) {
    for (int round = 0; round < 6; ++round) {
      const std::size_t limit = data.ConsumeIntegralInRange<std::size_t>(0, 9);
      std::size_t drafted = 0;
      while (drafted < limit && drafted < 64 &&
             policy.draft_more(
                 specdec::DraftState{drafted, limit,
                                     std::span<const double>(probabilities)
                                         .first(std::min(drafted, probabilities.size()))})) {
        ++drafted;
      }
      specdec::RoundReport report;
      report.drafted =
          data.ConsumeBool() ? drafted : data.ConsumeIntegralInRange<std::size_t>(0, 12);
      report.accepted = data.ConsumeIntegralInRange<std::size_t>(0, report.drafted);
      report.limit = limit;
      report.draft_seconds = hostile_double(data, 0, 1e-3);
      report.target_seconds = hostile_double(data, 0, 1e-2);
      report.token_probabilities = std::span<const double>(probabilities)
                                       .first(std::min(report.drafted, probabilities.size()));
      policy.observe(report);
    }
  };
  guarded([&] {
    specdec::ScheduleOptions options;
    options.initial_draft_length = hostile_size(data, 9);
    options.grow = hostile_size(data, 4);
    options.shrink = hostile_size(data, 4);
    specdec::ScheduleDraftLength policy(options);
    policy.begin(config);
    drive(policy);
    const std::size_t k = policy.current_draft_length();
    if (k < 1 || k > std::max<std::size_t>(config.draft_length, 1)) {
      fail("ScheduleDraftLength left [1, draft_length]");
    }
  });
  guarded([&] {
    specdec::ConfidenceDraftLength policy(
        specdec::ConfidenceOptions{hostile_double(data, -0.5, 1.5)});
    drive(policy);
  });
  guarded([&] {
    specdec::GoodputOptions options;
    options.forgetting = hostile_double(data, -0.5, 1.5);
    options.probe_interval = hostile_size(data, 8);
    options.keep_calibration = data.ConsumeBool();
    if (data.ConsumeBool()) {
      options.draft_token_cost = hostile_double(data, -1, 2);
      options.verify_row_cost = hostile_double(data, -1, 2);
      const std::size_t table = data.ConsumeIntegralInRange<std::size_t>(0, 20);
      for (std::size_t n = 0; n < table; ++n)
        options.verify_costs.push_back(hostile_double(data, -1, 8));
    }
    specdec::GoodputDraftLength policy(options);
    if (config.usable_draft_length() <= specdec::GenerationConfig::kMaxDraftLength) {
      policy.begin(config);
    }
    drive(policy);
  });

  // measure_speedup over pure models (V = 8): hostile prompt lists and settings.
  FuzzModel model;
  model.clean = true;
  FuzzDraft draft{&model};
  FuzzTarget target{&model};
  specdec::SpeculativeDecoder<FuzzDraft, FuzzTarget> speculative(draft, target);
  specdec::AutoregressiveDecoder<FuzzTarget> plain(target);
  std::vector<std::vector<token_t>> prompts(data.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (auto& prompt : prompts) prompt = fuzz_prompt(data);
  std::vector<specdec::SpeedupSetting> settings(data.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (auto& setting : settings) {
    std::vector<int> processor_plan;
    setting.config = fuzz_config(data, processor_plan);
    setting.config.sampling.logits_processor = nullptr;  // keeps greedy pairs comparable
    // No callback stops a measured run: bound the budget.
    setting.config.max_new_tokens = std::min<std::size_t>(setting.config.max_new_tokens, 32);
    setting.name = data.ConsumeRandomLengthString(12);
  }
  const int reset_throws_at = data.ConsumeIntegralInRange<int>(-1, 12);
  specdec::SpeedupOptions options;
  options.shared_baseline = data.ConsumeBool();
  guarded([&] {
    int resets = 0;
    const specdec::SpeedupTable table = specdec::measure_speedup(
        speculative, plain, std::span<const std::vector<token_t>>(prompts),
        std::span<const specdec::SpeedupSetting>(settings),
        [&] {
          if (resets++ == reset_throws_at) throw FuzzModelError{-3};
        },
        options);
    if (table.rows.size() != settings.size()) fail("measure_speedup: one row per setting");
    if (!options.shared_baseline && table.greedy_mismatches() != 0) {
      fail("measure_speedup: greedy speculative output differs from plain decoding's");
    }
    std::ostringstream text;
    specdec::print_speedup_table(text, table);
  });
  guarded([&] {
    std::vector<std::size_t> lengths(data.ConsumeIntegralInRange<std::size_t>(0, 3));
    for (std::size_t& k : lengths) k = hostile_size(data, 5);
    (void)specdec::draft_length_settings(config, lengths);
  });
}

/// Greedy output is the target's argmax path whatever was drafted: a speculative generation
/// that completed (not stopped by the callback) over pure models must equal plain decoding's.
void check_greedy_identity(const specdec::GenerationResult& speculative,
                           std::span<const token_t> prompt, const specdec::GenerationConfig& config,
                           FuzzTarget& target) {
  if (!config.sampling.greedy() || config.sampling.logits_processor ||
      speculative.finish_reason == specdec::FinishReason::callback) {
    return;
  }
  specdec::AutoregressiveDecoder<FuzzTarget> plain(target);
  const std::size_t expected = speculative.tokens.size();
  std::size_t emitted = 0;
  try {
    const specdec::GenerationResult result =
        plain.generate(prompt, config, [&](std::span<const token_t> chunk) {
          emitted += chunk.size();
          return emitted <= expected;
        });
    if (result.tokens != speculative.tokens) {
      fail("greedy speculative output differs from the autoregressive decoder's");
    }
  } catch (...) {
    fail("the autoregressive decoder failed where a greedy speculative generation completed");
  }
}

/// Pure models: no planned fault does anything, so every row is a function of its prefix.
bool pure(const FuzzModel& model) {
  return std::all_of(
      model.faults.begin(), model.faults.end(),
      [](const FuzzModel::PlannedFault& f) { return f.fault == FuzzModel::Fault::none; });
}

using Strategy = specdec::StrategyDecoder<FuzzTarget, FuzzProposer, specdec::ConfiguredDraftLength,
                                          FuzzVerifier>;
using Lookup = specdec::NgramDecoder<FuzzTarget>;
using LookupThenModel = specdec::NgramThenModelDecoder<FuzzDraft, FuzzTarget>;

enum class DecoderKind : std::uint8_t { autoregressive, speculative, strategy, lookup, combined };

// ---- trees: shapes and the tree proposal seam -----------------------------------------------

/// A tree shape from fuzzed text of digits and 'x' (TreeShape::parse), or field by field with
/// hostile widths, budgets and bounds (widths of 2^32 and more, products that wrap a size_t).
specdec::TreeShape fuzz_tree_shape(FuzzedDataProvider& data) {
  if (data.ConsumeBool()) {
    std::string text = data.ConsumeRandomLengthString(48);
    for (char& c : text) c = "0123456789x"[static_cast<unsigned char>(c) % 11];
    return specdec::TreeShape::parse(text);
  }
  specdec::TreeShape shape;
  shape.widths.resize(data.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (std::size_t& width : shape.widths) {
    width = data.ConsumeBool() ? (std::size_t{1} << 32) + data.ConsumeIntegral<std::uint8_t>()
                               : hostile_size(data, 4);
  }
  if (data.ConsumeBool()) shape.budget = hostile_size(data, 12);
  shape.max_width = hostile_size(data, 4);
  return shape;
}

/// One round's lie about a tree proposal (the seam between a tree proposer and the decoder and
/// tree verifiers): what TreeLiar does to TreeProposer's honest proposal.
struct TreeLie {
  enum class Kind : std::uint8_t {
    none,
    parent,        // node's parent = `token` (out of order, below -1, past the end)
    token,         // node's token = `token`
    q_at_token,    // the q weight of node's own token = `value` (NaN, negative, 0, huge)
    q_row,         // node's whole q row = `value`
    max_children,  // every declared bound = `count` (fewer children than drafted)
    point_mass,    // node's point-mass flag flipped
    drop,          // `count` nodes fewer (the other spans left as they were)
  };
  Kind kind = Kind::none;
  std::size_t node = 0;
  std::size_t count = 0;
  token_t token = 0;
  double value = 0;
};

/// A TreeProposer whose proposals are altered round by round by `lies` (cycled).
struct TreeLiar {
  explicit TreeLiar(specdec::TreeProposer<FuzzDraft> proposer) : honest(std::move(proposer)) {}

  specdec::TreeProposer<FuzzDraft> honest;
  std::vector<TreeLie> lies;
  std::size_t round = 0;
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::uint32_t> max_children;
  std::vector<std::uint8_t> point_mass;
  std::vector<float> weights;

  template <class Config>
  void begin(const Config&) {
    round = 0;
  }

  [[nodiscard]] std::size_t round_limit() const noexcept { return honest.round_limit(); }

  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<float> proposal = honest.propose(request, coins);
    if (lies.empty() || proposal.empty()) return proposal;
    const TreeLie& lie = lies[round++ % lies.size()];
    const std::size_t n = proposal.size();
    const std::size_t node = lie.node % n;
    tokens.assign(proposal.tokens.begin(), proposal.tokens.end());
    parents.assign(proposal.parents.begin(), proposal.parents.end());
    switch (lie.kind) {
      case TreeLie::Kind::none:
        break;
      case TreeLie::Kind::parent:
        if (!parents.empty()) parents[node] = lie.token;
        break;
      case TreeLie::Kind::token:
        tokens[node] = lie.token;
        break;
      case TreeLie::Kind::q_at_token:
      case TreeLie::Kind::q_row:
        if (proposal.q_weights.rows() == n) {
          weights.assign(proposal.q_weights.values().begin(), proposal.q_weights.values().end());
          const std::size_t stride = proposal.q_weights.row_stride();
          float* row = weights.data() + node * stride;
          if (lie.kind == TreeLie::Kind::q_row) {
            std::fill_n(row, proposal.q_weights.vocab_size(), static_cast<float>(lie.value));
          } else {
            row[static_cast<std::size_t>(tokens[node])] = static_cast<float>(lie.value);
          }
          proposal.q_weights =
              specdec::LogitsRows<float>(weights, proposal.q_weights.vocab_size(), stride);
        }
        break;
      case TreeLie::Kind::max_children:
        if (!proposal.max_children.empty()) {
          max_children.assign(proposal.max_children.size(), static_cast<std::uint32_t>(lie.count));
          proposal.max_children = max_children;
        }
        break;
      case TreeLie::Kind::point_mass:
        point_mass.assign(n, 0);
        for (std::size_t i = 0; i < n; ++i) point_mass[i] = proposal.is_point_mass(i) ? 1 : 0;
        point_mass[node] = point_mass[node] != 0 ? 0 : 1;
        proposal.point_mass = point_mass;
        break;
      case TreeLie::Kind::drop:
        tokens.resize(n - std::min(n, lie.count));
        break;
    }
    proposal.tokens = tokens;
    proposal.parents = parents;
    return proposal;
  }
};

std::vector<TreeLie> plan_tree_lies(FuzzedDataProvider& data) {
  std::vector<TreeLie> lies(data.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (TreeLie& lie : lies) {
    lie.kind = static_cast<TreeLie::Kind>(data.ConsumeIntegralInRange<int>(0, 7));
    lie.node = data.ConsumeIntegralInRange<std::size_t>(0, 16);
    lie.count = data.ConsumeIntegralInRange<std::size_t>(0, 3);
    lie.token = data.ConsumeBool() ? data.ConsumeIntegral<token_t>()
                                   : data.ConsumeIntegralInRange<token_t>(-2, 12);
    lie.value = hostile_double(data, -2, 2);
  }
  return lies;
}

using TreeTarget = specdec::PathwiseTreeTarget<FuzzTarget>;
template <class Verifier>
using TreeDecoder =
    specdec::StrategyDecoder<TreeTarget, TreeLiar, specdec::StaticDraftLength, Verifier>;

/// Tree shapes and sibling modes (valid, overflowing, out of range) into TreeProposer, then,
/// for a shape that was accepted and is small, decoding with lies at the tree proposal seam
/// through TreeVerifier or TraversalVerifier: every exception is ours (or a model's), every
/// result keeps its contract, and the decoder is reusable afterwards.
template <class Verifier>
void fuzz_tree_decoder(FuzzedDataProvider& data, FuzzModel& draft_model, FuzzModel& target_model,
                       const specdec::TreeOptions& options) {
  FuzzDraft draft{&draft_model};
  FuzzTarget chain_target{&target_model};
  TreeTarget target(chain_target);
  TreeDecoder<Verifier> decoder(target, TreeLiar(specdec::TreeProposer<FuzzDraft>(draft, options)));
  decoder.proposer().lies = plan_tree_lies(data);
  const std::size_t vocab_bound =
      4 * (std::max(draft_model.vocab_size, target_model.vocab_size) + 5);
  for (std::size_t call = data.ConsumeIntegralInRange<std::size_t>(1, 2); call-- > 0;) {
    std::vector<int> processor_plan;
    const specdec::GenerationConfig config = fuzz_config(data, processor_plan);
    (void)run_generate(data, decoder, fuzz_prompt(data), config, vocab_bound);
  }
  decoder.proposer().lies.clear();
  const auto make_fresh = [&] {
    return TreeDecoder<Verifier>(target,
                                 TreeLiar(specdec::TreeProposer<FuzzDraft>(draft, options)));
  };
  check_still_usable(decoder, make_fresh, draft_model, target_model);
}

void fuzz_trees(FuzzedDataProvider& data) {
  specdec::TreeOptions options;
  try {
    options.shape = fuzz_tree_shape(data);
    options.siblings = static_cast<specdec::SiblingMode>(data.ConsumeIntegralInRange<int>(-1, 4));
    FuzzModel probe_model;
    FuzzDraft probe{&probe_model};
    const specdec::TreeProposer<FuzzDraft> proposer(probe, options);  // validates
    const std::size_t nodes = options.shape.nodes();
    if (nodes == 0 || nodes > specdec::TreeShape::kMaxNodes || proposer.round_limit() != nodes) {
      fail("TreeProposer accepted a shape of", std::to_string(nodes).c_str());
    }
    if (nodes > 64) return;  // valid, but too slow to decode many times per input
  } catch (...) {
    check_exception(std::current_exception());
    return;
  }
  FuzzModel draft_model, target_model;
  plan_faults(data, draft_model);
  plan_faults(data, target_model);
  if (data.ConsumeBool()) draft_model.vocab_size = target_model.vocab_size;
  if (data.ConsumeBool()) {
    fuzz_tree_decoder<specdec::TreeVerifier>(data, draft_model, target_model, options);
  } else {
    fuzz_tree_decoder<specdec::TraversalVerifier>(data, draft_model, target_model, options);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider data(bytes, size);
  switch (data.ConsumeIntegralInRange<int>(0, 8)) {
    case 0:
      fuzz_pure_functions(data);
      return 0;
    case 1:
      fuzz_helpers(data);
      return 0;
    case 2:
      fuzz_trees(data);
      return 0;
    default:
      break;
  }
  FuzzModel draft_model, target_model;
  plan_faults(data, draft_model);
  plan_faults(data, target_model);
  if (data.ConsumeBool()) draft_model.vocab_size = target_model.vocab_size;
  FuzzDraft draft{&draft_model};
  FuzzTarget target{&target_model};
  const auto kind = static_cast<DecoderKind>(data.ConsumeIntegralInRange<int>(0, 4));
  specdec::SpeculativeDecoder<FuzzDraft, FuzzTarget> speculative_decoder(draft, target);
  specdec::AutoregressiveDecoder<FuzzTarget> autoregressive_decoder(target);
  Strategy strategy_decoder(target, FuzzProposer(draft));
  strategy_decoder.proposer().lies = plan_lies(data);
  strategy_decoder.verifier() = plan_verifier(data);
  const specdec::NgramOptions ngram_options = fuzz_ngram_options(data);
  std::optional<Lookup> lookup_decoder;
  std::optional<LookupThenModel> combined_decoder;
  if (kind == DecoderKind::lookup || kind == DecoderKind::combined) {
    try {
      if (kind == DecoderKind::lookup) lookup_decoder.emplace(target, ngram_options);
      if (kind == DecoderKind::combined) combined_decoder.emplace(draft, target, ngram_options);
    } catch (...) {
      check_exception(std::current_exception());
      return 0;
    }
  }

  const std::size_t calls = data.ConsumeIntegralInRange<std::size_t>(1, 3);
  bool models_pure = pure(draft_model) && pure(target_model);
  for (std::size_t call = 0; call < calls; ++call) {
    std::vector<int> processor_plan;
    const specdec::GenerationConfig config = fuzz_config(data, processor_plan);
    const std::vector<token_t> prompt = fuzz_prompt(data);
    if (call > 0 && data.ConsumeBool()) {  // the vocabulary changes between calls
      const std::size_t vocab = data.ConsumeIntegralInRange<std::size_t>(1, 1100);
      target_model.vocab_size = vocab;
      if (data.ConsumeBool()) draft_model.vocab_size = vocab;
    }
    // The decoder learns V from the first model call, which faults may have corrupted: up to
    // three extra rows of a one-row call read as one row of 4 V, a vocab_change adds up to 5.
    // Its tokens are below that bound, and later calls must agree with it.
    const std::size_t vocab_bound =
        4 * (std::max(draft_model.vocab_size, target_model.vocab_size) + 5);
    std::optional<specdec::GenerationResult> result;
    switch (kind) {
      case DecoderKind::autoregressive:
        result = run_generate(data, autoregressive_decoder, prompt, config, vocab_bound);
        break;
      case DecoderKind::speculative:
        result = run_generate(data, speculative_decoder, prompt, config, vocab_bound);
        break;
      case DecoderKind::strategy:
        result = run_generate(data, strategy_decoder, prompt, config, vocab_bound);
        break;
      case DecoderKind::lookup:
        result = run_generate(data, *lookup_decoder, prompt, config, vocab_bound);
        break;
      case DecoderKind::combined:
        result = run_generate(data, *combined_decoder, prompt, config, vocab_bound);
        break;
    }
    if (result && models_pure && kind != DecoderKind::autoregressive) {
      check_greedy_identity(*result, prompt, config, target);
    }
    models_pure = models_pure && draft_model.vocab_size == target_model.vocab_size;
  }
  switch (kind) {
    case DecoderKind::autoregressive:
      check_still_usable(
          autoregressive_decoder,
          [&] { return specdec::AutoregressiveDecoder<FuzzTarget>(target); }, draft_model,
          target_model);
      break;
    case DecoderKind::speculative:
      check_still_usable(
          speculative_decoder,
          [&] { return specdec::SpeculativeDecoder<FuzzDraft, FuzzTarget>(draft, target); },
          draft_model, target_model);
      break;
    case DecoderKind::strategy:
      strategy_decoder.proposer().lies.clear();  // honest strategies from here on
      strategy_decoder.verifier() = FuzzVerifier{};
      check_still_usable(
          strategy_decoder, [&] { return Strategy(target, FuzzProposer(draft)); }, draft_model,
          target_model);
      break;
    case DecoderKind::lookup:
      check_still_usable(
          *lookup_decoder, [&] { return Lookup(target, ngram_options); }, draft_model,
          target_model);
      break;
    case DecoderKind::combined:
      check_still_usable(
          *combined_decoder, [&] { return LookupThenModel(draft, target, ngram_options); },
          draft_model, target_model);
      break;
  }
  return 0;
}
