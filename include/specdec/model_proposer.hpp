#pragma once
/// \file
/// \brief Moved to <specdec/proposers/model.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/proposers/model.hpp"
