#pragma once
/// \file
/// \brief BatchedModel: a specdec BatchedTargetModel and BatchedDraftModel over one llama_context:
/// every sequence of a BatchedDecoder on a llama.cpp sequence of its own, all of a call's rows
/// in one llama_decode.
///
/// What one call does (score_batch, draft_batch: a request per sequence):
///   1. each specdec sequence id holds a llama.cpp sequence id (taken from a free list when the
///      id is first seen, given back by release(id): BatchedDecoder calls it when the sequence
///      leaves); more sequences at once than the context's n_seq_max is a std::invalid_argument
///      naming the sequence, before anything changes;
///   2. per sequence, as ContextModel does on sequence 0 (plan_cache_update): keep the longest
///      common prefix of its cached tokens and its context, but never past the rows it wants;
///      drop the rest of its KV cells (llama_memory_seq_rm);
///   3. one llama_batch of every sequence's fresh tokens, each on its own llama.cpp sequence at
///      its own positions, logits requested only for the rows wanted; first every sequence's
///      tokens without rows (a prompt, a rejected draft's replacement), then every sequence's
///      rows, request by request. When it holds more than n_batch tokens it is cut into several
///      llama_decode calls from the front, so the rows all land in the last one whenever they
///      number at most n_batch;
///   4. returns a view of llama.cpp's logits buffer: request i's rows right after request i-1's,
///      exactly the layout score_batch promises. Nothing is copied unless the rows outnumber
///      n_batch.
/// If llama_decode fails, every sequence of the call is rolled back to its kept prefix (cells a
/// processed micro-batch left behind are dropped) and the error names the call's sequences; the
/// next call recomputes what is missing.
///
/// The context. batched_context_options(sequences, per_sequence) sizes one for a batch: n_seq_max
/// = sequences, n_ctx = sequences * per_sequence cells, n_ubatch = n_batch, and by default a
/// split KV cache (ContextOptions::kv_unified = 0: one stream of per_sequence cells per
/// sequence). Why:
///   - llama.cpp cuts a llama_decode into micro-batches of at most n_ubatch tokens, each one
///     graph evaluation; n_ubatch = n_batch makes a call of up to n_batch tokens one micro-batch
///     as far as the cache's layout allows;
///   - a unified cache (one stream the sequences share) cuts the batch in order (split_simple):
///     one micro-batch per call, but every token's attention runs over the cells of every
///     sequence (masked), so its cost grows with B * context;
///   - a split cache attends over each sequence's own cells only, but cuts micro-batches with
///     the same number of tokens from each sequence (split_equal), so unequal row counts (a
///     joining prompt, a draft cut short) cost several graphs per call;
///   - either way a sequence's tokens may span micro-batches, which is correct for a causal
///     model: its later tokens attend to the cells the earlier micro-batch wrote.
/// Measured on the shipped pair at B = 16, 1 thread (docs/llama_cpp.md, "Batched decoding"), the
/// split cache decoded 1.7x (speculative) and 1.5x (plain) the tokens/s of the unified one, so
/// it is the default; pass kv_unified = 1 in `options` for the other. Tree calls
/// (ContextModel::score_tree) need the unified one; BatchedModel makes none.

/// Rows depend on the batch's composition through ggml's kernels (a matrix product of 40 rows
/// may sum in another order than one of 9): bit-identical rows across batches are not promised,
/// only the model's rows up to that rounding (tests/llama_cpp/llama_cpp_batched_test.cpp counts
/// the near-ties this can flip).

#include <llama.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/batch/draft.hpp"
#include "specdec/batch/target.hpp"
#include "specdec/context_cache.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/llama_cpp/context_model.hpp"
#include "specdec/llama_cpp/detail/error.hpp"
#include "specdec/llama_cpp/options.hpp"
#include "specdec/types.hpp"

namespace specdec::llama_cpp {

/// \brief ContextOptions for a context that decodes `sequences` sequences at once, each up to
/// `per_sequence` tokens: n_ctx = sequences * per_sequence, n_ubatch = n_batch, a split KV
/// cache unless `options` asks for a unified one (file comment). The rest comes from `options`
/// (threads, name, KV type, ...); its n_batch, if set, is kept. Pass the result to
/// LoadedModel::load.
[[nodiscard]] inline ContextOptions batched_context_options(std::uint32_t sequences,
                                                            std::uint32_t per_sequence,
                                                            ContextOptions options = {}) {
  options.n_seq_max = std::max<std::uint32_t>(1, sequences);
  options.n_ctx = options.n_seq_max * per_sequence;
  if (options.n_batch == 0) options.n_batch = 2048;  // llama.cpp's default
  options.n_batch = std::max(options.n_batch, options.n_seq_max);
  options.n_ubatch = options.n_batch;
  if (options.kv_unified < 0) options.kv_unified = 0;
  return options;
}

/// \brief Many sequences on one llama_context (file comment): a TargetModel and DraftModel with
/// score_batch, draft_batch and release, for BatchedDecoder.
///
/// Drives the context of a ContextModel (usually a LoadedModel, which owns it and must outlive
/// this object); construction clears the context's memory. While this object is in use nothing
/// else may decode on the context, the ContextModel included (call reset() on both before going
/// back to it). The plain calls (operator()) decode a sequence of their own, as if it had an id
/// no batch uses. Not thread-safe. On glibc, call keep_freed_heap() (backend.hpp) once in the
/// program: llama_decode's per-call copy of a many-sequence KV cache's cells otherwise may cost
/// every call fresh pages.
class BatchedModel {
 public:
  explicit BatchedModel(ContextModel& model)
      : context_(model.context()),
        vocab_size_(model.vocab_size()),
        n_batch_(llama_n_batch(model.context())),
        name_(model.name()) {
    model.reset();
    // A sequence's positions are bounded by the model's (ContextModel::max_context: learned
    // positions end at the training context) and by its share of a split KV cache.
    max_context_ =
        std::min(model.max_context(), static_cast<std::size_t>(llama_n_ctx_seq(context_)));
    const std::size_t sequences = llama_n_seq_max(context_);
    slots_.resize(sequences);
    free_.reserve(sequences);
    parts_.reserve(sequences + 1);
    batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0, 1);
    reset();
  }
  ~BatchedModel() { llama_batch_free(batch_); }

  /// \brief How a call's cost grows with the sequences' rows (batch/target.hpp): a split KV
  /// cache cuts a call into micro-batches of equal rows per sequence (one pass per distinct
  /// row count); a unified one decodes it in one pass.
  [[nodiscard]] BatchCallShape batch_call_shape() const noexcept {
    const bool split =
        llama_n_seq_max(context_) > 1 && llama_n_ctx_seq(context_) < llama_n_ctx(context_);
    return split ? BatchCallShape::equal_micro_batches : BatchCallShape::one_pass;
  }
  BatchedModel(const BatchedModel&) = delete;
  BatchedModel& operator=(const BatchedModel&) = delete;
  BatchedModel(BatchedModel&& other) noexcept
      : context_(std::exchange(other.context_, nullptr)),
        vocab_size_(other.vocab_size_),
        n_batch_(other.n_batch_),
        max_context_(other.max_context_),
        name_(std::move(other.name_)),
        slots_(std::move(other.slots_)),
        free_(std::move(other.free_)),
        parts_(std::move(other.parts_)),
        stream_(std::move(other.stream_)),
        straddled_rows_(std::move(other.straddled_rows_)),
        batch_(std::exchange(other.batch_, llama_batch{})) {}
  BatchedModel& operator=(BatchedModel&&) = delete;

  // ---- the batched calls ----------------------------------------------------------------------

  /// \brief BatchedTargetModel (batch/target.hpp): Σ requests[i].rows rows, request by request.
  /// \throws std::invalid_argument (nothing changed) for a duplicate id, a context longer than
  /// max_context(), rows outside [1, context size], a token outside [0, V), more sequences than
  /// n_seq_max; std::runtime_error if llama_decode fails (the call's sequences rolled back).
  std::span<const float> score_batch(std::span<const ScoreRequest> requests) {
    parts_.clear();
    for (const ScoreRequest& request : requests) {
      parts_.push_back({Owner::sequence, request.id, request.context, request.rows});
    }
    return decode_parts();
  }

  /// \brief BatchedDraftModel (batch/draft.hpp): one row per request, after its whole context.
  /// Throws as score_batch.
  std::span<const float> draft_batch(std::span<const DraftStepRequest> requests) {
    parts_.clear();
    for (const DraftStepRequest& request : requests) {
      parts_.push_back({Owner::sequence, request.id, request.context, 1});
    }
    return decode_parts();
  }

  /// \brief Sequence `id` left: its KV cells are dropped and its llama.cpp sequence goes back to
  /// the free list (the next new id takes it). An id this model does not hold is ignored.
  void release(sequence_id id) noexcept {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].owner == Owner::sequence && slots_[s].id == id) free_slot(s);
    }
  }

  // ---- one sequence: TargetModel, DraftModel --------------------------------------------------

  /// \brief Draft call on the plain sequence (its own llama.cpp sequence, held until reset()).
  std::span<const float> operator()(std::span<const token_t> context) {
    return (*this)(context, 1);
  }
  /// \brief Target call on the plain sequence: n rows, as ContextModel's.
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    parts_.clear();
    parts_.push_back({Owner::plain, 0, context, n});
    return decode_parts();
  }

  /// \brief Forgets every sequence: memory cleared, every llama.cpp sequence free.
  void reset() {
    llama_memory_clear(llama_get_memory(context_), true);
    free_.clear();
    // Taken from the back: sequence 0 first, and a released one is the next taken.
    for (std::size_t s = slots_.size(); s-- > 0;) {
      slots_[s].owner = Owner::none;
      slots_[s].cached.clear();
      free_.push_back(s);
    }
  }

  // ---- what it holds ----------------------------------------------------------------------------

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// \brief The longest context one sequence may have (set GenerationConfig::max_context to at
  /// most this): the model's, and a split KV cache's share (llama_n_ctx_seq). In a unified cache
  /// the sequences share the cells: together they may need more than it holds, which is
  /// llama_decode's "no KV cache slot" (a std::runtime_error).
  [[nodiscard]] std::size_t max_context() const noexcept { return max_context_; }
  /// \brief Sequences it can hold at once: the context's n_seq_max.
  [[nodiscard]] std::size_t max_sequences() const noexcept { return slots_.size(); }
  /// \brief Sequences holding a llama.cpp sequence now (the plain one included).
  [[nodiscard]] std::size_t sequences_held() const noexcept { return slots_.size() - free_.size(); }
  /// \brief The llama.cpp sequence that specdec sequence `id` holds, or -1.
  [[nodiscard]] llama_seq_id llama_sequence(sequence_id id) const noexcept {
    const std::size_t s = find(Owner::sequence, id);
    return s == kNone ? -1 : static_cast<llama_seq_id>(s);
  }
  /// \brief The tokens whose cells sequence `id` holds (empty if it holds none).
  [[nodiscard]] std::span<const token_t> cached_tokens(sequence_id id) const noexcept {
    const std::size_t s = find(Owner::sequence, id);
    return s == kNone ? std::span<const token_t>{} : std::span<const token_t>(slots_[s].cached);
  }
  [[nodiscard]] llama_context* context() const noexcept { return context_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  enum class Owner : std::uint8_t { none, sequence, plain };
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  /// One llama.cpp sequence: who holds it and the tokens its cells hold, in position order.
  struct Slot {
    Owner owner = Owner::none;
    sequence_id id = 0;
    std::vector<token_t> cached;  // (max_context) reserved when first taken
  };
  /// One request of the call being decoded.
  struct Part {
    Owner owner;
    sequence_id id;
    std::span<const token_t> context;
    std::size_t rows;
    std::size_t slot = kNone;  // its llama.cpp sequence
    std::size_t keep = 0;      // cached tokens kept
  };
  /// One token of the call's llama_batch.
  struct StreamToken {
    token_t token;
    llama_pos position;
    llama_seq_id sequence;
    bool output;
  };

  [[nodiscard]] std::string who() const {
    return name_.empty() ? std::string("llama.cpp model") : "llama.cpp model '" + name_ + "'";
  }
  /// "sequence 7" or "the plain sequence": how errors name a request.
  [[nodiscard]] static std::string part_name(const Part& part) {
    return part.owner == Owner::plain ? std::string("the plain sequence")
                                      : "sequence " + std::to_string(part.id);
  }

  [[nodiscard]] std::size_t find(Owner owner, sequence_id id) const noexcept {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].owner == owner && (owner == Owner::plain || slots_[s].id == id)) return s;
    }
    return kNone;
  }

  void free_slot(std::size_t s) noexcept {
    llama_memory_seq_rm(llama_get_memory(context_), static_cast<llama_seq_id>(s), -1, -1);
    slots_[s].owner = Owner::none;
    slots_[s].cached.clear();
    free_.push_back(s);
  }

  /// Checks every part and plans it against its sequence's cache; throws before changing
  /// anything.
  void check_and_plan() {
    std::size_t new_sequences = 0;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      Part& part = parts_[i];
      for (std::size_t j = 0; j < i; ++j) {
        if (parts_[j].owner == part.owner && parts_[j].id == part.id) {
          detail::throw_invalid_argument(who(), ": ", part_name(part),
                                         " appears twice in one call; expected distinct ids");
        }
      }
      if (part.context.size() > max_context_) {
        detail::throw_invalid_argument(who(), ": ", part_name(part), " has a context of ",
                                       part.context.size(),
                                       " tokens, more than max_context = ", max_context_,
                                       "; expected GenerationConfig::max_context <= "
                                       "max_context()");
      }
      if (part.rows == 0 || part.rows > part.context.size()) {
        detail::throw_invalid_argument(who(), ": ", part_name(part), " asked for ", part.rows,
                                       " rows after a context of ", part.context.size(),
                                       " tokens; expected 1 <= rows <= context size");
      }
      part.slot = find(part.owner, part.id);
      if (part.slot == kNone) ++new_sequences;
      const std::span<const token_t> cached =
          part.slot == kNone ? std::span<const token_t>{} : slots_[part.slot].cached;
      part.keep = plan_cache_update(cached, part.context, part.rows).keep;
      for (std::size_t p = part.keep; p < part.context.size(); ++p) {
        const token_t token = part.context[p];
        if (token < 0 || static_cast<std::size_t>(token) >= vocab_size_) {
          detail::throw_invalid_argument(who(), ": ", part_name(part), " has token ", token,
                                         " at position ", p, "; expected a token id in [0, ",
                                         vocab_size_, ")");
        }
      }
    }
    if (new_sequences > free_.size()) {
      // The first new sequence past the free ones is the one that does not fit.
      std::ostringstream held, taken;
      std::size_t count = 0;
      for (const Slot& slot : slots_) {
        if (slot.owner == Owner::none) continue;
        held << (count++ ? ", " : "")
             << (slot.owner == Owner::plain ? std::string("the plain sequence")
                                            : std::to_string(slot.id));
      }
      const Part* unfit = nullptr;
      std::size_t fitting = 0;
      for (const Part& part : parts_) {
        if (part.slot != kNone) continue;
        if (fitting == free_.size()) {
          unfit = &part;
          break;
        }
        taken << (fitting++ ? ", " : "") << part_name(part);
      }
      detail::throw_invalid_argument(
          who(), ": ", part_name(*unfit),
          " needs a llama.cpp sequence of its own and none is left: this context holds "
          "n_seq_max = ",
          slots_.size(), " (held by ", count == 0 ? std::string("none") : held.str(),
          fitting == 0 ? std::string() : "; taken in this call by " + taken.str(),
          "); expected at most n_seq_max sequences at once (create the context with "
          "batched_context_options or ContextOptions::n_seq_max), or release() those that left");
    }
  }

  std::span<const float> decode_parts() {
    check_and_plan();
    // Past the checks: nothing below throws before llama_decode.
    llama_memory_t memory = llama_get_memory(context_);
    std::size_t prefix_tokens = 0, rows = 0;
    for (Part& part : parts_) {
      if (part.slot == kNone) {
        part.slot = free_.back();
        free_.pop_back();
        Slot& slot = slots_[part.slot];
        slot.owner = part.owner;
        slot.id = part.id;
        slot.cached.reserve(max_context_);
      }
      Slot& slot = slots_[part.slot];
      if (part.keep < slot.cached.size()) {
        const auto sequence = static_cast<llama_seq_id>(part.slot);
        if (!llama_memory_seq_rm(memory, sequence, static_cast<llama_pos>(part.keep), -1)) {
          // A memory that cannot drop part of a sequence (recurrent): start it over.
          llama_memory_seq_rm(memory, sequence, -1, -1);
          part.keep = 0;
        }
        slot.cached.resize(part.keep);
      }
      prefix_tokens += part.context.size() - part.rows - part.keep;
      rows += part.rows;
    }

    // The call's tokens: every sequence's tokens without rows, then every sequence's rows, so
    // that the rows come last, request by request (the order llama.cpp returns them in).
    stream_.clear();
    for (const Part& part : parts_) {
      for (std::size_t p = part.keep; p + part.rows < part.context.size(); ++p) {
        stream_.push_back({part.context[p], static_cast<llama_pos>(p),
                           static_cast<llama_seq_id>(part.slot), false});
      }
    }
    for (const Part& part : parts_) {
      for (std::size_t p = part.context.size() - part.rows; p < part.context.size(); ++p) {
        stream_.push_back({part.context[p], static_cast<llama_pos>(p),
                           static_cast<llama_seq_id>(part.slot), true});
      }
    }
    const std::size_t total = prefix_tokens + rows;
    // The first llama_decode takes the remainder, so the last is a full n_batch (or all): the
    // rows then come from that one whenever rows <= n_batch; else they are copied.
    const std::size_t chunks = (total + n_batch_ - 1) / n_batch_;
    const bool straddles = rows > n_batch_;
    if (straddles) straddled_rows_.resize(rows * vocab_size_);
    std::size_t begin = 0;
    std::size_t end = total - (chunks - 1) * n_batch_;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      batch_.n_tokens = 0;
      for (std::size_t k = begin; k < end; ++k) {
        const StreamToken& t = stream_[k];
        const auto i = static_cast<std::size_t>(batch_.n_tokens++);
        batch_.token[i] = t.token;
        batch_.pos[i] = t.position;
        batch_.n_seq_id[i] = 1;
        batch_.seq_id[i][0] = t.sequence;
        batch_.logits[i] = t.output ? 1 : 0;
      }
      decode_or_roll_back();
      if (straddles) {
        for (std::size_t k = std::max(begin, prefix_tokens); k < end; ++k) {
          const float* logits =
              llama_get_logits_ith(context_, static_cast<std::int32_t>(k - begin));
          std::copy_n(logits, vocab_size_,
                      straddled_rows_.begin() +
                          static_cast<std::ptrdiff_t>((k - prefix_tokens) * vocab_size_));
        }
      }
      begin = end;
      end += n_batch_;
    }
    for (const Part& part : parts_) {
      std::vector<token_t>& cached = slots_[part.slot].cached;
      cached.insert(cached.end(), part.context.begin() + static_cast<std::ptrdiff_t>(part.keep),
                    part.context.end());
    }
    if (straddles) return straddled_rows_;
    return {llama_get_logits(context_), rows * vocab_size_};
  }

  /// One llama_decode of batch_; on failure every sequence of the call goes back to its kept
  /// prefix (a processed micro-batch's cells stay in the memory otherwise), then the error.
  void decode_or_roll_back() {
    const std::int32_t status = llama_decode(context_, batch_);
    if (status == 0) return;
    llama_memory_t memory = llama_get_memory(context_);
    std::ostringstream names;
    std::size_t tokens = 0;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      const Part& part = parts_[i];
      if (!llama_memory_seq_rm(memory, static_cast<llama_seq_id>(part.slot),
                               static_cast<llama_pos>(part.keep), -1)) {
        llama_memory_seq_rm(memory, static_cast<llama_seq_id>(part.slot), -1, -1);
        slots_[part.slot].cached.clear();
      }
      names << (i ? ", " : "") << part_name(part);
      tokens += part.context.size();
    }
    detail::throw_runtime_error(who(), ": llama_decode returned ", status, " (",
                                detail::decode_status_meaning(status), ") decoding ",
                                batch_.n_tokens, " tokens for ", names.str(), " (", tokens,
                                " tokens of context in all; n_ctx = ", llama_n_ctx(context_),
                                " cells, ", llama_n_ctx_seq(context_), " per sequence)");
  }

  llama_context* context_ = nullptr;
  std::size_t vocab_size_ = 0;
  std::size_t n_batch_ = 0;
  std::size_t max_context_ = 0;
  std::string name_;
  std::vector<Slot> slots_;            // (n_seq_max) slot s is llama.cpp sequence s
  std::vector<std::size_t> free_;      // (n_seq_max) free slots; the back is taken next
  std::vector<Part> parts_;            // (requests) the call being decoded
  std::vector<StreamToken> stream_;    // (call's fresh tokens) its llama_batch, before chunking
  std::vector<float> straddled_rows_;  // (rows, V) rows copied when they span two decodes
  llama_batch batch_{};                // (n_batch) one llama_decode
};

static_assert(BatchedTargetModel<BatchedModel>);
static_assert(BatchedDraftModel<BatchedModel>);

}  // namespace specdec::llama_cpp
