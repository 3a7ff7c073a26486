#pragma once
/// \file
/// \brief Umbrella header: everything public in specdec.
///
/// specdec is a header-only C++20 library for speculative decoding: a cheap draft model
/// proposes K tokens, the target model scores them all in one call, and a rejection-sampling
/// rule keeps the output distributed exactly as sampling from the target alone.

#include "specdec/block_verifier.hpp"
#include "specdec/call_costs.hpp"
#include "specdec/coins.hpp"
#include "specdec/confidence_draft_length.hpp"
#include "specdec/configured_draft_length.hpp"
#include "specdec/context_cache.hpp"
#include "specdec/decoder.hpp"
#include "specdec/fallback_proposer.hpp"
#include "specdec/goodput_draft_length.hpp"
#include "specdec/model.hpp"
#include "specdec/model_proposer.hpp"
#include "specdec/ngram_decoder.hpp"
#include "specdec/ngram_proposer.hpp"
#include "specdec/proposal.hpp"
#include "specdec/rng.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling_laws.hpp"
#include "specdec/schedule_draft_length.hpp"
#include "specdec/softmax.hpp"
#include "specdec/speedup.hpp"
#include "specdec/static_draft_length.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/token_verifier.hpp"
#include "specdec/tree.hpp"
#include "specdec/tree_proposer.hpp"
#include "specdec/tree_verifier.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"
