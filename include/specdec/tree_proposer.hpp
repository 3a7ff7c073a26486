#pragma once
/// \file
/// \brief Moved to <specdec/proposers/tree.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/proposers/tree.hpp"
