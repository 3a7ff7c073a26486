#pragma once
/// \file
/// \brief llama.cpp models (GGUF files) as specdec draft and target models: the umbrella of
/// specdec/llama_cpp/, one header per concern.
///
/// Not part of specdec/specdec.hpp: it needs `<llama.h>`. Link the CMake target
/// `specdec::llama_cpp` (specdec + llama.cpp's `llama`).
///
/// \code
///   auto target = specdec::llama_cpp::LoadedModel::load("target.gguf", {.threads = 1});
///   auto draft  = specdec::llama_cpp::LoadedModel::load("draft.gguf", {.threads = 1});
///   specdec::llama_cpp::check_compatible(draft.model(), target.model());  // one vocabulary
///   // (a padded or partly shared one: VocabularyRequirement::mappable and MappedDraft)
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
/// Headers (each compiles alone):
///   options.hpp        ContextOptions, ModelOptions
///   backend.hpp        set_verbose; the backend, log and llama.cpp object owners (detail)
///   vocabulary.hpp     vocab_size, vocabulary_text, check_compatible (the graded
///                      VocabularyCheck), retokenize
///   text.hpp           tokenize, TextDecoder
///   context_model.hpp  ContextModel (what one call does, tree calls)
///   loaded_model.hpp   LoadedModel (n_seq_max checks)
///   batched_model.hpp  BatchedModel (many sequences per llama_decode, for BatchedDecoder),
///                      batched_context_options
///   rpc.hpp            rpc_device
///
/// Tested with llama.cpp de3ff815ea7d (2026-09-28; node-llama-cpp 3.22.1's bundle), the
/// version scripts/install-llama-cpp.sh installs.

#include "specdec/llama_cpp/backend.hpp"
#include "specdec/llama_cpp/batched_model.hpp"
#include "specdec/llama_cpp/context_model.hpp"
#include "specdec/llama_cpp/loaded_model.hpp"
#include "specdec/llama_cpp/options.hpp"
#include "specdec/llama_cpp/rpc.hpp"
#include "specdec/llama_cpp/text.hpp"
#include "specdec/llama_cpp/vocabulary.hpp"
