#pragma once
/// \file
/// \brief Decoding several sequences at once (batch/): the optional batched model calls
/// (BatchedTargetModel, BatchedDraftModel) and BatchedDecoder.

#include "specdec/batch/decoder.hpp"
#include "specdec/batch/draft.hpp"
#include "specdec/batch/goodput.hpp"
#include "specdec/batch/target.hpp"
