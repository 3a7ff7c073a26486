#pragma once
/// \file
/// \brief Moved to <specdec/verifiers/token.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/verifiers/token.hpp"
