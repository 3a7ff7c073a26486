#pragma once
/// \file
/// \brief Moved to <specdec/verifiers/tree.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/verifiers/tree.hpp"
