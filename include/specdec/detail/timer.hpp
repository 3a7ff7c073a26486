#pragma once
/// \file
/// \brief Scoped steady_clock timer used for the draft / target / total statistics (internal).

#include <chrono>
#include <utility>

namespace specdec::detail {

/// \brief Adds the wall time of its own lifetime to `seconds` (also when unwinding).
///
/// steady_clock, not system_clock: it never jumps, so intervals are never negative.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& seconds) noexcept
      : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() {
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    seconds_ += std::chrono::duration<double>(elapsed).count();
  }

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};

/// \brief Calls `call()` and adds its wall time to `seconds`; returns exactly what it returns
/// (a reference stays a reference, a value is not copied).
template <class Call>
decltype(auto) timed_call(double& seconds, Call&& call) {
  const ScopedTimer timer(seconds);
  return std::forward<Call>(call)();
}

/// Seconds since `start` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace specdec::detail
