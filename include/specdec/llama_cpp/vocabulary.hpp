#pragma once
/// \file
/// \brief A llama.cpp model's vocabulary as specdec needs it: its size (the length of a logits
/// row), and whether a draft and a target share one (check_compatible).

#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "specdec/llama_cpp/detail/error.hpp"

namespace specdec::llama_cpp {

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
    detail::throw_domain_error("draft and target differ in BOS/EOS (draft bos ", llama_vocab_bos(d),
                               " add ", llama_vocab_get_add_bos(d), ", eos ", llama_vocab_eos(d),
                               "; target bos ", llama_vocab_bos(t), " add ",
                               llama_vocab_get_add_bos(t), ", eos ", llama_vocab_eos(t),
                               "); expected the same special tokens");
  }
  for (std::int32_t i = 0; i < tn; ++i) {
    const char* dt = llama_vocab_get_text(d, i);
    const char* tt = llama_vocab_get_text(t, i);
    if (std::strcmp(dt, tt) != 0) {
      detail::throw_domain_error("draft and target vocabularies differ at token ", i, ": draft '",
                                 dt, "', target '", tt,
                                 "'; expected the same text for every token id");
    }
  }
}

}  // namespace specdec::llama_cpp
