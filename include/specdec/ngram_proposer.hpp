#pragma once
/// \file
/// \brief Moved to <specdec/proposers/ngram.hpp>; this forwarding header is kept for one release
/// (the list of forwarding headers: docs/design.md, "Layout").
#include "specdec/proposers/ngram.hpp"
