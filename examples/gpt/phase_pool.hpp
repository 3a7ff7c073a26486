// PhasePool: the example GPT's worker threads. A forward call is a sequence of phases (one per
// matrix product: attention, projection, MLP up, MLP down, LM head); a phase is a number of
// independent items (ranges of output rows, groups of attention heads). Every thread of the pool,
// the caller included, claims items of the current phase one at a time from a shared counter;
// whoever completes the phase's last item runs the serial step between phases (layer norms) and
// opens the next phase. So:
//   * one synchronisation point per phase, and no thread ever waits for a *particular* other
//     thread: an item left unclaimed by a worker that is asleep or preempted is taken by whoever
//     is running. On a loaded host the pool degrades towards one thread instead of stalling on
//     a descheduled one (a static split would wait a whole time slice for it).
//   * waiting spins briefly (kSpinTime), then blocks (std::atomic wait / notify: a futex on
//     Linux), so a thread that cannot run never keeps a core busy, and a blocked caller frees its
//     core for the thread it waits on.
//   * the results do not depend on which thread runs an item, nor on the number of threads: the
//     items are a fixed function of the phase and the thread count, every output value belongs to
//     exactly one item, and no sum is split between items (see gpt_model.hpp).
// A run allocates nothing; the pool's threads live from construction to destruction.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace specdec::examples::detail {

/// A hint to the core that this thread is spinning (x86 PAUSE, ARM YIELD).
inline void cpu_relax() noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  __builtin_ia32_pause();
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// \brief A persistent pool of threads that run a job as a sequence of phases of items.
///
/// Requires: run() is called by one thread at a time (the owner's), and the job's functions do
/// not throw. The pool does not know the model: a job is two function pointers and a context.
class PhasePool {
 public:
  /// How long a thread with nothing to do spins before it blocks. Long enough to cover the
  /// serial step between two phases and the imbalance of a phase (microseconds), short enough
  /// that an idle pool gives its core back quickly (between calls, e.g. while a draft model runs).
  static constexpr std::chrono::microseconds kSpinTime{50};
  /// Most items a phase may have (the item counter's width).
  static constexpr std::uint32_t kMaxItems = (1u << 12) - 1;

  /// A job: run_item(context, item, thread) computes item `item` (< the phase's item count) of
  /// the current phase on thread `thread` (0 = the caller of run(), 1 .. threads() - 1 the
  /// workers: an index for per-thread scratch); finish_phase(context) runs on exactly one thread
  /// once every item of the phase is done, with their results visible, and returns the next
  /// phase's item count (0 ends the job). Both see the writes of everything that ran before them.
  struct Job {
    void* context = nullptr;
    void (*run_item)(void* context, std::uint32_t item, std::size_t thread) noexcept = nullptr;
    std::uint32_t (*finish_phase)(void* context) noexcept = nullptr;
  };

  /// Starts threads - 1 workers (the caller of run() is the first thread).
  /// \throws std::invalid_argument for threads == 0, std::system_error if a thread cannot start.
  explicit PhasePool(std::size_t threads) {
    if (threads == 0) throw std::invalid_argument("specdec: PhasePool needs at least 1 thread");
    workers_.reserve(threads - 1);
    try {
      for (std::size_t t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
    } catch (...) {
      stop_workers();
      throw;
    }
  }

  ~PhasePool() { stop_workers(); }

  PhasePool(const PhasePool&) = delete;
  PhasePool& operator=(const PhasePool&) = delete;

  [[nodiscard]] std::size_t threads() const noexcept { return workers_.size() + 1; }

  /// Runs `job` from a first phase of `first_items` items (>= 1, <= kMaxItems) until its
  /// finish_phase returns 0; the calling thread works too. Returns when the job is over, with
  /// every write of the job visible to the caller.
  void run(const Job& job, std::uint32_t first_items) noexcept {
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    publish(first_items);  // releases job_ and done_ with the phase
    std::uint64_t word = state_.load(std::memory_order_acquire);
    // A word with no items is the job's end: claim_and_run may return having seen it (a failed
    // claim reloads the word), so it is checked before every wait.
    while (items_of(word) != 0) {
      if (!claim_and_run(word, 0) && items_of(word) != 0) word = wait_for_change(word);
    }
  }

 private:
  // The state word: [63:24] phase tag (a counter, +1 per phase), [23:12] next unclaimed item,
  // [11:0] the phase's item count. Claiming an item is one compare-and-swap on the whole word,
  // so a thread that read the word of a phase that has ended since cannot claim anything.
  static constexpr unsigned kCountBits = 12;
  static constexpr std::uint64_t kItemMask = (std::uint64_t{1} << kCountBits) - 1;
  static constexpr std::uint64_t kNextUnit = std::uint64_t{1} << kCountBits;
  static constexpr std::uint64_t kTagUnit = std::uint64_t{1} << (2 * kCountBits);

  static std::uint32_t items_of(std::uint64_t word) noexcept {
    return static_cast<std::uint32_t>(word & kItemMask);
  }
  static std::uint32_t next_of(std::uint64_t word) noexcept {
    return static_cast<std::uint32_t>((word >> kCountBits) & kItemMask);
  }

  /// Opens a phase of `items` items (0: the job is over) and wakes the threads that sleep.
  void publish(std::uint32_t items) noexcept {
    const std::uint64_t tag = (state_.load(std::memory_order_relaxed) | (kTagUnit - 1)) + 1;
    // seq_cst (with signal_ and sleepers_): a thread going to sleep either sees the new word or
    // is counted in sleepers_ here and woken.
    state_.store(tag | items, std::memory_order_seq_cst);
    signal_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) signal_.notify_all();
  }

  /// Claims the next item of `word`'s phase and runs it; false if there is none left (or the
  /// phase has ended). `word` is updated to the state seen.
  bool claim_and_run(std::uint64_t& word, std::size_t thread) noexcept {
    while (next_of(word) < items_of(word)) {
      if (state_.compare_exchange_weak(word, word + kNextUnit, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        const std::uint32_t items = items_of(word);
        job_.run_item(job_.context, next_of(word), thread);
        // acq_rel: the thread that completes the phase sees every item's writes.
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == items) {
          done_.store(0, std::memory_order_relaxed);
          publish(job_.finish_phase(job_.context));
        }
        word = state_.load(std::memory_order_acquire);
        return true;
      }
    }
    return false;
  }

  /// Waits until the state word differs from `word` (or the pool stops): spins for kSpinTime,
  /// then blocks. Returns the new word.
  std::uint64_t wait_for_change(std::uint64_t word) noexcept {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point spin_until = Clock::now() + kSpinTime;
    for (unsigned i = 1;; ++i) {
      const std::uint64_t now = state_.load(std::memory_order_acquire);
      if (now != word) return now;
      cpu_relax();
      if (i % 64 == 0 && Clock::now() > spin_until) break;
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      const std::uint32_t signal = signal_.load(std::memory_order_seq_cst);
      const std::uint64_t now = state_.load(std::memory_order_seq_cst);
      if (now != word) {
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        return now;
      }
      signal_.wait(signal, std::memory_order_seq_cst);
    }
  }

  void work(std::size_t thread) noexcept {
    std::uint64_t word = state_.load(std::memory_order_acquire);
    // stop_ is checked again after a failed claim: a claim that fails refreshes `word`, and the
    // word it finds may be stop_workers' own, which never changes again. (A worker descheduled
    // with a word of a job's last phase, whose items the caller finished before the pool was
    // destroyed, then waited for that word to change, and the destructor's join for it: the
    // pool's test hung in ~1 of 200 runs under load.)
    while (!stop_.load(std::memory_order_acquire)) {
      if (!claim_and_run(word, thread) && !stop_.load(std::memory_order_acquire)) {
        word = wait_for_change(word);
      }
    }
  }

  void stop_workers() noexcept {
    stop_.store(true, std::memory_order_release);
    publish(0);  // a new word: every waiting worker wakes and sees stop_
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

  alignas(64) std::atomic<std::uint64_t> state_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};    // items of the current phase completed
  alignas(64) std::atomic<std::uint32_t> signal_{0};  // bumped by every publish: the futex word
  std::atomic<std::uint32_t> sleepers_{0};            // threads blocked (or about to) on signal_
  std::atomic<bool> stop_{false};
  alignas(64) Job job_;  // written by run() before its first phase is published
  std::vector<std::thread> workers_;
};

}  // namespace specdec::examples::detail
