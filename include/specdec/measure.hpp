#pragma once
/// \file
/// \brief Measuring (measure/): paired speedup runs (measure_speedup) and a model pair's call costs
/// (measure_call_costs; measure_batch_call_costs for a batch).

#include "specdec/measure/batch_call_costs.hpp"
#include "specdec/measure/call_costs.hpp"
#include "specdec/measure/speedup.hpp"
