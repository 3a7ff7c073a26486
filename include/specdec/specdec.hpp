#pragma once
/// \file
/// \brief Umbrella header: everything public in specdec.
///
/// specdec is a header-only C++20 library for speculative decoding: a cheap draft model
/// proposes K tokens, the target model scores them all in one call, and a rejection-sampling
/// rule keeps the output distributed exactly as sampling from the target alone.

#include "specdec/batch.hpp"
#include "specdec/coins.hpp"
#include "specdec/context_cache.hpp"
#include "specdec/decoder.hpp"
#include "specdec/draft_length.hpp"
#include "specdec/generation.hpp"
#include "specdec/mapped_draft.hpp"
#include "specdec/measure.hpp"
#include "specdec/model.hpp"
#include "specdec/ngram_decoder.hpp"
#include "specdec/proposal.hpp"
#include "specdec/proposers.hpp"
#include "specdec/rng.hpp"
#include "specdec/round.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/string_level_decoder.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/text_tokenizer.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verifiers.hpp"
#include "specdec/verify.hpp"
#include "specdec/vocabulary.hpp"
