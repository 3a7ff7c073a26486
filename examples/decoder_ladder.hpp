// The decoder ladder the example CLIs (specdec-demo, specdec-llama) share: what drafts
// (--proposer / --spec-type), whether it drafts a tree (--tree, --tree-budget, --siblings), how
// many tokens (-k, "auto" included) and how sampled drafts are verified (--verifier) become one
// decoder, written once here. Each CLI keeps its own flag spellings and messages; the flags'
// values are parsed by the helpers below.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <specdec/specdec.hpp>

#include "cli_args.hpp"

namespace specdec::examples {

/// What drafts a chain: the draft model, n-gram lookup in the context (no draft model), or
/// lookup when it matches and the draft model otherwise.
enum class Proposer { model, ngram, both };

}  // namespace specdec::examples

/// Proposer's names, as the library names its enums (enum_names.hpp): "model", "ngram", "both".
template <>
struct specdec::EnumNames<specdec::examples::Proposer> {
  static constexpr std::string_view what = "proposer";
  static constexpr std::array<EnumName<examples::Proposer>, 3> names{
      {{examples::Proposer::model, "model"},
       {examples::Proposer::ngram, "ngram"},
       {examples::Proposer::both, "both"}}};
};

namespace specdec::examples {

using specdec::to_string;

/// The decoder the flags chose. A tree is drafted by the draft model (TreeProposer) with a
/// fixed node budget, whatever `proposer` says; `ngrams` serves Proposer::ngram and both.
struct DecoderChoice {
  Proposer proposer = Proposer::model;
  std::optional<TreeOptions> tree;  // --tree / --tree-budget
  NgramOptions ngrams{};
};

/// The most tokens `-k auto` lets a round draft (llama.cpp's n_max default), with the goodput
/// policy.
inline constexpr std::size_t kAutoDraftLengthCap = 16;

/// -k K or -k auto (the goodput policy with K <= kAutoDraftLengthCap).
inline void set_draft_length(GenerationConfig& config, std::string_view flag,
                             std::string_view text) {
  if (text == "auto") {
    config.draft_length = kAutoDraftLengthCap;
    config.draft_length_policy.kind = DraftLengthKind::goodput;
  } else {
    config.draft_length = parse_number<std::size_t>(flag, text);
  }
}

/// --tree WxWxW: the library's parse, its message behind the flag.
inline TreeShape parse_tree_flag(std::string_view flag, std::string_view text) {
  return flag_value(flag, [&] { return TreeShape::parse(text); });
}

/// --tree-budget N: N >= 1 nodes grown best first.
inline TreeShape tree_budget_flag(std::string_view flag, std::size_t nodes) {
  if (nodes == 0) throw UsageError(std::string(flag) + " must be >= 1");
  return TreeShape::dynamic(nodes);
}

/// "4x2x2x1" or "budget 12".
inline std::string tree_name(const TreeOptions& tree) {
  if (tree.shape.is_dynamic()) return "budget " + std::to_string(tree.shape.budget);
  std::string name;
  for (const std::size_t width : tree.shape.widths) {
    name += (name.empty() ? "" : "x") + std::to_string(width);
  }
  return name;
}

/// Builds the decoder `choice` and `verifier` name over `draft` and `target` and returns
/// `run(decoder)` (a GenerationResult). A tree is scored by the target's own tree call when it
/// is a TreeTargetModel, else by PathwiseTreeTarget (one chain call per node); it is verified
/// by recursive rejection sampling (TreeVerifier) or, with VerifierKind::block, sequence-level
/// (TraversalVerifier). A chain decoder reads the verifier from the GenerationConfig itself.
template <class Draft, class Target, class Run>
GenerationResult run_decoder(const DecoderChoice& choice, VerifierKind verifier, Draft& draft,
                             Target& target, Run&& run) {
  if (choice.tree) {
    const auto run_tree = [&](auto& tree_target) {
      TreeProposer proposer(draft, *choice.tree);
      if (verifier == VerifierKind::block) {
        StrategyDecoder decoder(tree_target, proposer, StaticDraftLength{}, TraversalVerifier{});
        return run(decoder);
      }
      StrategyDecoder decoder(tree_target, proposer, StaticDraftLength{}, TreeVerifier{});
      return run(decoder);
    };
    if constexpr (TreeTargetModel<Target>) {
      return run_tree(target);
    } else {
      PathwiseTreeTarget<Target> tree_target(target);
      return run_tree(tree_target);
    }
  }
  switch (choice.proposer) {
    case Proposer::model: {
      SpeculativeDecoder decoder(draft, target);
      return run(decoder);
    }
    case Proposer::ngram: {
      NgramDecoder decoder(target, choice.ngrams);
      return run(decoder);
    }
    case Proposer::both:
      break;
  }
  NgramThenModelDecoder decoder(draft, target, choice.ngrams);
  return run(decoder);
}

}  // namespace specdec::examples
