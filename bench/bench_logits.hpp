#pragma once
/// \file
/// \brief Realistic-looking random logits for the benchmarks (bench-internal helper).
///
/// A target row is a Gaussian background (sigma = 2, the long tail of an LLM vocabulary) plus
/// 1..8 "peaked" tokens: the top one sits u ~ U(0, 4) nats above log(tail mass), the others
/// step down by Exp(1) gaps. So the top token takes roughly 50-98 % of the mass, a few more
/// tokens take most of the rest, and top-p = 0.9 keeps anywhere from one token to a cut deep
/// in the tail: both easy and hard cases for the nucleus search.
///
/// A draft row is the target row plus N(0, noise) on every logit; `calibrate_noise` bisects the
/// noise level so that the mean acceptance sum_x min(p(x), q(x)) over the pool (T = 1, no
/// filters) hits a requested value. For greedy decoding the argmax of a fixed fraction of the
/// draft rows is made to agree with the target's (by swapping two draft logits), so greedy
/// acceptance is controlled too.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <Eigen/Core>

namespace specdec_bench {

inline void fill_target_row(std::span<float> row, std::mt19937_64& gen) {
  const double sigma = 2.0;
  std::normal_distribution<float> background(0.0f, static_cast<float>(sigma));
  for (float& x : row) x = background(gen);
  const double tail_log_mass = std::log(static_cast<double>(row.size())) + sigma * sigma / 2;
  std::uniform_real_distribution<double> lift(0.0, 4.0);
  std::exponential_distribution<double> gap(1.0);
  std::uniform_int_distribution<std::size_t> peaks(1, 8);
  std::uniform_int_distribution<std::size_t> where(0, row.size() - 1);
  double logit = tail_log_mass + lift(gen);
  const std::size_t n = peaks(gen);
  for (std::size_t i = 0; i < n; ++i) {
    row[where(gen)] = static_cast<float>(logit);
    logit -= gap(gen);
  }
}

/// 1 - total variation between softmax(a) and softmax(b) (T = 1, no filters).
inline double overlap(std::span<const float> a, std::span<const float> b) {
  using Map = Eigen::Map<const Eigen::ArrayXf>;
  const Map x(a.data(), static_cast<Eigen::Index>(a.size()));
  const Map y(b.data(), static_cast<Eigen::Index>(b.size()));
  const Eigen::ArrayXf px = (x - x.maxCoeff()).exp();
  const Eigen::ArrayXf py = (y - y.maxCoeff()).exp();
  const double zx = px.cast<double>().sum(), zy = py.cast<double>().sum();
  return (px.cast<double>() / zx).min(py.cast<double>() / zy).sum();
}

inline std::size_t argmax_of(std::span<const float> row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

/// Makes the argmax of a draft row agree (or disagree) with the target's, by swapping two draft
/// logits (the multiset of draft logits, hence its shape, is unchanged).
inline void fix_greedy_agreement(std::span<const float> target, std::span<float> draft,
                                 bool agree) {
  const std::size_t t = argmax_of(target);
  const std::size_t d = argmax_of(draft);
  if (agree && d != t) std::swap(draft[d], draft[t]);
  if (!agree && d == t) {
    // Swap the draft's best with its second best.
    std::size_t second = t == 0 ? 1 : 0;
    for (std::size_t i = 0; i < draft.size(); ++i) {
      if (i != t && draft[i] > draft[second]) second = i;
    }
    std::swap(draft[t], draft[second]);
  }
}

/// Row r of a pool is a greedy match iff greedy_match(r, rows, rate): the first
/// round(rate * rows) rows in a fixed scattered order agree.
inline bool greedy_match(std::size_t r, std::size_t rows, double rate) {
  const std::size_t matches =
      static_cast<std::size_t>(std::lround(rate * static_cast<double>(rows)));
  // Scatter the mismatching rows: rank of r under the permutation r -> 5 r mod rows (rows is a
  // power of two here, so 5 is invertible).
  return (r * 5) % rows < matches;
}

/// draft = target + noise * unit_noise, row by row, then the greedy agreement pattern (skipped
/// if greedy_rate < 0).
inline void make_draft(std::span<const float> target, std::span<const float> unit_noise,
                       float noise, std::size_t rows, std::size_t V, double greedy_rate,
                       std::span<float> draft) {
  for (std::size_t i = 0; i < target.size(); ++i) draft[i] = target[i] + noise * unit_noise[i];
  if (greedy_rate < 0) return;  // no greedy pattern requested
  for (std::size_t r = 0; r < rows; ++r) {
    fix_greedy_agreement(target.subspan(r * V, V), draft.subspan(r * V, V),
                         greedy_match(r, rows, greedy_rate));
  }
}

/// Bisects the noise scale so that the mean overlap over `rows` rows of size V is `alpha`
/// (with the greedy agreement pattern of rate `greedy_rate` applied).
/// `target` and `unit_noise` hold rows*V values; `draft` receives the calibrated rows.
/// Returns the mean overlap achieved.
inline double calibrate_noise(std::span<const float> target, std::span<const float> unit_noise,
                              std::size_t rows, std::size_t V, double alpha, double greedy_rate,
                              std::span<float> draft, float* noise_out = nullptr) {
  auto mean_overlap = [&](float noise) {
    make_draft(target, unit_noise, noise, rows, V, greedy_rate, draft);
    double s = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      s += overlap(target.subspan(r * V, V), std::span<const float>(draft).subspan(r * V, V));
    }
    return s / static_cast<double>(rows);
  };
  float lo = 0.0f, hi = 8.0f;
  for (int it = 0; it < 24; ++it) {
    const float mid = 0.5f * (lo + hi);
    if (mean_overlap(mid) > alpha)
      lo = mid;
    else
      hi = mid;
  }
  const float noise = 0.5f * (lo + hi);
  if (noise_out) *noise_out = noise;
  return mean_overlap(noise);
}

/// Per-row version: bisects a separate noise scale for every row so that *each* row's overlap is
/// `alpha` (to ~1e-4). Then the acceptance probability of a drafted token is alpha whatever row
/// (context) it was drafted from, so acceptances are i.i.d. even though the rows visited form a
/// dependent chain: exactly the geometric model's assumption. Returns the mean overlap.
inline double calibrate_noise_per_row(std::span<const float> target,
                                      std::span<const float> unit_noise, std::size_t rows,
                                      std::size_t V, double alpha, std::span<float> draft) {
  double total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto t = target.subspan(r * V, V);
    const auto u = unit_noise.subspan(r * V, V);
    const auto d = draft.subspan(r * V, V);
    float lo = 0.0f, hi = 16.0f;
    double achieved = 0;
    for (int it = 0; it < 30; ++it) {
      const float mid = 0.5f * (lo + hi);
      for (std::size_t i = 0; i < V; ++i) d[i] = t[i] + mid * u[i];
      achieved = overlap(t, std::span<const float>(d));
      if (achieved > alpha)
        lo = mid;
      else
        hi = mid;
    }
    total += achieved;
  }
  return total / static_cast<double>(rows);
}

}  // namespace specdec_bench
