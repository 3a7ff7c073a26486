#pragma once
/// \file
/// \brief NgramIndex (internal): for every n in [min_ngram, max_ngram], a hashed table from an
/// n-gram of the indexed tokens to the position right after its most recent occurrence. The
/// index behind NgramProposer (ngram_proposer.hpp).
///
/// Only tokens whose successor is indexed too are keys: appending token t at position i makes
/// the n-grams that end at i - 1 keys with continuation i. So a lookup of the context's own
/// suffix never finds itself (its continuation does not exist yet), and every continuation it
/// returns is an indexed token.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "specdec/types.hpp"

namespace specdec::detail {

/// What the index has done so far: cheap counters, to show that the work per round does not
/// grow with the context.
struct NgramIndexWork {
  std::uint64_t tokens_indexed = 0;  ///< tokens appended to the index
  std::uint64_t probes = 0;          ///< table slots examined by insertions and lookups
  std::uint64_t rehashed = 0;        ///< entries moved when a table doubled (amortised O(1))
  std::uint64_t rebuilds = 0;        ///< times the index was dropped and rebuilt from scratch
};

class NgramIndex {
 public:
  /// Requires 1 <= min_ngram <= max_ngram (NgramOptions::validate checks it for users).
  NgramIndex(std::size_t min_ngram, std::size_t max_ngram)
      : min_ngram_(min_ngram),
        max_ngram_(max_ngram),
        tables_(max_ngram - min_ngram + 1),
        suffix_hashes_(max_ngram + 1) {
    for (Table& table : tables_) table.slots.assign(kInitialCapacity, kEmpty);
  }

  /// Forgets every indexed token (keeps the memory).
  void clear() noexcept {
    indexed_.clear();
    for (Table& table : tables_) {
      std::fill(table.slots.begin(), table.slots.end(), kEmpty);
      table.used = 0;
    }
  }

  /// Makes room for `tokens` indexed tokens without allocating again.
  void reserve(std::size_t tokens) {
    indexed_.reserve(tokens);
    const std::size_t capacity = std::bit_ceil(std::max(kInitialCapacity, 2 * tokens + 2));
    for (Table& table : tables_) {
      if (table.slots.size() < capacity) grow(table, capacity);
    }
  }

  /// Brings the index up to `committed`: appends what is new. A sequence that is not an
  /// extension of the indexed one (shorter, or different in the last max_ngram indexed tokens or
  /// the first) is indexed from scratch. That check is constant work, so a change confined to
  /// the middle of the indexed tokens goes unnoticed: callers that reuse an index on unrelated
  /// sequences clear() it (NgramProposer does on begin()).
  void sync(std::span<const token_t> committed) {
    if (!extends_indexed(committed)) {
      clear();
      ++work_.rebuilds;
    }
    // Amortised growth of the token copy; each table doubles on its own load (see append).
    if (committed.size() > indexed_.capacity()) indexed_.reserve(2 * committed.size());
    for (std::size_t i = indexed_.size(); i < committed.size(); ++i) append(committed[i]);
  }

  /// The token that followed the most recent indexed occurrence of the longest suffix of
  /// `sequence` (length in [min_ngram, max_ngram]) that occurs in the index; none if no suffix
  /// in that range does. `sequence` may run past the indexed tokens (drafted tokens).
  [[nodiscard]] std::optional<token_t> continuation(std::span<const token_t> sequence) {
    const std::size_t longest = std::min(max_ngram_, sequence.size());
    if (longest < min_ngram_) return std::nullopt;
    hash_suffixes(sequence, longest);
    for (std::size_t n = longest; n >= min_ngram_; --n) {
      const std::span<const token_t> ngram = sequence.last(n);
      const std::size_t position = find(n, suffix_hashes_[n], ngram);
      if (position != kEmpty) return indexed_[position];
    }
    return std::nullopt;
  }

  [[nodiscard]] std::size_t size() const noexcept { return indexed_.size(); }
  [[nodiscard]] const NgramIndexWork& work() const noexcept { return work_; }

 private:
  /// A table's slots hold continuation positions (>= n >= 1), so 0 marks an empty slot; the key
  /// is not stored: it is the n tokens before the position, compared on every probe (collisions
  /// never produce a false match).
  static constexpr std::size_t kEmpty = 0;
  static constexpr std::size_t kInitialCapacity = 64;

  struct Table {
    std::vector<std::size_t> slots;  // (capacity, a power of two) continuation positions
    std::size_t used = 0;
  };

  [[nodiscard]] bool extends_indexed(std::span<const token_t> committed) const noexcept {
    const std::size_t indexed = indexed_.size();
    if (indexed == 0) return true;
    if (committed.size() < indexed || committed[0] != indexed_[0]) return false;
    const std::size_t checked = std::min(indexed, max_ngram_);
    return std::equal(indexed_.end() - static_cast<std::ptrdiff_t>(checked), indexed_.end(),
                      committed.begin() + static_cast<std::ptrdiff_t>(indexed - checked));
  }

  /// splitmix64's finaliser: spreads the polynomial hash over the top bits a slot is cut from.
  static constexpr std::uint64_t finalize(std::uint64_t x) noexcept {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  /// suffix_hashes_[n] = hash of the last n tokens of `tokens`, n = 1..count, built from the end
  /// backwards so that one pass gives all of them (insertions and lookups hash alike).
  void hash_suffixes(std::span<const token_t> tokens, std::size_t count) noexcept {
    std::uint64_t h = 0x2545f4914f6cdd1dULL;
    for (std::size_t n = 1; n <= count; ++n) {
      h = (h ^ static_cast<std::uint32_t>(tokens[tokens.size() - n])) * 0x9e3779b97f4a7c15ULL;
      suffix_hashes_[n] = finalize(h);
    }
  }

  [[nodiscard]] static std::size_t slot_of(std::uint64_t hash, const Table& table) noexcept {
    return static_cast<std::size_t>(hash) & (table.slots.size() - 1);
  }

  [[nodiscard]] bool key_equals(std::size_t position, std::span<const token_t> ngram) const {
    return std::equal(ngram.begin(), ngram.end(),
                      indexed_.begin() + static_cast<std::ptrdiff_t>(position - ngram.size()));
  }

  /// The continuation position stored for `ngram` (of length n) in its table, or kEmpty.
  [[nodiscard]] std::size_t find(std::size_t n, std::uint64_t hash,
                                 std::span<const token_t> ngram) {
    const Table& table = tables_[n - min_ngram_];
    const std::size_t mask = table.slots.size() - 1;
    for (std::size_t slot = slot_of(hash, table);; slot = (slot + 1) & mask) {
      ++work_.probes;
      const std::size_t position = table.slots[slot];
      if (position == kEmpty || key_equals(position, ngram)) return position;
    }
  }

  /// Indexes `token` at position i = size(): the n-grams ending right before it get i as their
  /// most recent continuation.
  void append(token_t token) {
    indexed_.push_back(token);
    ++work_.tokens_indexed;
    const std::size_t position = indexed_.size() - 1;
    const std::size_t longest = std::min(max_ngram_, position);
    if (longest < min_ngram_) return;
    for (std::size_t n = min_ngram_; n <= longest; ++n) {  // before hashing: grow() hashes too
      Table& table = tables_[n - min_ngram_];
      if (2 * (table.used + 1) > table.slots.size()) grow(table, 2 * table.slots.size());
    }
    hash_suffixes(std::span<const token_t>(indexed_.data(), position), longest);
    for (std::size_t n = min_ngram_; n <= longest; ++n) {
      insert(tables_[n - min_ngram_], n, suffix_hashes_[n], position);
    }
  }

  void insert(Table& table, std::size_t n, std::uint64_t hash, std::size_t position) {
    const std::size_t mask = table.slots.size() - 1;
    const std::span<const token_t> ngram(indexed_.data() + position - n, n);
    for (std::size_t slot = slot_of(hash, table);; slot = (slot + 1) & mask) {
      ++work_.probes;
      std::size_t& stored = table.slots[slot];
      if (stored == kEmpty) {
        stored = position;
        ++table.used;
        return;
      }
      if (key_equals(stored, ngram)) {
        stored = position;  // the most recent occurrence wins
        return;
      }
    }
  }

  /// Doubles (or sets) a table's capacity and re-inserts its entries: amortised O(1) per entry.
  void grow(Table& table, std::size_t capacity) {
    std::vector<std::size_t> old(capacity, kEmpty);
    old.swap(table.slots);
    const std::size_t n = static_cast<std::size_t>(&table - tables_.data()) + min_ngram_;
    const std::size_t mask = capacity - 1;
    for (const std::size_t position : old) {
      if (position == kEmpty) continue;
      ++work_.rehashed;
      hash_suffixes(std::span<const token_t>(indexed_.data(), position), n);
      std::size_t slot = slot_of(suffix_hashes_[n], table);
      while (table.slots[slot] != kEmpty) slot = (slot + 1) & mask;
      table.slots[slot] = position;
    }
  }

  std::size_t min_ngram_;
  std::size_t max_ngram_;
  std::vector<token_t> indexed_;              // (tokens indexed) the indexed sequence, a copy
  std::vector<Table> tables_;                 // (max_ngram - min_ngram + 1) one table per n
  std::vector<std::uint64_t> suffix_hashes_;  // (max_ngram + 1) scratch of hash_suffixes
  NgramIndexWork work_;
};

}  // namespace specdec::detail
