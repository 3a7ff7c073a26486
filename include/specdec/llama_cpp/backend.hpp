#pragma once
/// \file
/// \brief The llama.cpp backend, once per process: llama_backend_init, the log callback that
/// keeps llama.cpp's last error (set_verbose), the heap setting a decoding process wants
/// (keep_freed_heap), and the owners of llama.cpp objects (a CPU thread pool, model and context
/// deleters) the loaded models use.

#include <llama.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace specdec::llama_cpp {

namespace detail {

/// The last error llama.cpp logged, kept so that a failed load can say why (llama.cpp reports
/// the reason through its log callback, not through the return value).
struct LogState {
  std::mutex mutex;
  std::string last_error;
  bool quiet = true;
};

inline LogState& log_state() {
  static LogState state;
  return state;
}

inline void log_callback(ggml_log_level level, const char* text, void* /*user*/) {
  LogState& state = log_state();
  const std::lock_guard lock(state.mutex);
  if (level == GGML_LOG_LEVEL_ERROR) {
    state.last_error = text;
    while (!state.last_error.empty() &&
           (state.last_error.back() == '\n' || state.last_error.back() == ' ')) {
      state.last_error.pop_back();
    }
  }
  if (!state.quiet || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

inline std::string take_last_error() {
  LogState& state = log_state();
  const std::lock_guard lock(state.mutex);
  return std::exchange(state.last_error, {});
}

/// llama_backend_init() and the log callback, once per process.
inline void ensure_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(log_callback, nullptr);
    llama_backend_init();
  });
}

/// A CPU thread pool attached to a context, created through the CPU backend's registry (so that
/// nothing links ggml-cpu directly): the thread setup llama.cpp's own programs use (common's
/// threadpools), instead of a pool ggml makes and frees around every graph it computes.
class CpuThreadPool {
 public:
  CpuThreadPool() = default;
  explicit CpuThreadPool(int threads) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == nullptr) return;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    using New = ggml_threadpool* (*)(ggml_threadpool_params*);
    const auto create =
        reinterpret_cast<New>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new"));
    free_ = reinterpret_cast<Free>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free"));
    if (create == nullptr || free_ == nullptr) return;
    ggml_threadpool_params params = ggml_threadpool_params_default(threads);
    pool_ = create(&params);
  }
  ~CpuThreadPool() {
    if (pool_ != nullptr) free_(pool_);
  }
  CpuThreadPool(CpuThreadPool&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), free_(other.free_) {}
  CpuThreadPool& operator=(CpuThreadPool&& other) noexcept {
    std::swap(pool_, other.pool_);
    std::swap(free_, other.free_);
    return *this;
  }
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;
  [[nodiscard]] ggml_threadpool* get() const noexcept { return pool_; }

 private:
  using Free = void (*)(ggml_threadpool*);
  ggml_threadpool* pool_ = nullptr;
  Free free_ = nullptr;
};

struct ModelDeleter {
  void operator()(llama_model* model) const noexcept { llama_model_free(model); }
};
struct ContextDeleter {
  void operator()(llama_context* context) const noexcept { llama_free(context); }
};

}  // namespace detail

/// \brief Whether llama.cpp prints its informational log (loading, graph sizes) to stderr.
/// Errors are always printed. Default: quiet.
inline void set_verbose(bool verbose) {
  detail::ensure_backend();
  detail::LogState& state = detail::log_state();
  const std::lock_guard lock(state.mutex);
  state.quiet = !verbose;
}

/// \brief Keeps the memory a decoding process frees for its next call: glibc's malloc stops
/// returning the top of its heap to the system and serves blocks of up to 32 MiB from the heap.
/// Process-wide, so the program decides: call it once at startup, before loading. Returns
/// whether it applied (false off glibc, where it does nothing).
///
/// Every llama_decode copies its KV cache's cell state and frees the copy (99.5 KB for the
/// shipped target holding 8 sequences of 260 positions). Where that block ends glibc's heap,
/// the free shrinks the heap by more than its 128 KB trim threshold and the next call grows it
/// again: two system calls and fresh zeroed pages per call. Whether it ends the heap depends
/// on what else the process allocated: plain batched decoding of 8 sequences on the shipped
/// Q8_0 pair ran 3-5 % slower in its target calls with a ModelProposer over an unused draft
/// than without one (strace: two brk calls per step against none), and equal with this set.
inline bool keep_freed_heap() noexcept {
#if defined(__GLIBC__)
  // Setting either disables glibc's adaptive thresholds, so both are set: 32 MiB is the
  // largest mmap threshold glibc would adapt to on its own.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
#else
  return false;
#endif
}

}  // namespace specdec::llama_cpp
