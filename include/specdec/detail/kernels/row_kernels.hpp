#pragma once
/// \file
/// \brief Vectorised building blocks over one row of logits (internal): includes every kernel
/// header of detail/, one concern each.
///
///   row_blocks.hpp        kBlockSize, block iteration and fixed-order block sums (determinism)
///   stream_store.hpp      non-temporal stores for large stored rows
///   row_scan.hpp          max scans with the NaN / +inf / all -inf check
///   packet_exp.hpp        the packet exp (own AVX-512 version, Eigen's elsewhere)
///   scaled_exponent.hpp   the exponent (x - reference) / T every weight is formed with
///   exp_weights.hpp       the exp pass: masked / unmasked, summed / stored weights
///   online_softmax.hpp    single-pass online softmax by blocks (target and draft rows)
///   nucleus_kernels.hpp   top-p: level masses, range gather, final masking
///   residual_kernels.hpp  the residual max(0, p - q) by blocks
///   inverse_cdf.hpp       inverse-CDF sampling by blocks
///   argmax.hpp            argmax and greedy log-probs
///
/// The SIMD kernels bracket their code with simd_warnings.hpp's macros (GCC's false AVX-512
/// uninitialized warnings).

#include "specdec/detail/kernels/argmax.hpp"
#include "specdec/detail/kernels/exp_weights.hpp"
#include "specdec/detail/kernels/inverse_cdf.hpp"
#include "specdec/detail/kernels/nucleus_kernels.hpp"
#include "specdec/detail/kernels/online_softmax.hpp"
#include "specdec/detail/kernels/packet_exp.hpp"
#include "specdec/detail/kernels/residual_kernels.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/row_scan.hpp"
#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/detail/kernels/stream_store.hpp"
