#pragma once
/// \file
/// \brief llama.cpp models (GGUF files) as specdec draft and target models.
///
/// Not part of the umbrella header: it needs `<llama.h>`. Link the CMake target
/// `specdec::llama_cpp` (specdec + llama.cpp's `llama`).
///
/// \code
///   auto target = specdec::llama_cpp::LoadedModel::load("target.gguf", {.threads = 1});
///   auto draft  = specdec::llama_cpp::LoadedModel::load("draft.gguf", {.threads = 1});
///   specdec::llama_cpp::check_compatible(draft.model(), target.model());  // one vocabulary
///   specdec::SpeculativeDecoder decoder(draft, target);                  // both are models
///   specdec::GenerationConfig config;
///   config.max_context = std::min(draft.max_context(), target.max_context());
///   const auto prompt = specdec::llama_cpp::tokenize(target.vocab(), "In the beginning");
///   specdec::llama_cpp::TextDecoder text(target.vocab());
///   decoder.generate(prompt, config, [&](std::span<const specdec::token_t> chunk) {
///     std::fputs(text.push(chunk).c_str(), stdout);  // whole UTF-8 characters only
///     return true;
///   });
/// \endcode
///
/// What one call does (ContextModel::operator()(context, n)):
///   1. plan against the tokens the KV cache holds (plan_cache_update): keep the longest common
///      prefix, but never past context.size() - n (logits are not cached, only keys/values);
///   2. roll the KV cache back to that prefix (llama_memory_seq_rm on sequence 0);
///   3. run the fresh tokens through llama_decode, in chunks of the context's n_batch, with
///      logits requested only for the last n positions;
///   4. return a view of llama.cpp's own logits buffer (n rows of V floats, row-major: exactly
///      specdec's TargetModel layout), valid until this model's next call. Nothing is copied
///      unless the n rows straddle two n_batch chunks (n > n_batch).
/// If llama_decode fails, the KV cache is rolled back to the kept prefix and the adapter's
/// record of cached tokens says the same, so the next call (or a fresh generate()) recomputes
/// what is missing and gives the output a fresh context would.
///
/// Tested with llama.cpp de3ff815ea7d (2026-09-28; node-llama-cpp 3.22.1's bundle), the
/// version scripts/install-llama-cpp.sh installs.

#include <llama.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if __has_include(<netdb.h>) && __has_include(<sys/socket.h>) && __has_include(<unistd.h>)
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#define SPECDEC_LLAMA_CPP_HAS_SOCKETS 1
#endif

#include "specdec/context_cache.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"

namespace specdec::llama_cpp {

/// \brief How a llama_context is created (LoadedModel) and driven (ContextModel).
struct ContextOptions {
  std::uint32_t n_ctx = 0;    ///< context length in tokens; 0 = the model's training context
  std::uint32_t n_batch = 0;  ///< most tokens per llama_decode; 0 = llama.cpp's default
  std::uint32_t n_ubatch = 0;  ///< most tokens per micro-batch inside it; 0 = llama.cpp's default
  /// Threads for one-token calls and for batches (prompt, verification). A draft and a target
  /// usually want different counts. On a busy host prefer 1: llama.cpp's threads meet at a
  /// spinning barrier, and one preempted thread stalls the others.
  int threads = 1;
  int threads_batch = 0;  ///< 0 = `threads`
  /// Flash attention: -1 auto (llama.cpp decides), 0 off, 1 on.
  int flash_attention = -1;
  /// KV cache element type (GGML_TYPE_F16 is llama.cpp's default; GGML_TYPE_F32 matches an f32
  /// reference most closely).
  ggml_type kv_type = GGML_TYPE_F16;
  /// Sequences the context can hold: 1 for chain drafts; a tree call (score_tree) needs one
  /// per leaf plus one, for the target AND for a TreeProposer's draft (it scores the tree
  /// drafted so far through the same call). llama.cpp keeps one output row per sequence, so
  /// LoadedModel::load requires n_seq_max <= min(n_ctx, n_batch) (and <= 256).
  std::uint32_t n_seq_max = 1;
  /// How errors name this model, e.g. "draft" or "target"; empty: LoadedModel uses the GGUF
  /// file's name.
  std::string name{};
};

/// \brief How a GGUF file is loaded (LoadedModel::load).
struct ModelOptions {
  /// Devices to offload the layers to, e.g. an RPC server's from rpc_device(). Empty: every
  /// device llama.cpp has registered (none but the CPU in a CPU-only build, until an RPC server
  /// is registered: load a model meant to stay local with `cpu_only`).
  std::vector<ggml_backend_dev_t> devices;
  bool cpu_only = false;  ///< offload nothing, whatever devices are registered
  int n_gpu_layers = -1;  ///< layers offloaded to those devices; -1 = all
};

namespace detail {

using specdec::detail::throw_domain_error;
using specdec::detail::throw_invalid_argument;

/// llama.cpp failed at run time (llama_decode): not the caller's input, not the model's output.
template <class... Parts>
[[noreturn]] void throw_runtime_error(const Parts&... parts) {
  throw std::runtime_error(specdec::detail::error_message(parts...));
}

/// What llama_decode's return code means (llama.h).
[[nodiscard]] inline std::string_view decode_status_meaning(std::int32_t status) noexcept {
  switch (status) {
    case 1: return "no KV cache slot for the batch: the context is full";
    case 2: return "aborted by the abort callback";
    case -1: return "invalid input batch";
    default: return status < -1 ? "fatal error inside llama.cpp" : "unknown status";
  }
}

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

/// Whether a TCP connection to "host:port" succeeds. llama.cpp's RPC client aborts the process
/// when its server does not answer, so rpc_device() asks first. Without POSIX sockets: true.
[[nodiscard]] inline bool accepts_connections(const std::string& endpoint) {
#ifdef SPECDEC_LLAMA_CPP_HAS_SOCKETS
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return false;
  const std::string host = endpoint.substr(0, colon);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  bool connected = false;
  for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return connected;
#else
  (void)endpoint;
  return true;
#endif
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
    const auto create = reinterpret_cast<New>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new"));
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

/// Sequences a llama_context can hold (llama.cpp's LLAMA_MAX_SEQ, internal to llama.cpp).
inline constexpr std::uint32_t kMaxSequences = 256;

/// What llama_init_from_model asserts on, checked first: it keeps one output row per sequence
/// and aborts the process (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) in
/// llama_context::output_reserve) when n_seq_max exceeds its output rows, n_batch, which a
/// causal model caps by n_ctx (llama-context.cpp at de3ff815ea7d: n_batch = min(n_ctx,
/// n_batch); n_outputs_max = n_batch). The n_ctx compared is the one asked for, before
/// llama.cpp rounds it up.
/// `name` (ContextOptions::name, may be empty) and `path` say which model in the message.
inline void check_context_params(const llama_context_params& params, const std::string& name,
                                 const std::filesystem::path& path) {
  const std::string model = name.empty() ? "'" + path.string() + "'"
                                         : "the " + name + " model ('" + path.string() + "')";
  const std::uint32_t n_seq_max = std::max<std::uint32_t>(1, params.n_seq_max);
  if (n_seq_max > kMaxSequences) {
    throw_invalid_argument("cannot create a llama.cpp context for ", model, ": n_seq_max = ",
                           n_seq_max, "; expected at most ", kMaxSequences,
                           " sequences (llama.cpp's limit; a tree needs one per leaf plus one)");
  }
  // n_ctx = 0 is the training context, which llama.cpp then reads itself.
  const std::uint32_t rows =
      params.n_ctx == 0 ? params.n_batch : std::min(params.n_ctx, params.n_batch);
  if (n_seq_max > rows) {
    throw_invalid_argument("cannot create a llama.cpp context for ", model, ": n_seq_max = ",
                           n_seq_max, " sequences need as many output rows, and this context ",
                           "has ", rows, " = min(n_ctx = ", params.n_ctx, ", n_batch = ",
                           params.n_batch, "); expected n_seq_max <= ", rows,
                           ", or n_ctx and n_batch >= ", n_seq_max);
  }
}

}  // namespace detail

/// \brief Whether llama.cpp prints its informational log (loading, graph sizes) to stderr.
/// Errors are always printed. Default: quiet.
inline void set_verbose(bool verbose) {
  detail::ensure_backend();
  detail::LogState& state = detail::log_state();
  const std::lock_guard lock(state.mutex);
  state.quiet = !verbose;
}

/// \brief The vocabulary size of a model (llama_vocab_n_tokens).
[[nodiscard]] inline std::size_t vocab_size(const llama_model* model) {
  return static_cast<std::size_t>(llama_vocab_n_tokens(llama_model_get_vocab(model)));
}

/// \brief Throws std::domain_error unless draft and target share one vocabulary: the same
/// tokenizer type, the same size, the same BOS/EOS handling and the same text for every token.
/// (llama.cpp's common_speculative_are_compatible allows sizes that differ by up to 128 tokens;
/// specdec compares probabilities token by token, so the rows must have the same length.)
inline void check_compatible(const llama_model* draft, const llama_model* target) {
  const llama_vocab* d = llama_model_get_vocab(draft);
  const llama_vocab* t = llama_model_get_vocab(target);
  if (llama_vocab_type(d) != llama_vocab_type(t)) {
    detail::throw_domain_error("draft and target tokenizers differ (llama_vocab_type ",
                               static_cast<int>(llama_vocab_type(d)), " vs ",
                               static_cast<int>(llama_vocab_type(t)),
                               "); expected both models to share one vocabulary");
  }
  const std::int32_t dn = llama_vocab_n_tokens(d);
  const std::int32_t tn = llama_vocab_n_tokens(t);
  if (dn != tn) {
    detail::throw_domain_error("draft vocabulary has ", dn, " tokens and the target's ", tn,
                               "; expected both models to share one vocabulary (same size)");
  }
  if (llama_vocab_get_add_bos(d) != llama_vocab_get_add_bos(t) ||
      llama_vocab_bos(d) != llama_vocab_bos(t) ||
      llama_vocab_get_add_eos(d) != llama_vocab_get_add_eos(t) ||
      llama_vocab_eos(d) != llama_vocab_eos(t)) {
    detail::throw_domain_error("draft and target differ in BOS/EOS (draft bos ",
                               llama_vocab_bos(d), " add ", llama_vocab_get_add_bos(d), ", eos ",
                               llama_vocab_eos(d), "; target bos ", llama_vocab_bos(t), " add ",
                               llama_vocab_get_add_bos(t), ", eos ", llama_vocab_eos(t),
                               "); expected the same special tokens");
  }
  for (std::int32_t i = 0; i < tn; ++i) {
    const char* dt = llama_vocab_get_text(d, i);
    const char* tt = llama_vocab_get_text(t, i);
    if (std::strcmp(dt, tt) != 0) {
      detail::throw_domain_error("draft and target vocabularies differ at token ", i,
                                 ": draft '", dt, "', target '", tt,
                                 "'; expected the same text for every token id");
    }
  }
}

/// \brief Text to token ids with the model's tokenizer. `add_special`: add BOS/EOS as the
/// model's metadata asks; `parse_special`: treat special-token text (e.g. "<|eot|>") as such.
[[nodiscard]] inline std::vector<token_t> tokenize(const llama_vocab* vocab,
                                                   std::string_view text, bool add_special = true,
                                                   bool parse_special = false) {
  if (text.size() > static_cast<std::size_t>(INT32_MAX) / 2) {
    detail::throw_invalid_argument("tokenize: text of ", text.size(),
                                   " bytes; expected at most ", INT32_MAX / 2);
  }
  std::vector<llama_token> tokens(text.size() + 2);
  const auto text_length = static_cast<std::int32_t>(text.size());
  std::int32_t count = llama_tokenize(vocab, text.data(), text_length, tokens.data(),
                                      static_cast<std::int32_t>(tokens.size()), add_special,
                                      parse_special);
  if (count < 0) {  // -count tokens are needed
    tokens.resize(static_cast<std::size_t>(-count));
    count = llama_tokenize(vocab, text.data(), text_length, tokens.data(), -count, add_special,
                           parse_special);
  }
  if (count < 0) {
    detail::throw_invalid_argument("tokenize: llama_tokenize failed (", count,
                                   ") on a text of ", text.size(), " bytes");
  }
  tokens.resize(static_cast<std::size_t>(count));
  return {tokens.begin(), tokens.end()};
}

/// \brief Token ids to text for streaming: push() returns only whole UTF-8 characters and keeps
/// an incomplete one (a character split across tokens, or across chunks) for the next push.
class TextDecoder {
 public:
  explicit TextDecoder(const llama_vocab* vocab, bool render_special = false) noexcept
      : vocab_(vocab), render_special_(render_special) {}

  /// \brief Appends the tokens' text; returns what is complete so far (a view into an internal
  /// buffer, valid until the next push or flush).
  std::string_view push(std::span<const token_t> tokens) {
    ready_.clear();
    for (const token_t token : tokens) append_piece(token);
    const std::size_t complete = complete_prefix(pending_);
    ready_.assign(pending_, 0, complete);
    pending_.erase(0, complete);
    return ready_;
  }

  /// \brief Whatever is left (an incomplete character at the end of the generation).
  std::string flush() { return std::exchange(pending_, {}); }

  /// \brief Length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
  [[nodiscard]] static std::size_t complete_prefix(std::string_view bytes) noexcept {
    // Look back at most 3 bytes for the lead byte of the last character.
    const std::size_t n = bytes.size();
    for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
      const auto byte = static_cast<unsigned char>(bytes[n - back]);
      if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking
      std::size_t length = 1;
      if ((byte & 0xE0) == 0xC0) length = 2;
      else if ((byte & 0xF0) == 0xE0) length = 3;
      else if ((byte & 0xF8) == 0xF0) length = 4;
      return back >= length ? n : n - back;  // complete, or hold the partial character
    }
    return n;  // only continuation bytes (invalid UTF-8): pass them through
  }

 private:
  void append_piece(token_t token) {
    char buffer[64];
    std::int32_t length =
        llama_token_to_piece(vocab_, token, buffer, sizeof buffer, 0, render_special_);
    if (length >= 0) {
      pending_.append(buffer, static_cast<std::size_t>(length));
      return;
    }
    std::string piece(static_cast<std::size_t>(-length), '\0');
    length = llama_token_to_piece(vocab_, token, piece.data(), -length, 0, render_special_);
    if (length > 0) pending_.append(piece.data(), static_cast<std::size_t>(length));
  }

  const llama_vocab* vocab_;
  bool render_special_;
  std::string pending_;  // bytes of an incomplete trailing character
  std::string ready_;
};

/// \brief A specdec DraftModel and TargetModel over a llama_context the caller owns: KV-cache
/// reuse and rollback on sequence 0, one llama_decode per n_batch fresh tokens, logits only
/// for the requested rows, handed out as views of llama.cpp's logits buffer.
///
/// The context must outlive this object, and nothing else may decode on it or change its
/// memory while this object is in use (call reset() after you do). Construction clears the
/// context's memory (the adapter's record of cached tokens starts empty). Not thread-safe.
class ContextModel {
 public:
  /// \param threads, threads_batch  applied with llama_set_n_threads (0 = leave as is)
  explicit ContextModel(llama_context* context, int threads = 0, int threads_batch = 0)
      : context_(context) {
    if (context_ == nullptr) {
      detail::throw_invalid_argument("llama_cpp::ContextModel: the llama_context is null");
    }
    model_ = llama_get_model(context_);
    vocab_ = llama_model_get_vocab(model_);
    vocab_size_ = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
    // llama.cpp rounds n_ctx up (to a multiple of 256); a model with learned positions (no
    // RoPE, e.g. GPT-2) has no embedding for positions past its training context, and ggml
    // asserts (aborts the process) on one. Such a model's usable context ends there.
    n_ctx_ = llama_n_ctx(context_);
    const std::int32_t trained = llama_model_n_ctx_train(model_);
    if (llama_model_rope_type(model_) == LLAMA_ROPE_TYPE_NONE && trained > 0) {
      n_ctx_ = std::min(n_ctx_, static_cast<std::size_t>(trained));
    }
    n_batch_ = llama_n_batch(context_);
    n_seq_max_ = llama_n_seq_max(context_);
    if (threads > 0) {
      llama_set_n_threads(context_, threads, threads_batch > 0 ? threads_batch : threads);
    }
    batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0, 1);
    cached_.reserve(n_ctx_);
    reset();
  }
  ~ContextModel() {
    llama_batch_free(batch_);
    if (tree_batch_.token != nullptr) llama_batch_free(tree_batch_);
  }
  ContextModel(const ContextModel&) = delete;
  ContextModel& operator=(const ContextModel&) = delete;
  ContextModel(ContextModel&& other) noexcept
      : context_(std::exchange(other.context_, nullptr)),
        model_(other.model_),
        vocab_(other.vocab_),
        vocab_size_(other.vocab_size_),
        n_ctx_(other.n_ctx_),
        n_batch_(other.n_batch_),
        n_seq_max_(other.n_seq_max_),
        batch_(std::exchange(other.batch_, llama_batch{})),
        tree_batch_(std::exchange(other.tree_batch_, llama_batch{})),
        tree_pending_(other.tree_pending_),
        tree_leaves_(other.tree_leaves_),
        tree_tokens_(std::move(other.tree_tokens_)),
        tree_parents_(std::move(other.tree_parents_)),
        tree_depth_(std::move(other.tree_depth_)),
        children_(std::move(other.children_)),
        leaf_begin_(std::move(other.leaf_begin_)),
        leaf_end_(std::move(other.leaf_end_)),
        cached_(std::move(other.cached_)),
        straddled_rows_(std::move(other.straddled_rows_)),
        name_(std::move(other.name_)) {}
  ContextModel& operator=(ContextModel&&) = delete;

  /// \brief Draft call: the V next-token logits after the whole context.
  std::span<const float> operator()(std::span<const token_t> context) {
    return (*this)(context, 1);
  }

  /// \brief Target call: n rows of V logits, row i after the first context.size() - n + 1 + i
  /// tokens. \throws std::invalid_argument for a context longer than n_ctx, n outside
  /// [1, context.size()] or a token outside [0, V); std::runtime_error if llama_decode fails
  /// (the KV cache is rolled back first).
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    check_call(context, n);
    settle_tree(context);
    const CacheUpdate plan = plan_cache_update(cached_, context, n);
    check_tokens(context, plan.keep);
    if (plan.keep < cached_.size()) roll_back(plan.keep);
    const std::span<const token_t> fresh = plan.new_tokens;
    const std::size_t chunks = (fresh.size() + n_batch_ - 1) / n_batch_;
    // The first chunk takes the remainder, so the last one is a full n_batch (or all of fresh):
    // the n output rows then come from a single llama_decode whenever n <= n_batch.
    // Only n > n_batch spreads the rows over several decodes; they are copied then.
    std::size_t begin = 0;
    std::size_t end = fresh.size() - (chunks - 1) * n_batch_;
    const std::size_t first_output = fresh.size() - n;  // index in fresh of the first row
    const bool straddles = n > n_batch_;
    if (straddles) straddled_rows_.resize(n * vocab_size_);
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      batch_.n_tokens = 0;
      for (std::size_t i = begin; i < end; ++i) {
        add_to_batch(fresh[i], static_cast<llama_pos>(plan.keep + i), i >= first_output);
      }
      decode_or_roll_back(plan.keep + begin, context.size());
      for (std::size_t i = begin; i < end; ++i) cached_.push_back(fresh[i]);
      if (straddles) copy_rows(begin, end, first_output);
      begin = end;
      end += n_batch_;
    }
    if (straddles) return straddled_rows_;
    const float* logits = llama_get_logits(context_);
    return {logits, n * vocab_size_};
  }

  /// \brief Tree call (specdec's TreeTargetModel, specdec/tree.hpp): one llama_decode scores
  /// every node of a drafted tree. Returns tokens.size() + 1 rows: row 0 after `committed`,
  /// row 1 + i after committed and the path root -> node i. Nodes are topologically ordered
  /// (parents[i] < i; -1 = a child of the committed context).
  ///
  /// Every root-to-leaf path is a llama.cpp sequence of its own (1..L; sequence 0 holds the
  /// committed tokens): the committed prefix is shared with all of them (llama_memory_seq_cp,
  /// no copy in a unified KV cache), and a node carries the ids of every leaf below it, so its
  /// attention sees exactly its ancestors. The next call's context (committed + accepted path
  /// + ...) tells which path survived: its positions move to sequence 0, the other sequences
  /// are dropped. Needs a context created with n_seq_max >= L + 1 (ContextOptions::n_seq_max;
  /// LoadedModel then makes the KV cache unified).
  /// \throws std::invalid_argument for malformed parents, a token outside [0, V), more leaves
  /// than sequences, more nodes than n_batch or the context holds; std::runtime_error if
  /// llama_decode fails (the KV cache is rolled back to the committed prefix first).
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    check_call(committed, 1);
    settle_tree(committed);  // the previous tree's layout is read here, before it is replaced
    const std::size_t leaves = plan_tree(committed, tokens, parents);

    // The committed tokens but the last, as a chain on sequence 0 (no rows wanted).
    const std::size_t c = committed.size();
    const CacheUpdate plan = plan_cache_update(cached_, committed, 1);
    check_tokens(committed, plan.keep);
    if (plan.keep < cached_.size()) roll_back(plan.keep);
    for (std::size_t begin = plan.keep; begin + 1 < c; begin += n_batch_) {
      const std::size_t end = std::min(begin + n_batch_, c - 1);
      batch_.n_tokens = 0;
      for (std::size_t i = begin; i < end; ++i) {
        add_to_batch(committed[i], static_cast<llama_pos>(i), false);
      }
      decode_or_roll_back(begin, c);
      for (std::size_t i = begin; i < end; ++i) cached_.push_back(committed[i]);
    }

    // Every path sequence shares the prefix; then one llama_decode: the last committed token
    // (all sequences, the root row) and every node (its leaves' sequences).
    llama_memory_t memory = llama_get_memory(context_);
    for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
      llama_memory_seq_cp(memory, 0, static_cast<llama_seq_id>(1 + leaf), 0,
                          static_cast<llama_pos>(c - 1));
    }
    tree_batch_.n_tokens = 0;
    add_to_tree_batch(committed[c - 1], static_cast<llama_pos>(c - 1), 0, leaves, true);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      add_to_tree_batch(tokens[i], static_cast<llama_pos>(c + tree_depth_[i]),
                        leaf_begin_[i], leaf_end_[i], false);
    }
    const std::int32_t status = llama_decode(context_, tree_batch_);
    if (status != 0) {
      for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
        llama_memory_seq_rm(memory, static_cast<llama_seq_id>(1 + leaf), -1, -1);
      }
      roll_back(c - 1);
      detail::throw_runtime_error(who(), ": llama_decode returned ", status, " (",
                                  detail::decode_status_meaning(status), ") scoring a tree of ",
                                  tokens.size(), " nodes after a context of ", c,
                                  " (n_ctx = ", n_ctx_, ")");
    }
    cached_.push_back(committed[c - 1]);
    tree_tokens_.assign(tokens.begin(), tokens.end());
    tree_parents_.assign(parents.begin(), parents.end());
    tree_leaves_ = leaves;
    tree_pending_ = true;
    return {llama_get_logits(context_), (tokens.size() + 1) * vocab_size_};
  }

  /// \brief Forgets the KV cache: the next call recomputes its whole context. Use it before
  /// each measured run, or after decoding on the context yourself.
  void reset() {
    llama_memory_clear(llama_get_memory(context_), true);
    cached_.clear();
    tree_pending_ = false;
  }

  /// \brief The tokens whose keys/values the KV cache holds (sequence 0), in position order.
  [[nodiscard]] std::span<const token_t> cached_tokens() const noexcept { return cached_; }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// \brief The longest context a call may have: llama_n_ctx, and for a model with learned
  /// positions at most its training context. Set GenerationConfig::max_context to at most this.
  [[nodiscard]] std::size_t max_context() const noexcept { return n_ctx_; }
  [[nodiscard]] llama_context* context() const noexcept { return context_; }
  /// \brief How errors name this model (ContextOptions::name; LoadedModel defaults to the GGUF
  /// file's name). Empty: "llama.cpp model".
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  [[nodiscard]] const llama_model* model() const noexcept { return model_; }
  [[nodiscard]] const llama_vocab* vocab() const noexcept { return vocab_; }

 private:
  /// "llama.cpp model 'draft'" (or "llama.cpp model" without a name): errors say which.
  [[nodiscard]] std::string who() const {
    return name_.empty() ? std::string("llama.cpp model") : "llama.cpp model '" + name_ + "'";
  }

  void check_call(std::span<const token_t> context, std::size_t n) const {
    if (context.size() > n_ctx_) {
      detail::throw_invalid_argument(who(), " called with a context of ", context.size(),
                                     " tokens, more than its n_ctx = ", n_ctx_,
                                     "; expected GenerationConfig::max_context <= max_context()");
    }
    if (n == 0 || n > context.size()) {
      detail::throw_invalid_argument(who(), " asked for ", n, " rows after a context of ",
                                     context.size(), " tokens; expected 1 <= n <= context size");
    }
  }

  /// Tokens about to reach llama_decode (those already cached were checked when they did).
  void check_tokens(std::span<const token_t> context, std::size_t from) const {
    for (std::size_t i = from; i < context.size(); ++i) {
      if (context[i] < 0 || static_cast<std::size_t>(context[i]) >= vocab_size_) {
        detail::throw_invalid_argument(who(), " got token ", context[i], " at position ",
                                       i, "; expected a token id in [0, ", vocab_size_, ")");
      }
    }
  }

  /// Checks a tree (specdec/tree.hpp's topology: one parent per token, parents[i] in [-1, i),
  /// messages behind who() + " score_tree: ") and lays it out: each node's depth (tree_depths,
  /// 0 = a child of the root), its children (ChildLinks) and, with leaves numbered in
  /// depth-first order, the range [leaf_begin, leaf_end) of the leaves below each node (its
  /// sequences are 1 + that range). Returns the number of leaves.
  std::size_t plan_tree(std::span<const token_t> committed, std::span<const token_t> tokens,
                        std::span<const std::int32_t> parents) {
    const std::size_t nodes = tokens.size();
    std::size_t height = 0;
    try {
      check_tree_sizes(nodes, parents.size());
      tree_depth_.resize(nodes);
      height = tree_depths(parents, tree_depth_);
    } catch (const std::invalid_argument& error) {
      detail::throw_invalid_argument(who(), " score_tree: ", message_without_prefix(error.what()));
    }
    if (nodes + 1 > n_batch_) {
      detail::throw_invalid_argument(who(), " score_tree: a tree of ", nodes,
                                     " nodes needs ", nodes + 1, " tokens in one llama_decode; "
                                     "expected at most n_batch = ", n_batch_);
    }
    if (committed.size() + nodes > n_ctx_) {
      detail::throw_invalid_argument(who(), " score_tree: ", committed.size(),
                                     " committed tokens and ", nodes,
                                     " nodes need more KV cells than n_ctx = ", n_ctx_);
    }
    for (std::size_t i = 0; i < nodes; ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_size_) {
        detail::throw_invalid_argument(who(), " score_tree: node ", i, " has token ",
                                       tokens[i], "; expected a token id in [0, ", vocab_size_,
                                       ")");
      }
    }
    if (committed.size() + height > n_ctx_) {
      detail::throw_invalid_argument(who(), " score_tree: a path of ", height,
                                     " nodes after ", committed.size(),
                                     " tokens exceeds n_ctx = ", n_ctx_);
    }
    children_.build(parents, nodes);
    // Depth-first: a node's leaves are contiguous in this numbering.
    leaf_begin_.assign(nodes, 0);
    leaf_end_.assign(nodes, 0);
    std::size_t leaves = 0;
    dfs_stack_.clear();
    for (std::int32_t root = children_.first(-1); root >= 0; root = children_.next(root)) {
      dfs_stack_.push_back(root);
    }
    std::reverse(dfs_stack_.begin(), dfs_stack_.end());
    dfs_order_.clear();
    while (!dfs_stack_.empty()) {
      const std::int32_t node = dfs_stack_.back();
      dfs_stack_.pop_back();
      dfs_order_.push_back(node);
      leaf_begin_[static_cast<std::size_t>(node)] = leaves;
      const std::size_t first = dfs_stack_.size();
      for (std::int32_t child = children_.first(node); child >= 0; child = children_.next(child)) {
        dfs_stack_.push_back(child);
      }
      if (dfs_stack_.size() == first) ++leaves;  // a leaf
      std::reverse(dfs_stack_.begin() + static_cast<std::ptrdiff_t>(first), dfs_stack_.end());
    }
    // A node's leaves end where the last leaf below it ends: children finish after parents in
    // the preorder, so a backward pass over it closes every range.
    for (std::size_t k = dfs_order_.size(); k-- > 0;) {
      const std::int32_t node = dfs_order_[k];
      const auto n = static_cast<std::size_t>(node);
      if (children_.first(node) < 0) leaf_end_[n] = leaf_begin_[n] + 1;
      const std::int32_t parent = parents[n];
      if (parent >= 0) {
        const auto p = static_cast<std::size_t>(parent);
        leaf_end_[p] = std::max(leaf_end_[p], leaf_end_[n]);
      }
    }
    if (leaves + 1 > n_seq_max_) {
      detail::throw_invalid_argument(who(), " score_tree: a tree with ", leaves,
                                     " leaves needs ", leaves + 1,
                                     " sequences; this context holds n_seq_max = ", n_seq_max_,
                                     " (create it with ContextOptions::n_seq_max >= ", leaves + 1,
                                     "; a TreeProposer's draft needs it as much as the target)");
    }
    if (tree_batch_.token == nullptr) {
      tree_batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0,
                                     static_cast<std::int32_t>(n_seq_max_));
    }
    return leaves;
  }

  void add_to_tree_batch(token_t token, llama_pos position, std::size_t leaf_begin,
                         std::size_t leaf_end, bool on_sequence_zero) noexcept {
    const auto i = static_cast<std::size_t>(tree_batch_.n_tokens++);
    tree_batch_.token[i] = token;
    tree_batch_.pos[i] = position;
    std::int32_t count = 0;
    if (on_sequence_zero) tree_batch_.seq_id[i][count++] = 0;
    for (std::size_t leaf = leaf_begin; leaf < leaf_end; ++leaf) {
      tree_batch_.seq_id[i][count++] = static_cast<llama_seq_id>(1 + leaf);
    }
    tree_batch_.n_seq_id[i] = count;
    tree_batch_.logits[i] = 1;
  }

  /// After a tree call: the deepest tree path that `context` continues with moves to sequence
  /// 0 (it is what verification accepted); every path sequence is dropped. The path is the one
  /// TreeContextCache keeps (deepest_followed_node searches every branch, so siblings sharing a
  /// token do not hide a deeper path behind the first of them).
  void settle_tree(std::span<const token_t> context) {
    if (!tree_pending_) return;
    tree_pending_ = false;
    llama_memory_t memory = llama_get_memory(context_);
    const std::size_t c = cached_.size();  // the tree's committed tokens, all on sequence 0
    std::int32_t deepest = -1;
    if (context.size() > c && std::equal(cached_.begin(), cached_.end(), context.begin())) {
      deepest = deepest_followed_node(tree_tokens_, tree_parents_, tree_depth_, context.subspan(c),
                                      reaches_);
    }
    if (deepest >= 0) {
      const std::size_t length = tree_path(tree_parents_, deepest, path_);
      // Any leaf below the deepest node holds the whole path at positions [c, c + length).
      const auto leaf_sequence =
          static_cast<llama_seq_id>(1 + leaf_begin_[static_cast<std::size_t>(deepest)]);
      const auto end = static_cast<llama_pos>(c + length);
      llama_memory_seq_rm(memory, leaf_sequence, end, -1);
      llama_memory_seq_cp(memory, leaf_sequence, 0, static_cast<llama_pos>(c), end);
      for (std::size_t d = 0; d < length; ++d) {
        cached_.push_back(tree_tokens_[static_cast<std::size_t>(path_[d])]);
      }
    }
    for (std::size_t leaf = 0; leaf < tree_leaves_; ++leaf) {
      llama_memory_seq_rm(memory, static_cast<llama_seq_id>(1 + leaf), -1, -1);
    }
  }

  void add_to_batch(token_t token, llama_pos position, bool wants_logits) noexcept {
    const auto i = static_cast<std::size_t>(batch_.n_tokens++);
    batch_.token[i] = token;
    batch_.pos[i] = position;
    batch_.n_seq_id[i] = 1;
    batch_.seq_id[i][0] = 0;
    batch_.logits[i] = wants_logits ? 1 : 0;
  }

  /// Drops positions [keep, ...) from the KV cache and from the record of cached tokens.
  void roll_back(std::size_t keep) {
    if (!llama_memory_seq_rm(llama_get_memory(context_), 0, static_cast<llama_pos>(keep), -1)) {
      reset();  // a memory that cannot drop a partial sequence (recurrent): start over
      return;
    }
    cached_.resize(keep);
  }

  void decode_or_roll_back(std::size_t first_position, std::size_t context_size) {
    const std::int32_t status = llama_decode(context_, batch_);
    if (status == 0) return;
    // Processed micro-batches may remain in the memory after a failure: drop everything past
    // the positions the record says are cached, so the two agree again.
    roll_back(first_position);
    detail::throw_runtime_error(who(), ": llama_decode returned ", status, " (",
                                detail::decode_status_meaning(status), ") decoding ",
                                batch_.n_tokens, " tokens at positions ", first_position, "..",
                                first_position + static_cast<std::size_t>(batch_.n_tokens) - 1,
                                " of a context of ", context_size, " (n_ctx = ", n_ctx_, ")");
  }

  void copy_rows(std::size_t begin, std::size_t end, std::size_t first_output) {
    for (std::size_t i = std::max(begin, first_output); i < end; ++i) {
      // llama_get_logits_ith takes the token's index in the batch.
      const float* logits = llama_get_logits_ith(context_, static_cast<std::int32_t>(i - begin));
      std::copy_n(logits, vocab_size_,
                  straddled_rows_.begin() +
                      static_cast<std::ptrdiff_t>((i - first_output) * vocab_size_));
    }
  }

  llama_context* context_ = nullptr;
  const llama_model* model_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::size_t vocab_size_ = 0;
  std::size_t n_ctx_ = 0;
  std::size_t n_batch_ = 0;
  std::size_t n_seq_max_ = 1;
  llama_batch batch_{};                 // (n_batch) tokens of one llama_decode
  llama_batch tree_batch_{};            // (n_batch, n_seq_max) a tree's llama_decode, on demand
  // The last tree scored (nodes), until the next call tells which path survived:
  bool tree_pending_ = false;
  std::size_t tree_leaves_ = 0;
  std::vector<token_t> tree_tokens_;         // (nodes)
  std::vector<std::int32_t> tree_parents_;   // (nodes)
  std::vector<std::size_t> tree_depth_;      // (nodes) tree_depths: 0 = a child of the root
  ChildLinks children_;                      // (nodes) the tree's child links
  std::vector<std::size_t> leaf_begin_;      // (nodes) the leaves below a node, depth-first
  std::vector<std::size_t> leaf_end_;        // (nodes)
  std::vector<std::int32_t> dfs_stack_, dfs_order_;  // (nodes) scratch
  std::vector<std::uint8_t> reaches_;        // (nodes) scratch: deepest_followed_node
  std::vector<std::int32_t> path_;           // (height) scratch: the kept path as node ids
  std::vector<token_t> cached_;         // (n_ctx) tokens held by the KV cache, sequence 0
  std::vector<float> straddled_rows_;   // (n, V) rows copied when they span two decodes
  std::string name_;                    // how errors name this model (name())
};

/// \brief A GGUF model loaded with its own context: owns the llama_model and llama_context
/// (freed together) and is a ContextModel over them.
class LoadedModel : public ContextModel {
 public:
  /// \brief Loads `path` and creates a context. \throws std::invalid_argument if the file does
  /// not exist or llama.cpp cannot load it (with llama.cpp's reason), or the context cannot be
  /// created.
  [[nodiscard]] static LoadedModel load(const std::filesystem::path& path,
                                        const ContextOptions& context_options = {},
                                        const ModelOptions& model_options = {}) {
    detail::ensure_backend();
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) {
      detail::throw_invalid_argument("cannot load GGUF model '", path.string(),
                                     "': no such file; expected a path to a .gguf file");
    }
    llama_model_params model_params = llama_model_default_params();
    std::vector<ggml_backend_dev_t> devices;  // null-terminated, as llama.cpp reads it
    if (model_options.cpu_only || !model_options.devices.empty()) {
      if (!model_options.cpu_only) devices = model_options.devices;
      devices.push_back(nullptr);
      model_params.devices = devices.data();
    }
    model_params.n_gpu_layers = model_options.n_gpu_layers;
    detail::take_last_error();
    std::unique_ptr<llama_model, detail::ModelDeleter> model(
        llama_model_load_from_file(path.string().c_str(), model_params));
    if (!model) {
      const std::string reason = detail::take_last_error();
      detail::throw_invalid_argument("cannot load GGUF model '", path.string(), "': ",
                                     reason.empty() ? "llama.cpp rejected it" : reason,
                                     "; expected a GGUF file of an architecture this llama.cpp "
                                     "supports");
    }
    llama_context_params params = llama_context_default_params();
    // 0 = the training context: llama.cpp's own 0 means 512, past the learned positions of a
    // model trained on fewer (GPT-2-style position embeddings have no row for them).
    params.n_ctx = context_options.n_ctx != 0
                       ? context_options.n_ctx
                       : static_cast<std::uint32_t>(std::max(0, llama_model_n_ctx_train(model.get())));
    if (context_options.n_batch != 0) params.n_batch = context_options.n_batch;
    if (context_options.n_ubatch != 0) params.n_ubatch = context_options.n_ubatch;
    params.n_ubatch = std::min(params.n_ubatch, params.n_batch);
    params.n_threads = context_options.threads;
    params.n_threads_batch =
        context_options.threads_batch > 0 ? context_options.threads_batch : context_options.threads;
    params.flash_attn_type = context_options.flash_attention < 0  ? LLAMA_FLASH_ATTN_TYPE_AUTO
                             : context_options.flash_attention == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                    : LLAMA_FLASH_ATTN_TYPE_ENABLED;
    params.type_k = context_options.kv_type;
    params.type_v = context_options.kv_type;
    params.n_seq_max = std::max<std::uint32_t>(1, context_options.n_seq_max);
    // Tree paths share the committed prefix: one KV stream for all sequences (seq_cp then
    // shares cells instead of copying them).
    params.kv_unified = params.n_seq_max > 1;
    params.no_perf = true;
    detail::check_context_params(params, context_options.name, path);
    std::unique_ptr<llama_context, detail::ContextDeleter> context(
        llama_init_from_model(model.get(), params));
    if (!context) {
      const std::string reason = detail::take_last_error();
      detail::throw_invalid_argument("cannot create a llama.cpp context for '", path.string(),
                                     "' (n_ctx = ", context_options.n_ctx, "): ",
                                     reason.empty() ? "llama_init_from_model failed" : reason);
    }
    // One pool for one-token calls and batches alike, or two when their thread counts differ.
    const int threads = std::max(1, context_options.threads);
    const int threads_batch =
        context_options.threads_batch > 0 ? context_options.threads_batch : threads;
    detail::CpuThreadPool pool(threads);
    detail::CpuThreadPool pool_batch;
    if (threads_batch != threads) pool_batch = detail::CpuThreadPool(threads_batch);
    if (pool.get() != nullptr) {
      llama_attach_threadpool(context.get(), pool.get(),
                              pool_batch.get() != nullptr ? pool_batch.get() : pool.get());
    }
    LoadedModel loaded(std::move(model), std::move(context), std::move(pool),
                       std::move(pool_batch));
    loaded.set_name(context_options.name.empty() ? path.filename().string()
                                                 : context_options.name);
    return loaded;
  }

  LoadedModel(LoadedModel&&) noexcept = default;

 private:
  LoadedModel(std::unique_ptr<llama_model, detail::ModelDeleter> model,
              std::unique_ptr<llama_context, detail::ContextDeleter> context,
              detail::CpuThreadPool pool, detail::CpuThreadPool pool_batch)
      // Threads were set in the context's parameters (and its pools): nothing to set again.
      : ContextModel(context.get()),
        pool_(std::move(pool)),
        pool_batch_(std::move(pool_batch)),
        owned_model_(std::move(model)),
        owned_context_(std::move(context)) {}

  // Destroyed in reverse: the context, then the model, then the pools the context used. (The
  // ContextModel base goes last; its destructor frees only its batches.)
  detail::CpuThreadPool pool_;
  detail::CpuThreadPool pool_batch_;
  std::unique_ptr<llama_model, detail::ModelDeleter> owned_model_;
  std::unique_ptr<llama_context, detail::ContextDeleter> owned_context_;
};

/// \brief Registers the llama.cpp RPC server at `endpoint` ("host:port") and returns its
/// device, for ModelOptions::devices (null-terminated list). \throws std::invalid_argument if
/// this llama.cpp was built without the RPC backend or the server does not answer.
[[nodiscard]] inline ggml_backend_dev_t rpc_device(const std::string& endpoint) {
  detail::ensure_backend();
  ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
  if (rpc == nullptr) {  // a build with dynamically loaded backends
    ggml_backend_load_all();
    rpc = ggml_backend_reg_by_name("RPC");
  }
  if (rpc == nullptr) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "': this llama.cpp has no RPC backend; expected one built "
                                   "with -DGGML_RPC=ON");
  }
  if (!detail::accepts_connections(endpoint)) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "' did not answer; expected a running ggml-rpc-server there "
                                   "(host:port)");
  }
  using AddServer = ggml_backend_reg_t (*)(const char*);
  const auto add_server =
      reinterpret_cast<AddServer>(ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"));
  if (add_server == nullptr) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "': this llama.cpp's RPC backend has no "
                                   "ggml_backend_rpc_add_server");
  }
  ggml_backend_reg_t server = add_server(endpoint.c_str());
  if (server == nullptr || ggml_backend_reg_dev_count(server) == 0) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "' did not answer; expected a running ggml-rpc-server there");
  }
  // add_server returns the same registry for an endpoint seen before: register it once.
  bool registered = false;
  for (std::size_t i = 0; i < ggml_backend_reg_count(); ++i) {
    registered = registered || ggml_backend_reg_get(i) == server;
  }
  if (!registered) ggml_backend_register(server);
  return ggml_backend_reg_dev_get(server, 0);
}

}  // namespace specdec::llama_cpp
