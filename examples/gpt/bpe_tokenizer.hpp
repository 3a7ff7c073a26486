// The byte-level BPE tokenizer of the example BPE draft (models/kjv-bpe.tokenizer, trained by
// tools/train/bpe.py): GPT-2's scheme on bytes, exactly what bpe.py's encode produces.
//
// Vocabulary: ids 0..255 are the single bytes (id = byte value); id 256 + k is merge k, the
// concatenation of the two earlier tokens it joins. No special tokens.
//
// .tokenizer file (ASCII text, '\n' line ends):
//   SPDCBPE1 1 <vocab_size> <n_merges>       magic, format version, vocab_size = 256 + n_merges
//   <a> <b>                                  n_merges lines in merge order: line k (0-based,
//                                            after the header) makes token 256 + k of tokens a
//                                            and b, both < 256 + k; a pair occurs once
// and nothing else (the last line ends in '\n'). Any other content is rejected with a
// std::runtime_error naming the file, the line and what is wrong.
//
// Encoding: the text is split into pre-tokens by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^\s L N]+|\s+(?!\S)|\s+
// on BYTES, with L = A-Z a-z and every byte >= 0x80, N = 0-9, \s = \t \n \v \f \r and ' '
// (0x09-0x0D, 0x20); every other byte is "other". On ASCII text this is GPT-2's and llama.cpp's
// gpt2 pre-tokenization. Each pre-token is then merged on its own (merges never cross pre-tokens):
// repeatedly, the adjacent pair with the lowest merge rank is merged, leftmost occurrence first,
// until no adjacent pair is a merge (a heap over the pairs: O(n log n) in the pre-token's length).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "specdec/types.hpp"

namespace specdec::examples {

class BpeTokenizer {
 public:
  /// \brief Reads a .tokenizer file (format above).
  /// \throws std::runtime_error naming `path` and what is wrong (missing or unreadable file, bad
  /// magic or version, a malformed line, a merge id out of range, a repeated merge, a count that
  /// disagrees with the header, trailing content).
  static BpeTokenizer load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open the BPE tokenizer file");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) throw std::runtime_error(path + ": cannot read the BPE tokenizer file");
    return parse(text, path);
  }

  /// \brief Number of tokens: 256 + the number of merges.
  [[nodiscard]] std::size_t size() const noexcept { return offsets_.size() - 1; }

  /// \brief The bytes token `id` stands for; a view valid while this tokenizer lives.
  /// \throws std::out_of_range for an id outside [0, size()).
  [[nodiscard]] std::string_view bytes(token_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= size()) {
      throw std::out_of_range("BpeTokenizer: token " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(size()) + ")");
    }
    const auto i = static_cast<std::size_t>(id);
    return std::string_view(pieces_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }

  /// \brief APPENDS the tokens of `text` to `out` (any bytes; no special tokens added). The
  /// concatenated bytes of the appended tokens are `text`.
  void encode(std::string_view text, std::vector<token_t>& out) const {
    Scratch scratch;
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t end = pretoken_end(text, at);
      encode_pretoken(text.substr(at, end - at), out, scratch);
      at = end;
    }
  }

  /// \brief The concatenated bytes of `ids`.
  /// \throws std::out_of_range for an id outside [0, size()).
  [[nodiscard]] std::string decode(std::span<const token_t> ids) const {
    std::string text;
    for (const token_t id : ids) text += bytes(id);
    return text;
  }

  /// \brief Where the pre-token that starts at `at` (< text.size()) ends: GPT-2's pattern on
  /// bytes (see the top of this file). Exposed for tests.
  [[nodiscard]] static std::size_t pretoken_end(std::string_view text, std::size_t at) noexcept {
    const std::size_t n = text.size();
    const auto cls = [&](std::size_t i) { return i < n ? class_of(text[i]) : kEnd; };
    const auto run = [&](std::size_t i, Class c) {
      while (i < n && class_of(text[i]) == c) ++i;
      return i;
    };
    if (text[at] == '\'' && at + 1 < n) {  // 's|'t|'re|'ve|'m|'ll|'d
      const char next = text[at + 1];
      if (next == 's' || next == 't' || next == 'm' || next == 'd') return at + 2;
      if (at + 2 < n) {
        const char after = text[at + 2];
        if ((next == 'r' && after == 'e') || (next == 'v' && after == 'e') ||
            (next == 'l' && after == 'l')) {
          return at + 3;
        }
      }
    }
    // " ?L+", " ?N+", " ?[^\s L N]+": an optional leading space, then a run of one class.
    const std::size_t body =
        text[at] == ' ' && cls(at + 1) != kSpace && cls(at + 1) != kEnd ? at + 1 : at;
    const Class c = cls(body);
    if (c != kSpace) return run(body, c);
    // "\s+(?!\S)|\s+": a run of whitespace, less its last byte if more text follows and the
    // run has more than one byte (that byte may start the next pre-token, e.g. " word").
    const std::size_t end = run(at, kSpace);
    return end < n && end - at > 1 ? end - 1 : end;
  }

 private:
  enum Class : unsigned char { kLetter, kDigit, kSpace, kOther, kEnd };

  static Class class_of(char ch) noexcept {
    const auto b = static_cast<unsigned char>(ch);
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80) return kLetter;
    if (b >= '0' && b <= '9') return kDigit;
    if (b == ' ' || (b >= 0x09 && b <= 0x0D)) return kSpace;
    return kOther;
  }

  static std::uint64_t pair_key(token_t a, token_t b) noexcept {
    return (std::uint64_t{static_cast<std::uint32_t>(a)} << 32) | static_cast<std::uint32_t>(b);
  }

  // A candidate merge of the symbol at `left` with the one after it; valid while both symbols
  // still hold the tokens they held when it was queued.
  struct Candidate {
    token_t merged;  // the new token; lower = earlier merge = higher priority
    std::uint32_t left;
    token_t a;
    token_t b;
  };
  struct Later {
    bool operator()(const Candidate& x, const Candidate& y) const noexcept {
      return x.merged != y.merged ? x.merged > y.merged : x.left > y.left;
    }
  };
  struct Scratch {
    std::vector<token_t> symbols;
    std::vector<std::uint32_t> next;  // index of the next live symbol, or kNone
    std::vector<std::uint32_t> prev;
    std::vector<Candidate> heap;
  };
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  void push_candidate(Scratch& s, std::uint32_t left) const {
    const std::uint32_t right = s.next[left];
    if (right == kNone) return;
    const auto found = ranks_.find(pair_key(s.symbols[left], s.symbols[right]));
    if (found == ranks_.end()) return;
    s.heap.push_back({found->second, left, s.symbols[left], s.symbols[right]});
    std::push_heap(s.heap.begin(), s.heap.end(), Later{});
  }

  void encode_pretoken(std::string_view word, std::vector<token_t>& out, Scratch& s) const {
    if (word.size() == 1) {
      out.push_back(static_cast<token_t>(static_cast<unsigned char>(word[0])));
      return;
    }
    const auto n = static_cast<std::uint32_t>(word.size());
    s.symbols.resize(n);
    s.next.resize(n);
    s.prev.resize(n);
    s.heap.clear();
    for (std::uint32_t i = 0; i < n; ++i) {
      s.symbols[i] = static_cast<token_t>(static_cast<unsigned char>(word[i]));
      s.next[i] = i + 1 < n ? i + 1 : kNone;
      s.prev[i] = i > 0 ? i - 1 : kNone;
    }
    for (std::uint32_t i = 0; i + 1 < n; ++i) push_candidate(s, i);
    while (!s.heap.empty()) {
      std::pop_heap(s.heap.begin(), s.heap.end(), Later{});
      const Candidate c = s.heap.back();
      s.heap.pop_back();
      const std::uint32_t right = s.next[c.left];
      // Stale: the left symbol was merged into its left neighbour (its next link is then
      // cleared), or either symbol changed since the candidate was queued.
      if (right == kNone || s.symbols[c.left] != c.a || s.symbols[right] != c.b) continue;
      s.symbols[c.left] = c.merged;
      s.next[c.left] = s.next[right];
      if (s.next[right] != kNone) s.prev[s.next[right]] = c.left;
      s.next[right] = kNone;
      s.symbols[right] = -1;
      if (s.prev[c.left] != kNone) push_candidate(s, s.prev[c.left]);
      push_candidate(s, c.left);
    }
    for (std::uint32_t i = 0; i != kNone; i = s.next[i]) out.push_back(s.symbols[i]);
  }

  static BpeTokenizer parse(std::string_view text, const std::string& path) {
    std::size_t line_no = 0;
    const auto fail = [&](const std::string& what) -> std::runtime_error {
      return std::runtime_error(path + ": line " + std::to_string(line_no) + ": " + what);
    };
    // Splits the next line into space-separated fields of digits (anything else is an error).
    const auto next_line = [&](std::string_view& rest) {
      ++line_no;
      const std::size_t newline = rest.find('\n');
      if (newline == std::string_view::npos) {
        throw fail("missing line end (truncated file?)");
      }
      const std::string_view line = rest.substr(0, newline);
      rest.remove_prefix(newline + 1);
      std::vector<std::string_view> fields;
      std::size_t start = 0;
      while (start <= line.size()) {
        const std::size_t space = std::min(line.find(' ', start), line.size());
        fields.push_back(line.substr(start, space - start));
        start = space + 1;
      }
      return fields;
    };
    const auto number = [&](std::string_view field, const char* what) {
      std::uint64_t value = 0;
      if (field.empty() || field.size() > 9) {
        throw fail(std::string("expected ") + what + ", found \"" + std::string(field) + "\"");
      }
      for (const char ch : field) {
        if (ch < '0' || ch > '9') {
          throw fail(std::string("expected ") + what + ", found \"" + std::string(field) + "\"");
        }
        value = value * 10 + static_cast<std::uint64_t>(ch - '0');
      }
      return value;
    };

    std::string_view rest = text;
    const std::vector<std::string_view> head = next_line(rest);
    if (head.size() != 4 || head[0] != kMagic) {
      throw std::runtime_error(path + ": not a BPE tokenizer file: expected the header \"" +
                               std::string(kMagic) + " 1 <vocab_size> <n_merges>\"");
    }
    if (head[1] != "1") {
      throw fail("unsupported format version \"" + std::string(head[1]) + "\", expected 1");
    }
    const std::uint64_t vocab = number(head[2], "the vocabulary size");
    const std::uint64_t merges = number(head[3], "the number of merges");
    if (vocab != 256 + merges || vocab > kMaxVocab) {
      throw fail("vocabulary size " + std::to_string(vocab) + " with " + std::to_string(merges) +
                 " merges; expected 256 + merges, at most " + std::to_string(kMaxVocab));
    }

    BpeTokenizer t;
    t.offsets_.reserve(vocab + 1);
    t.offsets_.push_back(0);
    for (unsigned b = 0; b < 256; ++b) {
      t.pieces_.push_back(static_cast<char>(static_cast<unsigned char>(b)));
      t.offsets_.push_back(t.pieces_.size());
    }
    t.ranks_.reserve(merges);
    for (std::uint64_t k = 0; k < merges; ++k) {
      if (rest.empty()) {
        throw std::runtime_error(path + ": the header announces " + std::to_string(merges) +
                                 " merges, the file ends after " + std::to_string(k));
      }
      const std::vector<std::string_view> fields = next_line(rest);
      if (fields.size() != 2) throw fail("expected two token ids \"a b\"");
      const std::uint64_t defined = 256 + k;
      const std::uint64_t a = number(fields[0], "a token id");
      const std::uint64_t b = number(fields[1], "a token id");
      if (a >= defined || b >= defined) {
        throw fail("merge " + std::to_string(k) + " (" + std::to_string(a) + " " +
                   std::to_string(b) + ") refers to a token id out of range: ids before token " +
                   std::to_string(defined) + " are 0.." + std::to_string(defined - 1));
      }
      const auto merged = static_cast<token_t>(defined);
      if (!t.ranks_.emplace(pair_key(static_cast<token_t>(a), static_cast<token_t>(b)), merged)
               .second) {
        throw fail("merge " + std::to_string(k) + " (" + std::to_string(a) + " " +
                   std::to_string(b) + ") repeats an earlier merge");
      }
      const std::size_t a_begin = t.offsets_[a];
      const std::size_t a_end = t.offsets_[a + 1];
      const std::size_t b_begin = t.offsets_[b];
      const std::size_t b_end = t.offsets_[b + 1];
      // Appending a piece of pieces_ to itself: copy first (append may reallocate).
      const std::string joined =
          t.pieces_.substr(a_begin, a_end - a_begin) + t.pieces_.substr(b_begin, b_end - b_begin);
      t.pieces_ += joined;
      t.offsets_.push_back(t.pieces_.size());
    }
    if (!rest.empty()) {
      throw std::runtime_error(path + ": content after the " + std::to_string(merges) +
                               " merges the header announces (line " + std::to_string(line_no + 1) +
                               ")");
    }
    return t;
  }

  static constexpr std::string_view kMagic = "SPDCBPE1";
  static constexpr std::uint64_t kMaxVocab = 1u << 24;

  std::string pieces_;                // the bytes of every token, back to back
  std::vector<std::size_t> offsets_;  // token i is pieces_[offsets_[i], offsets_[i + 1])
  std::unordered_map<std::uint64_t, token_t> ranks_;  // (a, b) -> the token merge (a, b) makes
};

}  // namespace specdec::examples
