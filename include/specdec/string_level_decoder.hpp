#pragma once
/// \file
/// \brief StringLevelDecoder: speculative decoding with a draft of another tokenizer, through
/// the text (string-level exact match, proposers/string_level.hpp).
///
/// A StrategyDecoder with the configured verifier (GenerationConfig::verifier: token or block;
/// the proposals are chains) and, by default, the configured draft-length policy, as
/// SpeculativeDecoder. The draft length counts TARGET tokens: K = 8 over a byte-level target
/// proposes 8 bytes, whatever number of draft calls they take.
///
/// \code
///   specdec::ByteTokenizer bytes;                        // the target's vocabulary
///   specdec::StringLevelDecoder decoder(draft, bpe, target, bytes);
///   const auto result = decoder.generate(prompt, config);
/// \endcode
/// Holds the models and tokenizers by reference (not owned; they must outlive the decoder).

#include <utility>

#include "specdec/decoder.hpp"
#include "specdec/draft_length/configured.hpp"
#include "specdec/proposers/string_level.hpp"
#include "specdec/text_tokenizer.hpp"
#include "specdec/verifiers/configured.hpp"

namespace specdec {

template <class Draft, class DraftTokenizer, class Target, class TargetTokenizer,
          class Policy = ConfiguredDraftLength>
class StringLevelDecoder
    : public StrategyDecoder<Target, StringLevelProposer<Draft, DraftTokenizer, TargetTokenizer>,
                             Policy, ConfiguredVerifier> {
  using Proposer = StringLevelProposer<Draft, DraftTokenizer, TargetTokenizer>;
  using Base = StrategyDecoder<Target, Proposer, Policy, ConfiguredVerifier>;

 public:
  /// \throws std::invalid_argument for options that fail StringLevelOptions::validate.
  StringLevelDecoder(Draft& draft, const DraftTokenizer& draft_tokenizer, Target& target,
                     const TargetTokenizer& target_tokenizer, StringLevelOptions options = {},
                     Policy policy = {})
      : Base(target, Proposer(draft, draft_tokenizer, target_tokenizer, std::move(options)),
             std::move(policy)) {}
};

}  // namespace specdec
