#pragma once
/// \file
/// \brief How the llama.cpp adapter creates and drives a context (ContextOptions) and loads a
/// GGUF file (ModelOptions).

#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

namespace specdec::llama_cpp {

/// \brief How a llama_context is created (LoadedModel) and driven (ContextModel).
struct ContextOptions {
  std::uint32_t n_ctx = 0;     ///< context length in tokens; 0 = the model's training context
  std::uint32_t n_batch = 0;   ///< most tokens per llama_decode; 0 = llama.cpp's default
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
  /// The KV cache's layout with n_seq_max > 1: -1 auto (unified), 1 unified (one stream that
  /// every sequence's cells share; tree calls want it: the paths share the committed prefix's
  /// cells), 0 split (one stream per sequence, n_ctx / n_seq_max cells each; a token attends
  /// over its own sequence's cells only).
  int kv_unified = -1;
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

}  // namespace specdec::llama_cpp
