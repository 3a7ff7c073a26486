#pragma once
/// \file
/// \brief Certification harness: prove that a proposer, a draft-length policy, a verifier or a
/// logits processor keeps speculative decoding exact — with the tools specdec's own tests use.
///
/// Two independent kinds of evidence:
///
/// 1. **Exact enumeration** (double precision, small vocabularies). Strategies draw all their
///    randomness through a coin source (coins.hpp). EnumeratingCoins replaces the decoder's:
///    every `draw(law)` branches over the tokens of the law with their masses, every
///    `accept(i, a)` over accept / reject with probabilities a, 1 - a. Re-running the round for
///    every branch (depth first) yields the exact law of what the round emits, computed by the
///    strategies' own code instantiated with double. certify_round() compares it with the
///    target's law; speculative_law() composes rounds under the decoder's budget rule.
/// 2. **Statistical tests** of the full decoder (float, any model): chi_square_test() /
///    g_test() with p-values, and samples_to_detect() for the sample size that a given
///    total-variation error needs to be caught.
///
/// Scripted, context-dependent toy models (ScriptedPair) are ready-made building blocks for
/// both. Nothing here is needed to *use* specdec; include it in tests.
///
/// Example — certify a verifier (a complete version is in README.md):
/// \code
///   specdec::testing::ScriptedPair pair;  // V = 5 draft / target pair
///   pair.params.temperature = 0.7f;
///   auto draft = pair.draft();            // the draft model, in double
///   specdec::ModelProposer proposer(draft);
///   const auto cert = specdec::testing::certify_round(proposer, specdec::StaticDraftLength{},
///                                                     MyVerifier{}, pair.target(), pair.params,
///                                                     {0, 1}, /*draft_length=*/3);
///   EXPECT_LT(cert.total_variation, 1e-9);
/// \endcode

// The decoders, as before the harness had a folder of its own (tests built on it use them).
#include "specdec/decoder.hpp"
#include "specdec/testing/enumeration.hpp"
#include "specdec/testing/scripted_models.hpp"
#include "specdec/testing/statistics.hpp"
