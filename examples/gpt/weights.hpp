// Loading and validating the example GPT's weight files (.spdc) and golden logits (.golden).
//
// .spdc version 2 (written by tools/train/export.py; all integers little-endian u32):
//   char[8] "SPDCGPT1" | version = 2 | vocab_size | max_context | n_layer | n_head | d_model | d_ff
//   | dtype = 1 (IEEE fp16) | tensors as fp16, row-major, in this order:
//     wte (vocab_size, d_model)            token embedding, tied with the output head
//     wpe (max_context, d_model)           learned position embedding
//     per layer: ln1.weight (d_model), ln1.bias (d_model),
//                qkv.weight (3*d_model, d_model), qkv.bias (3*d_model),   rows are [q; k; v]
//                proj.weight (d_model, d_model), proj.bias (d_model),
//                ln2.weight (d_model), ln2.bias (d_model),
//                fc1.weight (d_ff, d_model), fc1.bias (d_ff),
//                fc2.weight (d_model, d_ff), fc2.bias (d_model)
//     ln_f.weight (d_model), ln_f.bias (d_model)
//   | checksum: CRC-32 (zlib's crc32) of every byte before it, magic and header included
//   | nothing after.
// Version 1 was the same without the checksum; `export.py --restamp` converts such a file.
// .golden (export.py --golden): char[8] "SPDCLOG1" | u32 vocab_size | u32 n | u32 tokens[n]
//   | f32 logits[n][vocab_size]   (row i = next-token logits after tokens[0..i], float64 reference)
//
// Every malformed file is rejected with a std::runtime_error that names the file and says what was
// found and what was expected; nothing is read past the end of the buffer. The checksum catches
// what the structural checks cannot: a flipped byte in a tensor, or a header field changed to
// another consistent value (n_head 6 -> 3 passes every size check and computes garbage).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp16.hpp"

namespace specdec::examples {

/// Weight matrices are stored [out][in], row-major, as in PyTorch's nn.Linear.
using RowMajorMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// \brief Hyper-parameters of the byte-level pre-LN GPT (tools/train/gpt.py, GPTConfig).
struct GptConfig {
  std::size_t vocab_size = 0;   // 256 for the byte-level KJV models
  std::size_t max_context = 0;  // number of learned positions; contexts longer than this throw
  std::size_t n_layer = 0;
  std::size_t n_head = 0;
  std::size_t d_model = 0;  // divisible by n_head
  std::size_t d_ff = 0;     // hidden width of the MLP

  [[nodiscard]] std::size_t head_dim() const noexcept { return d_model / n_head; }
  /// Number of parameters, i.e. of fp16 values in the file body.
  [[nodiscard]] std::uint64_t parameter_count() const noexcept {
    const std::uint64_t d = d_model, f = d_ff;
    const std::uint64_t per_layer = 4 * d                // ln1, ln2 weight + bias
                                    + 3 * d * d + 3 * d  // qkv
                                    + d * d + d          // proj
                                    + f * d + f          // fc1
                                    + d * f + d;         // fc2
    return std::uint64_t{vocab_size} * d + std::uint64_t{max_context} * d + n_layer * per_layer +
           2 * d;
  }
};

/// \brief One pre-LN transformer block: x += proj(attn(ln1(x))); x += fc2(gelu(fc1(ln2(x)))).
struct GptLayerWeights {
  Eigen::VectorXf ln1_weight, ln1_bias;  // (d_model)
  RowMajorMatrixXf qkv_weight;           // (3*d_model, d_model)  rows [q; k; v]
  Eigen::VectorXf qkv_bias;              // (3*d_model)
  RowMajorMatrixXf proj_weight;          // (d_model, d_model)
  Eigen::VectorXf proj_bias;             // (d_model)
  Eigen::VectorXf ln2_weight, ln2_bias;  // (d_model)
  RowMajorMatrixXf fc1_weight;           // (d_ff, d_model)
  Eigen::VectorXf fc1_bias;              // (d_ff)
  RowMajorMatrixXf fc2_weight;           // (d_model, d_ff)
  Eigen::VectorXf fc2_bias;              // (d_model)
};

/// \brief All weights of a GPT, converted to float32 at load time.
struct GptWeights {
  GptConfig config;
  RowMajorMatrixXf token_embedding;      // (vocab_size, d_model)   wte; also the output head (tied)
  RowMajorMatrixXf position_embedding;   // (max_context, d_model)  wpe
  std::vector<GptLayerWeights> layers;   // (n_layer)
  Eigen::VectorXf lnf_weight, lnf_bias;  // (d_model)
};

/// \brief Reference logits written by export.py --golden, for testing a forward against PyTorch.
struct GoldenLogits {
  std::vector<std::int32_t> tokens;  // (n)
  RowMajorMatrixXf logits;           // (n, vocab_size)  row i follows tokens[0..i]
};

namespace detail {

inline constexpr std::string_view kWeightsMagic = "SPDCGPT1";
inline constexpr std::string_view kGoldenMagic = "SPDCLOG1";
inline constexpr std::uint32_t kWeightsVersion = 2;
inline constexpr std::uint32_t kDtypeFp16 = 1;
inline constexpr std::size_t kWeightsHeaderBytes = 8 + 8 * 4;  // magic + 8 u32
inline constexpr std::size_t kWeightsChecksumBytes = 4;        // u32 CRC-32 after the tensors

// Upper bounds that no sane example model reaches; they turn garbage headers into clear errors
// before any size arithmetic or allocation happens.
inline constexpr std::uint32_t kMaxVocab = 1u << 24;
inline constexpr std::uint32_t kMaxContext = 1u << 20;
inline constexpr std::uint32_t kMaxLayers = 1u << 12;
inline constexpr std::uint32_t kMaxWidth = 1u << 18;  // n_head, d_model, d_ff

[[noreturn]] inline void throw_file_error(const std::filesystem::path& path,
                                          const std::string& what) {
  throw std::runtime_error("specdec: " + path.string() + ": " + what);
}

inline std::vector<unsigned char> read_file_bytes(const std::filesystem::path& path,
                                                  std::string_view kind) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw_file_error(path, std::string("cannot open ") + std::string(kind) +
                               (std::filesystem::exists(path, error) ? " (not a regular file)"
                                                                     : " (file does not exist)"));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw_file_error(path, "cannot open " + std::string(kind) + " for reading");
  const std::streamoff size = in.tellg();
  if (size < 0) throw_file_error(path, "cannot determine the size of " + std::string(kind));
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw_file_error(path, "read error while reading " + std::string(kind));
  }
  return bytes;
}

inline std::uint32_t read_u32_le(const unsigned char* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

/// CRC-32 tables for slicing-by-8: table[0] is the byte-wise table of the reflected polynomial
/// 0xEDB88320 (zlib, PNG, Ethernet); table[k][b] advances table[k-1][b] by one more zero byte.
inline const std::array<std::array<std::uint32_t, 256>, 8>& crc32_tables() {
  static const auto tables = [] {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t crc = b;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
      t[0][b] = crc;
    }
    for (std::size_t k = 1; k < 8; ++k) {
      for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
    return t;
  }();
  return tables;
}

/// \brief CRC-32 of `bytes`, equal to zlib's crc32(0, bytes) (Python: zlib.crc32). Eight bytes
/// per step (slicing-by-8): ~1 byte per cycle, a few ms for the 22 MB target model.
inline std::uint32_t crc32(std::span<const unsigned char> bytes) noexcept {
  const auto& t = crc32_tables();
  const unsigned char* p = bytes.data();
  const std::size_t n = bytes.size();
  std::uint32_t crc = 0xffffffffu;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint32_t lo = read_u32_le(p + i) ^ crc;
    const std::uint32_t hi = read_u32_le(p + i + 4);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; i < n; ++i) crc = t[0][(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

inline std::string hex32(std::uint32_t value) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out += digits[(value >> shift) & 15];
  return out;
}

inline std::string printable_magic(std::span<const unsigned char> bytes) {
  std::string shown;
  for (unsigned char c : bytes.first(std::min<std::size_t>(8, bytes.size()))) {
    shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  return '"' + shown + '"';
}

inline void check_magic(const std::filesystem::path& path, std::span<const unsigned char> bytes,
                        std::string_view magic, std::string_view kind) {
  if (bytes.size() < magic.size() || std::memcmp(bytes.data(), magic.data(), magic.size()) != 0) {
    throw_file_error(path, "not " + std::string(kind) + ": magic is " + printable_magic(bytes) +
                               ", expected \"" + std::string(magic) + '"');
  }
}

inline void check_dim(const std::filesystem::path& path, std::string_view name, std::uint32_t value,
                      std::uint32_t max) {
  if (value == 0 || value > max) {
    throw_file_error(path, "implausible " + std::string(name) + " = " + std::to_string(value) +
                               " in the header, expected 1.." + std::to_string(max));
  }
}

/// Reads fp16 tensors off the body in file order, converting to float and checking finiteness.
class TensorReader {
 public:
  TensorReader(const std::filesystem::path& path, const unsigned char* body)
      : path_(path), at_(body) {}

  void read(std::string_view name, float* out, std::size_t count) {
    const unsigned char* in = at_;  // a local: `out` stores cannot alias it, so the loop is tight
    for (std::size_t i = 0; i < count; ++i) {
      const auto half_bits = static_cast<std::uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
      out[i] = half_to_float(half_bits);
    }
    at_ += 2 * count;
    for (std::size_t i = 0; i < count; ++i) {
      if (!std::isfinite(out[i])) {
        const auto half_bits = static_cast<std::uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
        throw_file_error(path_, "tensor " + std::string(name) +
                                    " has a non-finite value at index " + std::to_string(i) +
                                    " (fp16 bits 0x" + hex(half_bits) + ")");
      }
    }
  }
  void read(std::string_view name, RowMajorMatrixXf& m, std::size_t rows, std::size_t cols) {
    m.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
    read(name, m.data(), rows * cols);
  }
  void read(std::string_view name, Eigen::VectorXf& v, std::size_t size) {
    v.resize(static_cast<Eigen::Index>(size));
    read(name, v.data(), size);
  }

 private:
  static std::string hex(std::uint16_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    return {digits[(v >> 12) & 15], digits[(v >> 8) & 15], digits[(v >> 4) & 15], digits[v & 15]};
  }
  const std::filesystem::path& path_;
  const unsigned char* at_;
};

}  // namespace detail

/// \brief Parses a .spdc image already in memory; `path` is only used in error messages.
/// \throws std::runtime_error naming `path` and what is wrong (magic, version, dtype, dims, size).
inline GptWeights parse_gpt_weights(std::span<const unsigned char> bytes,
                                    const std::filesystem::path& path) {
  using detail::throw_file_error;
  detail::check_magic(path, bytes, detail::kWeightsMagic, "a .spdc GPT weight file");
  if (bytes.size() < detail::kWeightsHeaderBytes) {
    throw_file_error(path, "truncated header: " + std::to_string(bytes.size()) +
                               " bytes, a .spdc header has " +
                               std::to_string(detail::kWeightsHeaderBytes));
  }
  std::array<std::uint32_t, 8> field{};
  for (std::size_t i = 0; i < field.size(); ++i) {
    field[i] = detail::read_u32_le(bytes.data() + 8 + 4 * i);
  }
  const auto [version, vocab, context, layers, heads, width, ff_width, dtype] = field;

  if (version != detail::kWeightsVersion) {
    throw_file_error(path, "unsupported .spdc version " + std::to_string(version) +
                               ", this reader supports version " +
                               std::to_string(detail::kWeightsVersion) +
                               (version == 1 ? " (version 1 has no checksum: convert it with "
                                               "tools/train/export.py --restamp)"
                                             : ""));
  }
  if (dtype != detail::kDtypeFp16) {
    throw_file_error(path, "unsupported dtype " + std::to_string(dtype) + ", expected " +
                               std::to_string(detail::kDtypeFp16) + " (IEEE fp16)");
  }
  detail::check_dim(path, "vocab_size", vocab, detail::kMaxVocab);
  detail::check_dim(path, "max_context", context, detail::kMaxContext);
  detail::check_dim(path, "n_layer", layers, detail::kMaxLayers);
  detail::check_dim(path, "n_head", heads, detail::kMaxWidth);
  detail::check_dim(path, "d_model", width, detail::kMaxWidth);
  detail::check_dim(path, "d_ff", ff_width, detail::kMaxWidth);
  if (width % heads != 0) {
    throw_file_error(path, "d_model = " + std::to_string(width) +
                               " is not divisible by n_head = " + std::to_string(heads));
  }

  GptConfig config{vocab, context, layers, heads, width, ff_width};
  // The bounds above keep every product below 2^63, so this cannot overflow.
  const std::uint64_t body_bytes = 2 * static_cast<std::uint64_t>(config.parameter_count());
  const std::uint64_t file_bytes = bytes.size();
  const std::uint64_t expected_bytes =
      detail::kWeightsHeaderBytes + body_bytes + detail::kWeightsChecksumBytes;
  const std::string dims = "vocab_size " + std::to_string(vocab) + ", max_context " +
                           std::to_string(context) + ", n_layer " + std::to_string(layers) +
                           ", n_head " + std::to_string(heads) + ", d_model " +
                           std::to_string(width) + ", d_ff " + std::to_string(ff_width);
  if (file_bytes < expected_bytes) {
    throw_file_error(path, "truncated: the header (" + dims + ") needs " +
                               std::to_string(expected_bytes) + " bytes, the file has only " +
                               std::to_string(file_bytes) + " (incomplete file or wrong dims?)");
  }
  if (file_bytes > expected_bytes) {
    throw_file_error(path, std::to_string(file_bytes - expected_bytes) +
                               " trailing bytes after the checksum: the header (" + dims +
                               ") needs exactly " + std::to_string(expected_bytes) +
                               " bytes, the file has " + std::to_string(file_bytes) +
                               " (wrong dims in the header?)");
  }

  // Sizes agree; now the content: one CRC-32 pass over header and tensors (~5 ms for 22 MB).
  const std::size_t checked_bytes = bytes.size() - detail::kWeightsChecksumBytes;
  const std::uint32_t stored = detail::read_u32_le(bytes.data() + checked_bytes);
  const std::uint32_t computed = detail::crc32(bytes.first(checked_bytes));
  if (stored != computed) {
    throw_file_error(path, "checksum mismatch: the file stores CRC-32 " + detail::hex32(stored) +
                               ", its " + std::to_string(checked_bytes) +
                               " bytes of header and tensors give " + detail::hex32(computed) +
                               " (corrupted or edited file; re-export or re-download it)");
  }

  const std::size_t d = config.d_model;
  const std::size_t f = config.d_ff;
  GptWeights w;
  w.config = config;
  detail::TensorReader reader(path, bytes.data() + detail::kWeightsHeaderBytes);
  reader.read("wte", w.token_embedding, config.vocab_size, d);
  reader.read("wpe", w.position_embedding, config.max_context, d);
  w.layers.resize(config.n_layer);
  for (std::size_t l = 0; l < config.n_layer; ++l) {
    GptLayerWeights& layer = w.layers[l];
    const std::string prefix = "blocks." + std::to_string(l) + ".";
    reader.read(prefix + "ln1.weight", layer.ln1_weight, d);
    reader.read(prefix + "ln1.bias", layer.ln1_bias, d);
    reader.read(prefix + "qkv.weight", layer.qkv_weight, 3 * d, d);
    reader.read(prefix + "qkv.bias", layer.qkv_bias, 3 * d);
    reader.read(prefix + "proj.weight", layer.proj_weight, d, d);
    reader.read(prefix + "proj.bias", layer.proj_bias, d);
    reader.read(prefix + "ln2.weight", layer.ln2_weight, d);
    reader.read(prefix + "ln2.bias", layer.ln2_bias, d);
    reader.read(prefix + "fc1.weight", layer.fc1_weight, f, d);
    reader.read(prefix + "fc1.bias", layer.fc1_bias, f);
    reader.read(prefix + "fc2.weight", layer.fc2_weight, d, f);
    reader.read(prefix + "fc2.bias", layer.fc2_bias, d);
  }
  reader.read("ln_f.weight", w.lnf_weight, d);
  reader.read("ln_f.bias", w.lnf_bias, d);
  return w;
}

/// \brief Loads a .spdc weight file (see the top of this header for the format).
/// \throws std::runtime_error naming the file: missing file, wrong magic, unsupported version or
///         dtype, implausible or inconsistent dims, truncated file, trailing bytes, non-finite
///         weight.
inline GptWeights load_gpt_weights(const std::filesystem::path& path) {
  const std::vector<unsigned char> bytes = detail::read_file_bytes(path, "GPT weight file");
  return parse_gpt_weights(bytes, path);
}

/// \brief Loads golden logits written by `export.py --golden`.
/// \throws std::runtime_error naming the file and what is wrong with it.
inline GoldenLogits load_golden_logits(const std::filesystem::path& path) {
  using detail::throw_file_error;
  const std::vector<unsigned char> bytes = detail::read_file_bytes(path, "golden logits file");
  detail::check_magic(path, bytes, detail::kGoldenMagic, "a golden logits file");
  constexpr std::size_t header_bytes = 8 + 2 * 4;
  if (bytes.size() < header_bytes) throw_file_error(path, "truncated golden header");
  const std::uint32_t vocab = detail::read_u32_le(bytes.data() + 8);
  const std::uint32_t n = detail::read_u32_le(bytes.data() + 12);
  detail::check_dim(path, "vocab_size", vocab, detail::kMaxVocab);
  detail::check_dim(path, "token count", n, detail::kMaxContext);
  const std::uint64_t expected = header_bytes + 4ull * n + 4ull * n * vocab;
  if (bytes.size() != expected) {
    throw_file_error(path, "golden file has " + std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(expected) + " for " + std::to_string(n) +
                               " tokens x vocab " + std::to_string(vocab));
  }
  GoldenLogits golden;
  golden.tokens.resize(n);
  const unsigned char* at = bytes.data() + header_bytes;
  for (std::uint32_t i = 0; i < n; ++i, at += 4) {
    golden.tokens[i] = static_cast<std::int32_t>(detail::read_u32_le(at));
  }
  golden.logits.resize(n, vocab);
  for (std::uint64_t i = 0; i < std::uint64_t{n} * vocab; ++i, at += 4) {
    golden.logits.data()[i] = std::bit_cast<float>(detail::read_u32_le(at));
  }
  return golden;
}

}  // namespace specdec::examples
