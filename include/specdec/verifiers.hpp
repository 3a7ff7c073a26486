#pragma once
/// \file
/// \brief The verifiers (verifiers/): token-level, block, the two tree verifiers, and the one
/// GenerationConfig selects (ConfiguredVerifier).

#include "specdec/verifiers/block.hpp"
#include "specdec/verifiers/configured.hpp"
#include "specdec/verifiers/token.hpp"
#include "specdec/verifiers/tree.hpp"
