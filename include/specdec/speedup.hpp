#pragma once
/// \file
/// \brief Moved to <specdec/measure/speedup.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/measure/speedup.hpp"
