#pragma once
/// \file
/// \brief The draft-length policies (draft_length/): fixed, schedule, confidence, goodput, never
/// (plain steps), their options, and the one GenerationConfig selects (ConfiguredDraftLength).

#include "specdec/draft_length/confidence.hpp"
#include "specdec/draft_length/configured.hpp"
#include "specdec/draft_length/goodput.hpp"
#include "specdec/draft_length/never.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/draft_length/schedule.hpp"
#include "specdec/draft_length/static.hpp"
