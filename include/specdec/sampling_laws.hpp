#pragma once
/// \file
/// \brief Moved to <specdec/sampling/laws.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/sampling/laws.hpp"
