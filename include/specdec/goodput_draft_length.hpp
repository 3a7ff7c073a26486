#pragma once
/// \file
/// \brief Moved to <specdec/draft_length/goodput.hpp>; this forwarding header is kept for one
/// release (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/draft_length/goodput.hpp"
