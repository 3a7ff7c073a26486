#pragma once
/// \file
/// \brief Sampling (the sampling/ folder): SamplingParams, TokenDistribution, the filters,
/// process_logits and inverse-CDF sampling, and the softmax helpers. The sampling laws
/// verifiers draw from are in sampling/laws.hpp.

#include "specdec/sampling/distribution.hpp"
#include "specdec/sampling/filters.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/softmax.hpp"
