// gpt_trees: tree drafts vs chains on the example GPT pair (models/kjv-*.spdc), with the
// target's tree forward (GptModel::score_tree), paired with plain decoding on the held-out
// prompts of models/prompts.txt; and the combinations of the library's strategies (trees, block
// verification, n-gram lookup, the goodput policy) end to end.
//
//   gpt_trees [--prompts N] [--tokens N] [--budgets 4,8,12,16] [--ks 4,6,8,10,12,16]
//             [--temperatures 0,1] [--seed N] [--combinations 1|0]
//
// Settings per T:
// - chains: the draft model, static K for each K in --ks, token-level and block verification
//   (at T = 0 one: both verify by argmax);
// - fixed trees per node budget N of --budgets: "2x1^(N/2-1)" (a chain of depth N/2 with a
//   second candidate at every depth: 2 x 1 x ... x 1), "2x2x1..." cut to N nodes (N >= 8; the
//   widest of N = 4 is "4"), and the dynamic tree of N nodes (best first from the draft's own
//   path probabilities, at most 4 children per node); each with every sibling mode (T = 0:
//   top-k only) and both tree verifiers (rrs = TreeVerifier, traversal = TraversalVerifier;
//   T = 0: one, both verify by argmax);
// - with --combinations 1: the goodput policy on a chain (cap 16, block verification), n-gram
//   lookup then the draft model (static K = 8 and goodput cap 16, block verification), the tree
//   2x1^7 (distinct siblings, sequence-level verifier; T = 0: top-k), n-gram lookup then a
//   tree (FallbackProposer of the lookup and a TreeProposer; a lookup chain is verified by the
//   tree verifier as a chain: TraversalVerifier on a chain is block verification).
// --budgets "" leaves the tree sweep out (chains and combinations only).
// Per prompt and T: one plain run before the settings and one after (the speedup's plain time is
// their mean, so a setting run early and one run late see the same baseline), the settings in an
// order rotated by one per prompt, every run with fresh KV caches and the same seed.
// Per setting: tokens per target call (emitted / rounds, pooled over prompts: counted, free of
// timing noise), speedup over plain decoding (median over prompts of the paired ratio), the
// median over prompts of its speedup over the best chain's (the chain with the largest median
// speedup) on the same prompt, the mean target call relative to plain decoding's mean call ("T_call
// / T(1)": what a round's call of 1 + nodes rows costs as seen), draft time per round and library
// time per round (the decoder's own work: drafting bookkeeping, verification), and at T = 0 whether
// every output equals the plain one. Then per T and budget: the best chain, the best fixed and
// the best dynamic tree.
// Output: markdown tables on stdout, progress on stderr.

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"
#include "gpt_programs.hpp"

namespace {

using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::SiblingMode;
using specdec::token_t;
using specdec::examples::GptModel;
using specdec_bench::load_average;
using specdec_bench::parse_count;
using specdec_bench::parse_flags;
using specdec_bench::parse_list;
using specdec_bench::read_prompts;

constexpr specdec::NgramOptions kByteNgrams{.min_ngram = 4, .max_ngram = 12};

struct Options {
  std::size_t prompts = 20;
  std::size_t tokens = 200;
  std::vector<double> budgets{4, 8, 12, 16};
  std::vector<double> ks{4, 6, 8, 10, 12, 16};
  std::vector<double> temperatures{0.0, 1.0};
  std::uint64_t seed = 1234;
  bool combinations = true;
};

Options parse_args(int argc, char** argv) {
  Options o;
  parse_flags(argc, argv, [&](std::string_view flag, std::string_view value) {
    if (flag == "--prompts")
      o.prompts = parse_count(flag, value);
    else if (flag == "--tokens")
      o.tokens = parse_count(flag, value);
    else if (flag == "--budgets")
      o.budgets = parse_list(flag, value);
    else if (flag == "--ks")
      o.ks = parse_list(flag, value);
    else if (flag == "--temperatures")
      o.temperatures = parse_list(flag, value);
    else if (flag == "--seed")
      o.seed = parse_count(flag, value);
    else if (flag == "--combinations")
      o.combinations = parse_count(flag, value) != 0;
    else
      return false;
    return true;
  });
  return o;
}

using Generate = std::function<GenerationResult(std::span<const token_t>, const GenerationConfig&)>;

enum class Kind { chain, fixed_tree, dynamic_tree, combination };

struct Setting {
  std::string name;
  Kind kind = Kind::chain;
  std::size_t nodes = 0;  // K of a chain, node budget of a tree
  GenerationConfig config;
  Generate generate;
  // Pooled over prompts, and per prompt.
  specdec::DecodeStats stats;
  std::vector<double> speedups;
  std::size_t greedy_mismatches = 0;
};

/// A decoder kept alive by the returned function.
template <class Decoder>
Generate hold(std::shared_ptr<Decoder> decoder) {
  return [decoder](std::span<const token_t> prompt, const GenerationConfig& config) {
    return decoder->generate(prompt, config);
  };
}

const char* mode_name(SiblingMode mode) {
  switch (mode) {
    case SiblingMode::with_replacement:
      return "replace";
    case SiblingMode::without_replacement:
      return "distinct";
    case SiblingMode::top_k:
      return "top-k";
  }
  return "?";
}

/// "2x1x1x1" for N = 8: a second candidate at every depth, depth N / 2.
std::string deep_shape(std::size_t nodes) {
  std::string shape = "2";
  for (std::size_t d = 1; d < std::max<std::size_t>(nodes / 2, 1); ++d) shape += "x1";
  return shape;
}

/// "4" for N = 4, else "2x2x1...x1" with enough depth to hold N nodes (cut to N).
std::string wide_shape(std::size_t nodes) {
  if (nodes <= 4) return "4";
  std::string shape = "2x2";
  for (std::size_t total = 6; total < nodes; total += 4) shape += "x1";
  return shape;
}

double median(const std::vector<double>& values) { return specdec::quantile(values, 0.5); }

struct Models {
  GptModel& draft;
  GptModel& target;
};

/// Every setting at temperature t.
std::vector<Setting> make_settings(const Options& o, double t, Models m) {
  GenerationConfig base;
  base.max_new_tokens = o.tokens;
  base.seed = o.seed;
  base.sampling.temperature = static_cast<float>(t);
  const bool greedy = t == 0;
  std::vector<Setting> settings;
  const auto add = [&](std::string name, Kind kind, std::size_t nodes, GenerationConfig config,
                       Generate generate) {
    Setting& s = settings.emplace_back();
    s.name = std::move(name);
    s.kind = kind;
    s.nodes = nodes;
    s.config = config;
    s.generate = std::move(generate);
  };

  // One chain decoder serves every K and verifier (both are in the config).
  auto chain = std::make_shared<specdec::SpeculativeDecoder<GptModel, GptModel>>(m.draft, m.target);
  for (const double kd : o.ks) {
    const auto k = static_cast<std::size_t>(kd);
    for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      if (greedy && verifier == specdec::VerifierKind::block) continue;
      GenerationConfig config = base;
      config.draft_length = k;
      config.verifier = verifier;
      const char* v = verifier == specdec::VerifierKind::token ? "token" : "block";
      add("chain K=" + std::to_string(k) + (greedy ? "" : std::string(" ") + v), Kind::chain, k,
          config, hold(chain));
    }
  }

  const auto add_tree = [&](const std::string& label, Kind kind, std::size_t nodes,
                            const specdec::TreeShape& shape) {
    for (const SiblingMode mode :
         {SiblingMode::without_replacement, SiblingMode::with_replacement, SiblingMode::top_k}) {
      if (greedy && mode != SiblingMode::top_k) continue;
      for (const bool traversal : {false, true}) {
        if (greedy && traversal) continue;
        GenerationConfig config = base;
        config.draft_length = nodes;
        specdec::TreeShape cut = shape;  // the tree cut to N nodes, breadth first
        if (!cut.is_dynamic()) cut.max_nodes = nodes;
        const specdec::TreeOptions tree{cut, mode};
        std::string name = label + " " + mode_name(mode) +
                           (greedy      ? ""
                            : traversal ? " traversal"
                                        : " rrs");
        if (traversal) {
          add(name, kind, nodes, config,
              hold(std::make_shared<specdec::StrategyDecoder<
                       GptModel, specdec::TreeProposer<GptModel>, specdec::StaticDraftLength,
                       specdec::TraversalVerifier>>(
                  m.target, specdec::TreeProposer<GptModel>(m.draft, tree))));
        } else {
          add(name, kind, nodes, config,
              hold(std::make_shared<
                   specdec::StrategyDecoder<GptModel, specdec::TreeProposer<GptModel>,
                                            specdec::StaticDraftLength, specdec::TreeVerifier>>(
                  m.target, specdec::TreeProposer<GptModel>(m.draft, tree))));
        }
      }
    }
  };
  for (const double nd : o.budgets) {
    const auto n = static_cast<std::size_t>(nd);
    const std::string deep = deep_shape(n), wide = wide_shape(n);
    add_tree(deep, Kind::fixed_tree, n, specdec::TreeShape::parse(deep));
    if (wide != deep) {
      add_tree(wide + (specdec::TreeShape::parse(wide).nodes() > n ? " (cut)" : ""),
               Kind::fixed_tree, n, specdec::TreeShape::parse(wide));
    }
    add_tree("dynamic " + std::to_string(n), Kind::dynamic_tree, n, specdec::TreeShape::dynamic(n));
  }

  if (!o.combinations) return settings;
  {
    GenerationConfig config = base;
    config.verifier = specdec::VerifierKind::block;
    config.draft_length = 16;
    config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
    add("chain goodput<=16 block", Kind::combination, 16, config, hold(chain));
    auto lookup = std::make_shared<specdec::NgramThenModelDecoder<GptModel, GptModel>>(
        m.draft, m.target, kByteNgrams);
    add("lookup+chain goodput<=16 block", Kind::combination, 16, config, hold(lookup));
    config.draft_length_policy.kind = specdec::DraftLengthKind::fixed;
    config.draft_length = 8;
    add("lookup+chain K=8 block", Kind::combination, 8, config, hold(lookup));
  }
  {
    // The deepest fixed tree of the budgets' sweep, without the lookup, for the comparison.
    const specdec::TreeOptions tree{specdec::TreeShape::parse("2x1x1x1x1x1x1x1"),
                                    greedy ? SiblingMode::top_k : SiblingMode::without_replacement};
    GenerationConfig config = base;
    config.draft_length = tree.shape.nodes();
    add(std::string("tree 2x1x1x1x1x1x1x1 ") + mode_name(tree.siblings) +
            (greedy ? "" : " traversal"),
        Kind::combination, tree.shape.nodes(), config,
        hold(std::make_shared<
             specdec::StrategyDecoder<GptModel, specdec::TreeProposer<GptModel>,
                                      specdec::StaticDraftLength, specdec::TraversalVerifier>>(
            m.target, specdec::TreeProposer<GptModel>(m.draft, tree))));
  }
  using LookupThenTree = specdec::FallbackProposer<specdec::BasicNgramProposer<float>,
                                                   specdec::TreeProposer<GptModel>>;
  for (const auto& [shape_name, shape] :
       {std::pair{std::string("2x1x1x1x1x1"), specdec::TreeShape::parse("2x1x1x1x1x1")},
        std::pair{std::string("2x1x1x1x1x1x1x1"), specdec::TreeShape::parse("2x1x1x1x1x1x1x1")},
        std::pair{std::string("dynamic 8"), specdec::TreeShape::dynamic(8)}}) {
    const specdec::TreeOptions tree{shape,
                                    greedy ? SiblingMode::top_k : SiblingMode::without_replacement};
    GenerationConfig config = base;
    config.draft_length = shape.nodes();
    add("lookup+tree " + shape_name + " " + mode_name(tree.siblings) + (greedy ? "" : " traversal"),
        Kind::combination, shape.nodes(), config,
        hold(std::make_shared<specdec::StrategyDecoder<
                 GptModel, LookupThenTree, specdec::StaticDraftLength, specdec::TraversalVerifier>>(
            m.target, LookupThenTree(specdec::BasicNgramProposer<float>(kByteNgrams),
                                     specdec::TreeProposer<GptModel>(m.draft, tree)))));
  }
  return settings;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::chain:
      return "chain";
    case Kind::fixed_tree:
      return "fixed tree";
    case Kind::dynamic_tree:
      return "dynamic tree";
    case Kind::combination:
      return "combination";
  }
  return "?";
}

double tokens_per_call(const Setting& s) { return s.stats.tokens_per_round(); }

void print_summary(double t, const std::vector<Setting>& settings, const Options& o) {
  const Setting* best_chain = nullptr;
  for (const Setting& s : settings) {
    if (s.kind == Kind::chain && (!best_chain || median(s.speedups) > median(best_chain->speedups)))
      best_chain = &s;
  }
  if (!best_chain || o.budgets.empty()) return;
  const double chain_tau = tokens_per_call(*best_chain),
               chain_speedup = median(best_chain->speedups);
  std::printf("\nT = %.2g: best chain by median speedup: %s, %.2f tokens/call, %.3fx.\n\n", t,
              best_chain->name.c_str(), chain_tau, chain_speedup);
  std::printf(
      "| T | N | best chain K <= N (tokens/call) | best tree of N nodes by tokens/call | "
      "tokens/call vs best chain | vs chain K = N | best tree of N nodes by speedup | "
      "speedup vs best chain |\n|--:|--:|:--|:--|--:|--:|:--|--:|\n");
  for (const double nd : o.budgets) {
    const auto n = static_cast<std::size_t>(nd);
    const Setting *chain_n = nullptr, *chain_at_n = nullptr, *tau_tree = nullptr,
                  *fast_tree = nullptr;
    for (const Setting& s : settings) {
      if (s.kind == Kind::chain && s.nodes <= n &&
          (!chain_n || tokens_per_call(s) > tokens_per_call(*chain_n)))
        chain_n = &s;
      if (s.kind == Kind::chain && s.nodes == n &&
          (!chain_at_n || tokens_per_call(s) > tokens_per_call(*chain_at_n)))
        chain_at_n = &s;
      if ((s.kind == Kind::fixed_tree || s.kind == Kind::dynamic_tree) && s.nodes == n) {
        if (!tau_tree || tokens_per_call(s) > tokens_per_call(*tau_tree)) tau_tree = &s;
        if (!fast_tree || median(s.speedups) > median(fast_tree->speedups)) fast_tree = &s;
      }
    }
    if (!tau_tree) continue;
    std::printf("| %.2g | %zu | %s (%.2f) | %s (%.2f) | %+.1f %% | %s | %s (%.3fx) | %.3f |\n", t,
                n, chain_n ? chain_n->name.c_str() : "-", chain_n ? tokens_per_call(*chain_n) : 0,
                tau_tree->name.c_str(), tokens_per_call(*tau_tree),
                100.0 * (tokens_per_call(*tau_tree) / chain_tau - 1),
                chain_at_n
                    ? (std::to_string(tokens_per_call(*tau_tree) / tokens_per_call(*chain_at_n))
                           .substr(0, 5))
                          .c_str()
                    : "-",
                fast_tree->name.c_str(), median(fast_tree->speedups),
                median(fast_tree->speedups) / chain_speedup);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_args(argc, argv);
  GptModel target = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-draft.spdc");
  const auto prompts = read_prompts(o.prompts);
  specdec::AutoregressiveDecoder plain(target);
  const auto reset_caches = [&] {
    target.reset();
    draft.reset();
  };
  const std::string load_start = load_average();
  std::vector<std::pair<double, std::vector<Setting>>> results;
  for (const double t : o.temperatures) {
    std::vector<Setting> settings = make_settings(o, t, Models{draft, target});
    specdec::DecodeStats plain_stats;
    for (Setting& s : settings) {  // warm-up (and each decoder's first-round sizing)
      reset_caches();
      (void)s.generate(prompts[0], s.config);
    }
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      std::fprintf(stderr, "T = %g: prompt %zu/%zu (load %s)\n", t, i + 1, prompts.size(),
                   load_average().c_str());
      const std::span<const token_t> prompt(prompts[i]);
      reset_caches();
      const GenerationResult before = plain.generate(prompt, settings.front().config);
      std::vector<GenerationResult> runs(settings.size());
      for (std::size_t r = 0; r < settings.size(); ++r) {
        const std::size_t s = (i + r) % settings.size();
        reset_caches();
        runs[s] = settings[s].generate(prompt, settings[s].config);
      }
      reset_caches();
      const GenerationResult after = plain.generate(prompt, settings.front().config);
      plain_stats += before.stats;
      plain_stats += after.stats;
      const double plain_seconds = 0.5 * (before.stats.total_seconds + after.stats.total_seconds);
      for (std::size_t s = 0; s < settings.size(); ++s) {
        Setting& setting = settings[s];
        setting.stats += runs[s].stats;
        setting.speedups.push_back(specdec::speedup_ratio(before.stats.emitted, plain_seconds,
                                                          runs[s].stats.emitted,
                                                          runs[s].stats.total_seconds));
        if (t == 0 && runs[s].tokens != before.tokens) ++setting.greedy_mismatches;
      }
    }
    const double plain_call =
        plain_stats.target_seconds / static_cast<double>(plain_stats.target_calls);
    std::printf(
        "\n### T = %.2g\n\nPlain decoding: %.2f ms per target call (mean, both runs of "
        "every prompt).\n\n",
        t, 1e3 * plain_call);
    // The best chain by median speedup: each setting's per-prompt speedup over its own.
    const Setting* reference = nullptr;
    for (const Setting& s : settings) {
      if (s.kind == Kind::chain && (!reference || median(s.speedups) > median(reference->speedups)))
        reference = &s;
    }
    std::printf(
        "| T | kind | setting | N | tokens/call | speedup (median) | IQR | "
        "vs best chain (paired) | "
        "T_call / T(1) | draft ms/round | library ms/round | greedy identical |\n"
        "|--:|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|:--|\n");
    for (const Setting& s : settings) {
      const double rounds = static_cast<double>(s.stats.rounds);
      const double call = s.stats.target_seconds / static_cast<double>(s.stats.target_calls);
      const specdec::Quartiles q = specdec::quartiles(s.speedups);
      std::vector<double> ratios;
      for (std::size_t i = 0; reference && i < s.speedups.size(); ++i) {
        if (reference->speedups[i] > 0) ratios.push_back(s.speedups[i] / reference->speedups[i]);
      }
      std::printf(
          "| %.2g | %s | %s | %zu | %.2f | %.3f | %.2f-%.2f | %.3f | %.2f | %.2f | %.3f | "
          "%s |\n",
          t, kind_name(s.kind), s.name.c_str(), s.nodes, tokens_per_call(s), q.median, q.p25, q.p75,
          median(ratios), call / plain_call, 1e3 * s.stats.draft_seconds / rounds,
          1e3 * s.stats.library_seconds / rounds,
          t != 0                     ? "-"
          : s.greedy_mismatches == 0 ? "yes"
                                     : (std::to_string(s.greedy_mismatches) + " differ").c_str());
    }
    print_summary(t, settings, o);
    std::fflush(stdout);
    results.emplace_back(t, std::move(settings));
  }
  std::printf("\n%zu held-out prompts x %zu tokens; load average %s at start, %s at end\n",
              prompts.size(), o.tokens, load_start.c_str(), load_average().c_str());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "gpt_trees: %s\n", error.what());
  return 2;
}
