#pragma once
/// \file
/// \brief LoadedModel: a GGUF file loaded with a context of its own (a ContextModel that owns
/// its llama_model and llama_context), and the context parameters llama.cpp would abort on,
/// checked before it sees them.

#include <llama.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "specdec/llama_cpp/backend.hpp"
#include "specdec/llama_cpp/context_model.hpp"
#include "specdec/llama_cpp/detail/error.hpp"
#include "specdec/llama_cpp/options.hpp"

namespace specdec::llama_cpp {

namespace detail {

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
  const std::string model =
      name.empty() ? "'" + path.string() + "'" : "the " + name + " model ('" + path.string() + "')";
  const std::uint32_t n_seq_max = std::max<std::uint32_t>(1, params.n_seq_max);
  if (n_seq_max > kMaxSequences) {
    throw_invalid_argument("cannot create a llama.cpp context for ", model,
                           ": n_seq_max = ", n_seq_max, "; expected at most ", kMaxSequences,
                           " sequences (llama.cpp's limit; a tree needs one per leaf plus one)");
  }
  // n_ctx = 0 is the training context, which llama.cpp then reads itself.
  const std::uint32_t rows =
      params.n_ctx == 0 ? params.n_batch : std::min(params.n_ctx, params.n_batch);
  if (n_seq_max > rows) {
    throw_invalid_argument(
        "cannot create a llama.cpp context for ", model, ": n_seq_max = ", n_seq_max,
        " sequences need as many output rows, and this context ", "has ", rows,
        " = min(n_ctx = ", params.n_ctx, ", n_batch = ", params.n_batch,
        "); expected n_seq_max <= ", rows, ", or n_ctx and n_batch >= ", n_seq_max);
  }
}

}  // namespace detail

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
      detail::throw_invalid_argument("cannot load GGUF model '", path.string(),
                                     "': ", reason.empty() ? "llama.cpp rejected it" : reason,
                                     "; expected a GGUF file of an architecture this llama.cpp "
                                     "supports");
    }
    llama_context_params params = llama_context_default_params();
    // 0 = the training context: llama.cpp's own 0 means 512, past the learned positions of a
    // model trained on fewer (GPT-2-style position embeddings have no row for them).
    params.n_ctx =
        context_options.n_ctx != 0
            ? context_options.n_ctx
            : static_cast<std::uint32_t>(std::max(0, llama_model_n_ctx_train(model.get())));
    if (context_options.n_batch != 0) params.n_batch = context_options.n_batch;
    if (context_options.n_ubatch != 0) params.n_ubatch = context_options.n_ubatch;
    params.n_ubatch = std::min(params.n_ubatch, params.n_batch);
    params.n_threads = context_options.threads;
    params.n_threads_batch =
        context_options.threads_batch > 0 ? context_options.threads_batch : context_options.threads;
    params.flash_attn_type = context_options.flash_attention < 0    ? LLAMA_FLASH_ATTN_TYPE_AUTO
                             : context_options.flash_attention == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                    : LLAMA_FLASH_ATTN_TYPE_ENABLED;
    params.type_k = context_options.kv_type;
    params.type_v = context_options.kv_type;
    params.n_seq_max = std::max<std::uint32_t>(1, context_options.n_seq_max);
    // Tree paths share the committed prefix: one KV stream for all sequences (seq_cp then
    // shares cells instead of copying them).
    params.kv_unified = params.n_seq_max > 1 && context_options.kv_unified != 0;
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
    loaded.set_name(context_options.name.empty() ? path.filename().string() : context_options.name);
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

}  // namespace specdec::llama_cpp
