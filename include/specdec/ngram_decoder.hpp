#pragma once
/// \file
/// \brief Ready-made decoders with model-free drafting: NgramDecoder (n-gram lookup, no draft
/// model) and NgramThenModelDecoder (n-gram lookup when it matches, the draft model otherwise).
///
/// Both are StrategyDecoder with the configured verifier (GenerationConfig::verifier) and, by
/// default, the configured draft-length policy (GenerationConfig::draft_length_policy), as
/// SpeculativeDecoder; another policy type can be given as the last template parameter.

#include <utility>

#include "specdec/decoder.hpp"
#include "specdec/draft_length/configured.hpp"
#include "specdec/proposers/fallback.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/proposers/ngram.hpp"

namespace specdec {

/// \brief n-gram lookup first, the draft model when no suffix of the context matches. The
/// lookup's proposals have the draft model's scalar (float for a DraftModel).
template <class Draft>
using NgramThenModelProposer =
    FallbackProposer<BasicNgramProposer<typename ModelProposer<Draft>::Scalar>,
                     ModelProposer<Draft>>;

/// \brief Speculative decoding without a draft model: drafts by n-gram lookup in the context
/// (prompt + emitted tokens). Pays off where the output repeats its context (quoting, editing,
/// extraction); elsewhere rounds draft nothing and cost what plain decoding does, plus a lookup.
///
/// \code
///   specdec::NgramDecoder decoder(target, {.min_ngram = 3, .max_ngram = 8});
///   const auto result = decoder.generate(prompt, config);
/// \endcode
/// Holds the target by reference (not owned; it must outlive the decoder).
template <class Target, class Policy = ConfiguredDraftLength>
class NgramDecoder : public StrategyDecoder<Target, NgramProposer, Policy, ConfiguredVerifier> {
  using Base = StrategyDecoder<Target, NgramProposer, Policy, ConfiguredVerifier>;

 public:
  /// \throws std::invalid_argument for options that fail NgramOptions::validate.
  explicit NgramDecoder(Target& target, const NgramOptions& options = {}, Policy policy = {})
      : Base(target, NgramProposer(options), std::move(policy)) {}
};

/// \brief Speculative decoding that drafts by n-gram lookup when a suffix of the context
/// matches and with the draft model otherwise (NgramThenModelProposer).
///
/// Holds references to both models (not owned; they must outlive the decoder).
template <class Draft, class Target, class Policy = ConfiguredDraftLength>
class NgramThenModelDecoder
    : public StrategyDecoder<Target, NgramThenModelProposer<Draft>, Policy, ConfiguredVerifier> {
  using Base = StrategyDecoder<Target, NgramThenModelProposer<Draft>, Policy, ConfiguredVerifier>;
  using Lookup = typename NgramThenModelProposer<Draft>::primary_type;

 public:
  /// \throws std::invalid_argument for options that fail NgramOptions::validate.
  NgramThenModelDecoder(Draft& draft, Target& target, const NgramOptions& options = {},
                        Policy policy = {})
      : Base(target, NgramThenModelProposer<Draft>(Lookup(options), ModelProposer<Draft>(draft)),
             std::move(policy)) {}
};

}  // namespace specdec
