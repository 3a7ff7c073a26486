#pragma once
/// \file
/// \brief The proposers (proposers/): what is drafted — a draft model's chain (ModelProposer),
/// n-gram lookup (NgramProposer), a primary with a fallback (FallbackProposer), trees
/// (TreeProposer), a draft of another tokenizer through the text (StringLevelProposer).

#include "specdec/proposers/fallback.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/string_level.hpp"
#include "specdec/proposers/tree.hpp"
