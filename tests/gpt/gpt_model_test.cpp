// Tests for the example GPT (examples/gpt/): fp16 conversion, the .spdc loader's error messages,
// and the KV-cached forward: golden logits from PyTorch, cached == full, batched rows == single
// rows bit for bit, KV rollback after a rejected draft, tree calls (every row == the chain call of
// its path, bit for bit; the accepted path kept by the next call), call errors, no allocation
// per call.
//
// The shipped models are read from SPECDEC_MODELS_DIR (models/kjv-{target,draft}.{spdc,golden});
// a small synthetic model with "odd" dimensions (not multiples of the 16 dot lanes, head_dim 8)
// is generated on the fly to exercise the kernels' tails and chunking.

#include "gpt/gpt_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpt/fp16.hpp"
#include "gpt/weights.hpp"
#include "specdec/model.hpp"

#ifndef SPECDEC_MODELS_DIR
#error "gpt_model_test needs SPECDEC_MODELS_DIR (see tests/CMakeLists.txt)"
#endif

namespace {

using specdec::token_t;
using specdec::examples::GoldenLogits;
using specdec::examples::GptConfig;
using specdec::examples::GptModel;
using specdec::examples::half_to_float;
using specdec::examples::load_golden_logits;
using specdec::examples::load_gpt_weights;

namespace fs = std::filesystem;

static_assert(specdec::DraftModel<GptModel>, "GptModel must serve as a specdec draft model");
static_assert(specdec::TargetModel<GptModel>, "GptModel must serve as a specdec target model");

const fs::path kModelsDir = SPECDEC_MODELS_DIR;
const fs::path kTargetPath = kModelsDir / "kjv-target.spdc";
const fs::path kDraftPath = kModelsDir / "kjv-draft.spdc";

// ---------------------------------------------------------------------------------------------
// Helpers

std::vector<token_t> tokens_of(std::string_view text) {
  return {text.begin(), text.end()};  // byte-level vocabulary: token = byte
}

const std::vector<token_t>& genesis() {
  static const std::vector<token_t> tokens = tokens_of(
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
      "the face of the waters.");
  return tokens;
}

std::vector<float> copy_of(std::span<const float> values) { return {values.begin(), values.end()}; }

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// max |a - b| / max |b|: the error relative to the scale of the reference logits.
double relative_error(std::span<const float> a, std::span<const float> b) {
  double max_diff = 0.0;
  double max_ref = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(b[i])));
  }
  return max_diff / max_ref;
}

std::vector<unsigned char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, std::span<const unsigned char> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void put_u32(std::vector<unsigned char>& bytes, std::size_t offset, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<unsigned char>(value >> (8 * i));
}

/// Rewrites the trailing CRC-32 of a .spdc image to match its (edited) content, so a test can
/// reach the checks behind the checksum.
void restamp(std::vector<unsigned char>& bytes) {
  const std::size_t checked = bytes.size() - 4;
  put_u32(bytes, checked, specdec::examples::detail::crc32(std::span(bytes).first(checked)));
}

// Header field offsets in a .spdc file (magic is bytes 0..7).
constexpr std::size_t kVersionAt = 8, kVocabAt = 12, kContextAt = 16, kLayersAt = 20, kHeadsAt = 24,
                      kWidthAt = 28, kFfAt = 32, kDtypeAt = 36, kHeaderBytes = 40;

/// A .spdc image with random fp16 weights of magnitude 2^-7 .. 2^-1 (layer-norm gains too).
std::vector<unsigned char> synthetic_spdc(const GptConfig& c, std::uint64_t seed) {
  std::vector<unsigned char> bytes(kHeaderBytes);
  std::memcpy(bytes.data(), "SPDCGPT1", 8);
  const std::uint32_t fields[] = {2,
                                  static_cast<std::uint32_t>(c.vocab_size),
                                  static_cast<std::uint32_t>(c.max_context),
                                  static_cast<std::uint32_t>(c.n_layer),
                                  static_cast<std::uint32_t>(c.n_head),
                                  static_cast<std::uint32_t>(c.d_model),
                                  static_cast<std::uint32_t>(c.d_ff),
                                  1};
  for (std::size_t i = 0; i < 8; ++i) put_u32(bytes, 8 + 4 * i, fields[i]);
  std::mt19937_64 gen(seed);
  for (std::uint64_t i = 0; i < c.parameter_count(); ++i) {
    const std::uint64_t r = gen();
    const auto sign = static_cast<std::uint16_t>((r & 1) << 15);
    const auto exponent = static_cast<std::uint16_t>(8 + (r >> 1) % 7);  // 2^-7 .. 2^-1
    const auto mantissa = static_cast<std::uint16_t>((r >> 8) & 0x3ff);
    const auto half = static_cast<std::uint16_t>(sign | (exponent << 10) | mantissa);
    bytes.push_back(static_cast<unsigned char>(half & 0xff));
    bytes.push_back(static_cast<unsigned char>(half >> 8));
  }
  bytes.resize(bytes.size() + 4);
  restamp(bytes);
  return bytes;
}

/// Dimensions chosen to hit every edge: d_model, d_ff, vocab not multiples of 16, head_dim 8.
GptConfig odd_config() {
  GptConfig c;
  c.vocab_size = 41;  // = 1 mod 8, 6, 5, 4, 2 and 2 mod 3: every tile shape gets an edge tile
  c.max_context = 48;
  c.n_layer = 2;
  c.n_head = 3;
  c.d_model = 24;
  c.d_ff = 40;
  return c;
}

GptModel synthetic_model(std::size_t chunk_rows = GptModel::kDefaultChunkRows,
                         std::size_t max_tree_nodes = GptModel::kDefaultMaxTreeNodes) {
  const std::vector<unsigned char> bytes = synthetic_spdc(odd_config(), 42);
  return GptModel(specdec::examples::parse_gpt_weights(bytes, "synthetic.spdc"), chunk_rows,
                  max_tree_nodes);
}

std::vector<token_t> random_tokens(std::size_t count, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<token_t> tokens(count);
  for (token_t& t : tokens) t = static_cast<token_t>(gen() % vocab);
  return tokens;
}

/// Loaded once per test binary: the target takes ~0.1 s to convert.
GptModel& shared_target() {
  static GptModel model = GptModel::from_file(kTargetPath);
  return model;
}
GptModel& shared_draft() {
  static GptModel model = GptModel::from_file(kDraftPath);
  return model;
}

/// Checks row i of model.target(context, n) == a one-row forward of the same prefix, bit for bit,
/// for every n in 1..max_n, against a separate reference model.
void expect_rows_match_single_rows(GptModel& batched, GptModel& reference,
                                   std::span<const token_t> context, std::size_t max_n) {
  const std::size_t vocab = batched.vocab_size();
  const std::size_t count = std::min(max_n, context.size());
  std::vector<float> single(count * vocab);  // row k: logits after context.size() - count + 1 + k
  for (std::size_t k = 0; k < count; ++k) {
    const auto row = reference.draft(context.first(context.size() - count + 1 + k));
    std::copy(row.begin(), row.end(), single.begin() + static_cast<std::ptrdiff_t>(k * vocab));
  }
  for (std::size_t n = 1; n <= count; ++n) {
    const std::span<const float> rows = batched.target(context, n);
    ASSERT_EQ(rows.size(), n * vocab);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t k = count - n + i;
      EXPECT_TRUE(bitwise_equal(rows.subspan(i * vocab, vocab),
                                std::span<const float>(single).subspan(k * vocab, vocab)))
          << "context length " << context.size() << ", n = " << n << ", row " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fp16

TEST(Fp16, EveryBitPatternConvertsExactly) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float sign = (half & 0x8000) ? -1.0f : 1.0f;
    const int exponent = (half >> 10) & 0x1f;
    const int mantissa = half & 0x3ff;
    const float value = half_to_float(half);
    if (exponent == 0x1f && mantissa != 0) {
      EXPECT_TRUE(std::isnan(value)) << bits;
    } else if (exponent == 0x1f) {
      EXPECT_EQ(value, sign * INFINITY) << bits;
    } else {
      const double magnitude =
          exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
      EXPECT_EQ(value, static_cast<float>(sign * magnitude)) << bits;
      EXPECT_EQ(std::signbit(value), (half & 0x8000) != 0) << bits;
    }
  }
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  static_assert(half_to_float(0x3555) > 0.333f && half_to_float(0x3555) < 0.3334f);
}

// ---------------------------------------------------------------------------------------------
// Golden logits (PyTorch, float64, from the same fp16 weights; tools/train/export.py --golden)

void expect_matches_golden(GptModel& model, const fs::path& golden_path, const char* name) {
  const GoldenLogits golden = load_golden_logits(golden_path);
  ASSERT_EQ(static_cast<std::size_t>(golden.logits.cols()), model.vocab_size());
  const std::span<const token_t> tokens(golden.tokens);
  const std::span<const float> expected(golden.logits.data(),
                                        static_cast<std::size_t>(golden.logits.size()));

  // Every row in one target call (prompt processing in chunks) ...
  model.reset();
  const std::vector<float> all_rows = copy_of(model.target(tokens, tokens.size()));
  const double batch_error = relative_error(all_rows, expected);
  // ... and one token at a time through the cache (decoding).
  model.reset();
  std::vector<float> incremental;
  for (std::size_t i = 1; i <= tokens.size(); ++i) {
    const auto row = model.draft(tokens.first(i));
    incremental.insert(incremental.end(), row.begin(), row.end());
  }
  const double incremental_error = relative_error(incremental, expected);
  std::printf("[ golden   ] %s: %zu tokens, max|ours - torch| / max|torch| = %.3g\n", name,
              tokens.size(), batch_error);
  EXPECT_LE(batch_error, 1e-4);
  EXPECT_LE(incremental_error, 1e-4);
  EXPECT_TRUE(bitwise_equal(all_rows, incremental)) << "cached decoding != one full forward";
}

TEST(GptGolden, TargetMatchesPyTorch) {
  expect_matches_golden(shared_target(), kModelsDir / "kjv-target.golden", "target");
}

TEST(GptGolden, DraftMatchesPyTorch) {
  expect_matches_golden(shared_draft(), kModelsDir / "kjv-draft.golden", "draft");
}

TEST(GptModel, ShippedConfigs) {
  const GptConfig& target = shared_target().config();
  EXPECT_EQ(target.vocab_size, 256u);
  EXPECT_EQ(target.n_layer, 6u);
  EXPECT_EQ(target.d_model, 384u);
  const GptConfig& draft = shared_draft().config();
  EXPECT_EQ(draft.vocab_size, 256u);
  EXPECT_EQ(draft.n_layer, 2u);
  EXPECT_EQ(draft.max_context, target.max_context);
}

// ---------------------------------------------------------------------------------------------
// Cache: incremental == full, reuse, rollback

TEST(GptModel, CachedForwardEqualsFullForwardBitwise) {
  GptModel model = synthetic_model();
  GptModel fresh = synthetic_model();
  const std::vector<token_t> tokens = random_tokens(40, model.vocab_size(), 7);
  for (std::size_t i = 1; i <= tokens.size(); ++i) {
    const std::span<const token_t> prefix(tokens.data(), i);
    const std::vector<float> cached = copy_of(model.draft(prefix));  // 1 new position
    fresh.reset();
    const std::vector<float> full = copy_of(fresh.draft(prefix));  // i positions from scratch
    ASSERT_TRUE(bitwise_equal(cached, full)) << "prefix length " << i;
  }
  EXPECT_EQ(model.positions_computed(), tokens.size());  // each position computed exactly once
}

TEST(GptModel, CacheReusesTheCommonPrefix) {
  GptModel& model = shared_draft();
  model.reset();
  const std::vector<token_t>& text = genesis();
  const std::span<const token_t> context(text.data(), 60);
  const std::uint64_t before = model.positions_computed();
  model.draft(context.first(50));
  EXPECT_EQ(model.positions_computed() - before, 50u);
  model.draft(context.first(51));  // one more token: one position
  EXPECT_EQ(model.positions_computed() - before, 51u);
  model.target(context.first(55), 5);  // 4 new tokens, 5 rows: recompute position 50 too
  EXPECT_EQ(model.positions_computed() - before, 56u);
  model.draft(context.first(55));  // same context again: the last row is recomputed
  EXPECT_EQ(model.positions_computed() - before, 57u);
  EXPECT_EQ(model.cached_tokens().size(), 55u);
}

/// Feeds accepted + drafted tokens, then accepted + corrected tokens (the decoder's pattern after a
/// rejection) and returns the 2 rows of the second call.
std::vector<float> rows_after_rollback(GptModel& model, std::uint64_t* positions_for_second_call) {
  const std::vector<token_t>& text = genesis();
  const std::vector<token_t> accepted(text.begin(), text.begin() + 40);  // "A"
  const std::vector<token_t> drafted = tokens_of("xyzzy");               // rejected
  const std::vector<token_t> corrected = tokens_of("Q r");               // what came instead

  std::vector<token_t> speculative = accepted;
  speculative.insert(speculative.end(), drafted.begin(), drafted.end());
  model.target(speculative, drafted.size() + 1);  // verify 5 drafts: caches A + drafts

  std::vector<token_t> context = accepted;
  context.insert(context.end(), corrected.begin(), corrected.end());
  const std::uint64_t before = model.positions_computed();
  std::vector<float> rows = copy_of(model.target(context, 2));
  *positions_for_second_call = model.positions_computed() - before;
  return rows;
}

std::vector<float> rows_without_history(GptModel& model) {
  const std::vector<token_t>& text = genesis();
  std::vector<token_t> context(text.begin(), text.begin() + 40);
  const std::vector<token_t> corrected = tokens_of("Q r");
  context.insert(context.end(), corrected.begin(), corrected.end());
  model.reset();
  return copy_of(model.target(context, 2));
}

TEST(GptModel, RollbackAfterRejectedDraftMatchesFreshModel) {
  {  // draft: against a freshly loaded instance (no state shared at all)
    GptModel& model = shared_draft();
    model.reset();
    std::uint64_t computed = 0;
    const std::vector<float> rolled_back = rows_after_rollback(model, &computed);
    EXPECT_EQ(computed, 3u);  // only the 3 corrected tokens past the common prefix
    GptModel fresh = GptModel::from_file(kDraftPath);
    EXPECT_TRUE(bitwise_equal(rolled_back, rows_without_history(fresh)));
  }
  {  // target: against the same instance after reset() (a second 44 MB load is not worth it)
    GptModel& model = shared_target();
    model.reset();
    std::uint64_t computed = 0;
    const std::vector<float> rolled_back = rows_after_rollback(model, &computed);
    EXPECT_EQ(computed, 3u);
    EXPECT_TRUE(bitwise_equal(rolled_back, rows_without_history(model)));
  }
}

// ---------------------------------------------------------------------------------------------
// Row i of an n-row forward == the one-row forward of the same prefix, bit for bit

#if defined(__AVX512F__)
// The AVX-512 kernel reduces 16 dot products at once; its claim is that each lane is rounded
// exactly as Eigen's predux of that accumulator (so tile shapes and row counts never matter).
TEST(GptKernel, TransposedReductionEqualsPreduxBitwise) {
  namespace ex = specdec::examples::detail;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> value(-1e3f, 1e3f);
  for (int trial = 0; trial < 200; ++trial) {
    alignas(64) float data[16][16];
    __m512 acc[16];
    for (int k = 0; k < 16; ++k) {
      // Mixed magnitudes make the rounding depend on the order of the additions.
      const float scale = std::ldexp(1.0f, static_cast<int>(gen() % 40) - 20);
      for (float& x : data[k]) x = value(gen) * scale;
      acc[k] = _mm512_load_ps(data[k]);
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, ex::reduce_16(acc));
    for (int k = 0; k < 16; ++k) {
      const float expected = Eigen::internal::predux(acc[k]);
      ASSERT_TRUE(
          bitwise_equal(std::span<const float>(&sums[k], 1), std::span<const float>(&expected, 1)))
          << "trial " << trial << ", lane " << k << ": " << sums[k] << " vs " << expected;
    }
  }
}
#endif

// The kernel on its own, on shapes the shipped models do not have: rows wide enough to be taken
// in slices (every n >= 4 on 1546 floats) with a length that is no multiple of 16 (the last slice
// runs the tail code), and row counts that leave a short last block and edge tiles. Every row of
// an n-row call must equal the one-row call bit for bit, and be the dot product it claims to be.
TEST(GptKernel, LinearRowsBatchedEqualsSingleRowsBitwiseOnWideAndOddMatrices) {
  namespace ex = specdec::examples::detail;
  using specdec::examples::RowMajorMatrixXf;
  const std::pair<Eigen::Index, Eigen::Index> shapes[] = {
      {37, 1546}, {50, 800}, {97, 384}, {29, 20}};
  for (const auto& [out_features, in_features] : shapes) {
    std::mt19937 gen(static_cast<unsigned>(out_features * 1000 + in_features));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    RowMajorMatrixXf weight(out_features, in_features);
    RowMajorMatrixXf input(40, in_features);
    Eigen::VectorXf bias(out_features);
    for (Eigen::Index i = 0; i < weight.size(); ++i) weight.data()[i] = value(gen);
    for (Eigen::Index i = 0; i < input.size(); ++i) input.data()[i] = value(gen);
    for (Eigen::Index i = 0; i < bias.size(); ++i) bias[i] = value(gen);
    RowMajorMatrixXf one(1, out_features);
    for (Eigen::Index n = 1; n <= 40; ++n) {
      SCOPED_TRACE(::testing::Message() << out_features << " x " << in_features << ", n " << n);
      RowMajorMatrixXf rows(n, out_features);
      ex::linear_rows(weight, bias.data(), input.topRows(n), rows);
      for (Eigen::Index j = 0; j < n; ++j) {
        ex::linear_rows(weight, bias.data(), input.middleRows(j, 1), one);
        ASSERT_TRUE(bitwise_equal(std::span<const float>(one.data(), one.size()),
                                  std::span<const float>(&rows(j, 0), one.size())))
            << "row " << j;
        for (Eigen::Index o = 0; o < out_features; ++o) {
          double dot = bias[o];
          for (Eigen::Index i = 0; i < in_features; ++i) dot += double(weight(o, i)) * input(j, i);
          ASSERT_NEAR(rows(j, o), dot, 1e-4 * (1.0 + std::abs(dot)))
              << "row " << j << ", output " << o;
        }
      }
    }
  }
}

TEST(GptModel, BatchedRowsEqualSingleRowsBitwiseDraft) {
  GptModel batched = GptModel::from_file(kDraftPath);
  GptModel reference = GptModel::from_file(kDraftPath);
  const std::vector<token_t>& text = genesis();
  for (std::size_t length : {1u, 2u, 9u, 10u, 33u, 100u, 160u}) {
    SCOPED_TRACE(length);
    expect_rows_match_single_rows(batched, reference, std::span(text).first(length), 9);
  }
}

TEST(GptModel, BatchedRowsEqualSingleRowsBitwiseTarget) {
  GptModel& batched = shared_target();
  GptModel reference = GptModel::from_file(kTargetPath);
  const std::vector<token_t>& text = genesis();
  batched.reset();
  for (std::size_t length : {12u, 40u}) {
    SCOPED_TRACE(length);
    // n <= 9: one register tile; n = 10..16: two groups taking turns on 24-row blocks. fc2's
    // 1536-wide rows go in slices for n >= 4.
    expect_rows_match_single_rows(batched, reference, std::span(text).first(length), 16);
  }
}

TEST(GptModel, BatchedRowsEqualSingleRowsBitwiseOddDimsAndSmallChunks) {
  // chunk_rows 3 < n: target rows span several chunks, and every kernel runs its tail code.
  GptModel batched = synthetic_model(3);
  GptModel reference = synthetic_model();
  for (std::size_t length : {1u, 5u, 12u, 31u, 48u}) {
    SCOPED_TRACE(length);
    const std::vector<token_t> tokens = random_tokens(length, batched.vocab_size(), length);
    expect_rows_match_single_rows(batched, reference, tokens, 12);
  }
}

TEST(GptModel, BatchedRowsEqualSingleRowsBitwiseOddDimsUpToSixteenRows) {
  // Default chunk_rows: every row count 1..16 reaches the kernel whole (one tile up to 9 rows,
  // input groups beyond), on matrices whose row counts leave an edge tile of every shape.
  GptModel batched = synthetic_model();
  GptModel reference = synthetic_model();
  for (std::size_t length : {16u, 37u}) {
    SCOPED_TRACE(length);
    const std::vector<token_t> tokens = random_tokens(length, batched.vocab_size(), length);
    expect_rows_match_single_rows(batched, reference, tokens, 16);
  }
}

TEST(GptModel, BatchedRowsEqualSingleRowsBitwiseInChunksOfMoreThanThirtyTwoRows) {
  // chunk_rows 48: a call of 48 rows runs eight input groups on every weight tile.
  GptModel batched = synthetic_model(48);
  GptModel reference = synthetic_model();
  const std::vector<token_t> tokens = random_tokens(48, batched.vocab_size(), 7);
  expect_rows_match_single_rows(batched, reference, tokens, 48);
}

// ---------------------------------------------------------------------------------------------
// Trees: every row of score_tree == the chain call of a root-to-leaf path, bit for bit; the
// cache keeps the accepted path

struct Tree {
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
};

/// A tree with widths[d] children under every node of depth d - 1 (the root for d = 0), in
/// breadth-first order, tokens drawn at random. With duplicates, each node's second child
/// repeats the first one's token (siblings drawn with replacement).
Tree fixed_tree(std::span<const std::size_t> widths, std::size_t vocab, std::uint64_t seed,
                bool duplicates) {
  std::mt19937_64 gen(seed);
  Tree tree;
  std::vector<std::int32_t> level{-1};
  for (const std::size_t width : widths) {
    std::vector<std::int32_t> next_level;
    for (const std::int32_t parent : level) {
      for (std::size_t w = 0; w < width; ++w) {
        const bool repeat = duplicates && w == 1;
        tree.tokens.push_back(repeat ? tree.tokens.back() : static_cast<token_t>(gen() % vocab));
        tree.parents.push_back(parent);
        next_level.push_back(static_cast<std::int32_t>(tree.tokens.size() - 1));
      }
    }
    level = std::move(next_level);
  }
  return tree;
}

/// `nodes` nodes, each under a random earlier node or the root: depth-first, breadth-first and
/// everything between.
Tree random_tree(std::size_t nodes, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  Tree tree;
  for (std::size_t i = 0; i < nodes; ++i) {
    tree.tokens.push_back(static_cast<token_t>(gen() % vocab));
    tree.parents.push_back(static_cast<std::int32_t>(gen() % (i + 1)) - 1);
  }
  return tree;
}

/// Node indices from the root to `node`.
std::vector<std::size_t> path_to(const Tree& tree, std::size_t node) {
  std::vector<std::size_t> path;
  for (auto i = static_cast<std::int32_t>(node); i >= 0; i = tree.parents[std::size_t(i)]) {
    path.insert(path.begin(), static_cast<std::size_t>(i));
  }
  return path;
}

std::vector<token_t> with_path(std::span<const token_t> committed, const Tree& tree,
                               std::span<const std::size_t> path) {
  std::vector<token_t> context(committed.begin(), committed.end());
  for (const std::size_t node : path) context.push_back(tree.tokens[node]);
  return context;
}

/// Every row of model.score_tree(committed, tree) equals, bit for bit, the row of the same prefix
/// in reference.target(committed + path, path.size() + 1) for the path to each leaf.
void expect_tree_rows_match_path_calls(GptModel& model, GptModel& reference,
                                       std::span<const token_t> committed, const Tree& tree) {
  const std::size_t vocab = model.vocab_size();
  const std::vector<float> rows = copy_of(model.score_tree(committed, tree.tokens, tree.parents));
  ASSERT_EQ(rows.size(), (tree.tokens.size() + 1) * vocab);
  const auto tree_row = [&](std::size_t r) { return std::span(rows).subspan(r * vocab, vocab); };
  std::vector<bool> is_parent(tree.tokens.size(), false);
  for (const std::int32_t parent : tree.parents) {
    if (parent >= 0) is_parent[static_cast<std::size_t>(parent)] = true;
  }
  std::size_t leaves = 0;
  for (std::size_t leaf = 0; leaf < tree.tokens.size(); ++leaf) {
    if (is_parent[leaf]) continue;
    ++leaves;
    const std::vector<std::size_t> path = path_to(tree, leaf);
    const std::vector<token_t> context = with_path(committed, tree, path);
    const std::span<const float> chain = reference.target(context, path.size() + 1);
    ASSERT_TRUE(bitwise_equal(tree_row(0), chain.first(vocab))) << "row 0, leaf " << leaf;
    for (std::size_t k = 0; k < path.size(); ++k) {
      ASSERT_TRUE(bitwise_equal(tree_row(1 + path[k]), chain.subspan((k + 1) * vocab, vocab)))
          << "node " << path[k] << " (depth " << k << ") on the path to leaf " << leaf;
    }
  }
  if (tree.tokens.empty()) {
    ASSERT_TRUE(bitwise_equal(tree_row(0), reference.draft(committed)));
  }
  EXPECT_GT(leaves + (tree.tokens.empty() ? 1 : 0), 0u);
}

TEST(GptTree, RowsEqualChainCallsOfEveryPathBitwiseOddDims) {
  // Widths 1..4 at every depth, depths 1..4 (up to 4 + 16 + 64 + 256 = 340 nodes: many chunks of
  // keys, every tile shape of the kernel), with and without duplicate siblings, after committed
  // contexts that are cached (5 tokens, once computed) or mostly new (30 tokens after a reset).
  GptModel model = synthetic_model(GptModel::kDefaultChunkRows, 340);
  GptModel reference = synthetic_model();
  for (std::size_t width = 1; width <= 4; ++width) {
    for (std::size_t depth = 1; depth <= 4; ++depth) {
      for (const bool duplicates : {false, true}) {
        if (duplicates && width == 1) continue;
        const std::vector<std::size_t> widths(depth, width);
        const Tree tree = fixed_tree(widths, model.vocab_size(), width * 10 + depth, duplicates);
        for (const std::size_t committed_length : {5u, 30u}) {
          SCOPED_TRACE(::testing::Message() << width << "^" << depth << " tree, duplicates "
                                            << duplicates << ", committed " << committed_length);
          const std::vector<token_t> committed =
              random_tokens(committed_length, model.vocab_size(), committed_length);
          if (committed_length == 30) model.reset();
          expect_tree_rows_match_path_calls(model, reference, committed, tree);
        }
      }
    }
  }
}

TEST(GptTree, RowsEqualChainCallsRandomTreesSmallChunksAndEmptyTree) {
  // chunk_rows 3: the committed positions before the tree's chunk go in several chunks.
  GptModel model = synthetic_model(3, 24);
  GptModel reference = synthetic_model();
  for (std::size_t nodes : {0u, 1u, 2u, 7u, 16u, 24u}) {
    for (std::uint64_t seed = 0; seed < 3; ++seed) {
      SCOPED_TRACE(::testing::Message() << nodes << " nodes, seed " << seed);
      const Tree tree = random_tree(nodes, model.vocab_size(), 100 * nodes + seed);
      const std::vector<token_t> committed = random_tokens(20, model.vocab_size(), seed);
      model.reset();
      expect_tree_rows_match_path_calls(model, reference, committed, tree);
    }
  }
}

TEST(GptTree, RowsEqualChainCallsOfEveryPathBitwiseShippedModels) {
  // 4x2x2x1 (44 nodes: 45 rows, input groups on every weight tile), 2x2x2x2 (30 nodes), 3x3
  // (12 nodes: two register-tile groups), a 4-node chain and 8 siblings: every shape on the
  // shipped draft, with and without duplicate siblings; three of them on the shipped target.
  struct Case {
    std::vector<std::size_t> widths;
    bool duplicates;
    bool on_target;
  };
  const std::vector<Case> cases{
      {{4, 2, 2, 1}, false, false}, {{4, 2, 2, 1}, true, true}, {{2, 2, 2, 2}, false, false},
      {{2, 2, 2, 2}, true, false},  {{3, 3}, false, true},      {{3, 3}, true, false},
      {{1, 1, 1, 1}, false, false}, {{8}, false, false},        {{8}, true, true}};
  const std::vector<token_t>& text = genesis();
  GptModel draft = GptModel::from_file(kDraftPath);
  GptModel& draft_reference = shared_draft();
  GptModel& target = shared_target();
  GptModel target_reference = GptModel::from_file(kTargetPath);
  target.reset();
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(::testing::Message() << "case " << c);
    const Tree tree = fixed_tree(cases[c].widths, 128, c, cases[c].duplicates);
    const std::span<const token_t> committed = std::span(text).first(60 + c);
    expect_tree_rows_match_path_calls(draft, draft_reference, committed, tree);
    if (cases[c].on_target) {
      expect_tree_rows_match_path_calls(target, target_reference, committed, tree);
    }
  }
}

/// One call of a random sequence: the rows of `model` must equal those of a model that computes
/// the same call from scratch.
void expect_call_matches_fresh(GptModel& model, GptModel& fresh, std::span<const token_t> context,
                               std::size_t n) {
  const std::vector<float> rows = copy_of(model.target(context, n));
  fresh.reset();
  ASSERT_TRUE(bitwise_equal(rows, fresh.target(context, n)));
}

TEST(GptTree, CachedCallsAfterATreeEqualFreshCalls) {
  GptModel model = synthetic_model();
  GptModel fresh = synthetic_model();
  const std::size_t vocab = model.vocab_size();
  const std::vector<token_t> committed = random_tokens(12, vocab, 1);
  const std::array<std::size_t, 3> widths{3, 2, 2};
  const Tree tree = fixed_tree(widths, vocab, 5, true);  // 3 + 6 + 12 nodes
  const std::size_t deep_node = 17;                      // a leaf under the second root child
  const std::vector<std::size_t> deep_path = path_to(tree, deep_node);
  ASSERT_EQ(deep_path.size(), 3u);
  ASSERT_NE(deep_path, (std::vector<std::size_t>{0, 1, 2}));  // its rows must move

  {  // the accepted path, the next token and three drafts: only those four are computed
    SCOPED_TRACE("path, next token, drafts");
    (void)model.score_tree(committed, tree.tokens, tree.parents);
    std::vector<token_t> context = with_path(committed, tree, deep_path);
    context.insert(context.end(), {7, 8, 9, 10});
    const std::uint64_t before = model.positions_computed();
    expect_call_matches_fresh(model, fresh, context, 4);
    EXPECT_EQ(model.positions_computed() - before, 4u);
  }
  {  // a context that follows no node: the committed context is kept, the tree dropped
    SCOPED_TRACE("no path");
    (void)model.score_tree(committed, tree.tokens, tree.parents);
    std::vector<token_t> context = committed;
    token_t unused = 0;
    while (std::find(tree.tokens.begin(), tree.tokens.end(), unused) != tree.tokens.end()) ++unused;
    context.insert(context.end(), {unused, 3});
    const std::uint64_t before = model.positions_computed();
    expect_call_matches_fresh(model, fresh, context, 1);
    EXPECT_EQ(model.positions_computed() - before, 2u);
  }
  {  // part of a path, then draft calls one token at a time
    SCOPED_TRACE("a path then more");
    (void)model.score_tree(committed, tree.tokens, tree.parents);
    std::vector<token_t> context = with_path(committed, tree, std::span(deep_path).first(2));
    for (token_t t = 0; t < 5; ++t) {
      context.push_back(t);
      const std::uint64_t before = model.positions_computed();
      expect_call_matches_fresh(model, fresh, context, 1);
      EXPECT_EQ(model.positions_computed() - before, 1u);
    }
  }
  {  // a tree after a tree: the path is kept inside the new committed context
    SCOPED_TRACE("tree after tree");
    (void)model.score_tree(committed, tree.tokens, tree.parents);
    std::vector<token_t> next_committed = with_path(committed, tree, deep_path);
    next_committed.push_back(4);
    const Tree next_tree = random_tree(9, vocab, 3);
    const std::uint64_t before = model.positions_computed();
    expect_tree_rows_match_path_calls(model, fresh, next_committed, next_tree);
    EXPECT_EQ(model.positions_computed() - before, 1u + next_tree.tokens.size());
    // and a rollback into the committed context
    const std::span<const token_t> rolled_back = std::span(committed).first(8);
    expect_call_matches_fresh(model, fresh, rolled_back, 2);
  }
}

TEST(GptTree, RandomSequencesOfChainAndTreeCallsEqualFreshCalls) {
  GptModel model = synthetic_model(4, 20);
  GptModel fresh = synthetic_model();
  std::mt19937_64 gen(2026);
  const std::size_t vocab = model.vocab_size();
  std::vector<token_t> committed = random_tokens(6, vocab, 9);
  Tree tree;
  for (int call = 0; call < 150; ++call) {
    SCOPED_TRACE(::testing::Message() << "call " << call);
    std::vector<token_t> context = committed;
    if (!tree.tokens.empty() && gen() % 4 != 0) {  // usually: a path of the last tree
      const std::vector<std::size_t> path = path_to(tree, gen() % tree.tokens.size());
      context = with_path(committed, tree, std::span(path).first(1 + gen() % path.size()));
    }
    context.push_back(static_cast<token_t>(gen() % 3));  // the next token: repeats are likely
    if (gen() % 8 == 0) context.resize(1 + gen() % context.size());
    if (context.size() + 6 > model.max_context()) context.erase(context.begin(), context.end() - 8);
    if (gen() % 2 == 0) {
      tree = random_tree(gen() % 21, 3, gen());
      if (context.size() + tree.tokens.size() > model.max_context()) tree = Tree{};
      const std::vector<float> rows = copy_of(model.score_tree(context, tree.tokens, tree.parents));
      fresh.reset();
      ASSERT_TRUE(bitwise_equal(rows, fresh.score_tree(context, tree.tokens, tree.parents)));
    } else {
      tree = Tree{};
      expect_call_matches_fresh(model, fresh, context, 1 + gen() % context.size());
    }
    committed = context;
  }
}

TEST(GptTree, BadTreeCallsThrowAndLeaveTheCacheUsable) {
  GptModel model = synthetic_model(GptModel::kDefaultChunkRows, 8);
  GptModel fresh = synthetic_model();
  const std::vector<token_t> committed = random_tokens(10, model.vocab_size(), 4);
  const Tree tree = random_tree(6, model.vocab_size(), 8);
  (void)model.score_tree(committed, tree.tokens, tree.parents);

  const auto message_of = [&](std::span<const token_t> c, std::span<const token_t> tokens,
                              std::span<const std::int32_t> parents) -> std::string {
    try {
      (void)model.score_tree(c, tokens, parents);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no exception";
  };
  const std::vector<token_t> three{1, 2, 3};
  EXPECT_EQ(message_of(committed, three, std::vector<std::int32_t>{-1, 0, 2}),
            "specdec: tree node 2 has parent 2; expected a parent in [-1, 2): nodes in "
            "topological order (parents[i] < i), -1 for a child of the root");
  EXPECT_NE(message_of(committed, three, std::vector<std::int32_t>{-1, 5, 0})
                .find("tree node 1 has parent 5"),
            std::string::npos);
  EXPECT_NE(message_of(committed, three, std::vector<std::int32_t>{-3, -1, 0})
                .find("tree node 0 has parent -3"),
            std::string::npos);
  EXPECT_NE(message_of(committed, three, std::vector<std::int32_t>{-1, 0})
                .find("given 3 tokens and 2 parents; expected one parent per token"),
            std::string::npos);
  const std::vector<token_t> nine(9, 1);
  const std::vector<std::int32_t> flat(9, -1);
  EXPECT_NE(message_of(committed, nine, flat)
                .find("tree of 9 nodes; expected at most 8 (max_tree_nodes, a GptModel "
                      "constructor argument)"),
            std::string::npos);
  const std::vector<token_t> bad_token{1, 41};
  EXPECT_NE(message_of(committed, bad_token, std::vector<std::int32_t>{-1, 0})
                .find("tree token 41 at node 1 is outside the vocabulary [0, 41)"),
            std::string::npos);
  EXPECT_THROW((void)model.score_tree({}, three, std::vector<std::int32_t>{-1, 0, 1}),
               std::invalid_argument);
  // 45 committed tokens + a path of 4 > max_context 48; a path of 3 fits.
  const std::vector<token_t> long_committed = random_tokens(45, model.vocab_size(), 5);
  const std::vector<std::int32_t> chain4{-1, 0, 1, 2};
  const std::vector<token_t> four{1, 2, 3, 4};
  EXPECT_THROW((void)model.score_tree(long_committed, four, chain4), std::length_error);
  EXPECT_NE(message_of(long_committed, four, chain4)
                .find("committed context of 45 tokens plus a tree path of 4 nodes needs 49 "
                      "positions; expected at most the model's max_context of 48"),
            std::string::npos);

  // The tree scored before the errors is still the one the next context is matched against.
  std::vector<token_t> context = with_path(committed, tree, path_to(tree, 5));
  context.push_back(2);
  const std::uint64_t before = model.positions_computed();
  expect_call_matches_fresh(model, fresh, context, 1);
  EXPECT_EQ(model.positions_computed() - before, 1u);
  EXPECT_EQ(model.score_tree(long_committed, three, std::vector<std::int32_t>{-1, 0, 1}).size(),
            4 * model.vocab_size());
}

// ---------------------------------------------------------------------------------------------
// Call errors

TEST(GptModel, ContextLongerThanMaxContextThrowsLengthError) {
  GptModel& model = shared_draft();
  const std::size_t max_context = model.max_context();
  std::vector<token_t> tokens = random_tokens(max_context + 1, 128, 3);
  try {
    model.draft(tokens);
    FAIL() << "expected std::length_error";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(max_context + 1) + " tokens"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("max_context of " + std::to_string(max_context)),
              std::string::npos)
        << e.what();
  }
  tokens.pop_back();  // exactly max_context positions is fine
  EXPECT_EQ(model.target(tokens, 3).size(), 3 * model.vocab_size());
}

TEST(GptModel, BadCallsThrowInvalidArgumentAndLeaveTheCacheUsable) {
  GptModel model = synthetic_model();
  const std::vector<token_t> tokens = random_tokens(20, model.vocab_size(), 11);
  const std::vector<float> expected = copy_of(model.target(tokens, 4));

  EXPECT_THROW(model.draft({}), std::invalid_argument);
  EXPECT_THROW(model.target(tokens, 0), std::invalid_argument);
  EXPECT_THROW(model.target(tokens, tokens.size() + 1), std::invalid_argument);
  std::vector<token_t> bad = tokens;
  bad.back() = static_cast<token_t>(model.vocab_size());
  try {
    model.draft(bad);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token 41 at context position 19"), std::string::npos)
        << e.what();
  }
  bad.back() = -1;
  EXPECT_THROW(model.draft(bad), std::invalid_argument);

  EXPECT_TRUE(bitwise_equal(model.target(tokens, 4), expected));
}

// ---------------------------------------------------------------------------------------------
// Weight-file errors: corrupted copies of the shipped draft file in a temporary directory

class GptWeightFileErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("specdec_gpt_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    original_ = read_bytes(kDraftPath);
    ASSERT_GT(original_.size(), kHeaderBytes) << "missing " << kDraftPath;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  /// Writes `bytes` to a file and expects loading it to throw std::runtime_error whose message
  /// names the file and contains every one of `phrases`.
  void expect_load_error(std::span<const unsigned char> bytes,
                         std::initializer_list<std::string> phrases) {
    const fs::path path = dir_ / "corrupted.spdc";
    write_bytes(path, bytes);
    expect_error_at(path, phrases);
  }
  static void expect_error_at(const fs::path& path, std::initializer_list<std::string> phrases) {
    try {
      (void)load_gpt_weights(path);
      ADD_FAILURE() << "expected std::runtime_error for " << path;
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      for (const std::string& phrase : phrases) {
        EXPECT_NE(message.find(phrase), std::string::npos)
            << "'" << phrase << "' not in: " << message;
      }
    }
  }

  fs::path dir_;
  std::vector<unsigned char> original_;
};

TEST_F(GptWeightFileErrors, MissingFile) {
  expect_error_at(dir_ / "no-such-model.spdc", {"does not exist"});
}

TEST_F(GptWeightFileErrors, WrongMagic) {
  std::vector<unsigned char> bytes = original_;
  std::memcpy(bytes.data(), "GGUF\x03\0\0\0", 8);
  expect_load_error(bytes, {"magic is \"GGUF????\"", "expected \"SPDCGPT1\""});
  expect_load_error(std::span(bytes).first(3), {"magic"});  // shorter than the magic itself
}

TEST_F(GptWeightFileErrors, UnsupportedVersionAndDtype) {
  std::vector<unsigned char> bytes = original_;
  put_u32(bytes, kVersionAt, 3);
  expect_load_error(bytes, {"unsupported .spdc version 3", "supports version 2"});
  // A version 1 file (no checksum) is told how to convert it.
  bytes = original_;
  put_u32(bytes, kVersionAt, 1);
  bytes.resize(bytes.size() - 4);
  expect_load_error(bytes, {"unsupported .spdc version 1", "export.py --restamp"});
  bytes = original_;
  put_u32(bytes, kDtypeAt, 0);
  expect_load_error(bytes, {"unsupported dtype 0", "expected 1 (IEEE fp16)"});
}

TEST_F(GptWeightFileErrors, ImplausibleOrInconsistentDims) {
  std::vector<unsigned char> bytes = original_;
  put_u32(bytes, kLayersAt, 0);
  expect_load_error(bytes, {"implausible n_layer = 0"});
  bytes = original_;
  put_u32(bytes, kWidthAt, 0xffffffffu);  // would overflow every size computation
  expect_load_error(bytes, {"implausible d_model = 4294967295"});
  bytes = original_;
  put_u32(bytes, kVocabAt, 0);
  expect_load_error(bytes, {"implausible vocab_size = 0"});
  bytes = original_;
  put_u32(bytes, kHeadsAt, 5);  // d_model 96 is not divisible by 5
  expect_load_error(bytes, {"d_model = 96 is not divisible by n_head = 5"});
}

TEST_F(GptWeightFileErrors, WrongDimsDisagreeWithTheFileSize) {
  std::vector<unsigned char> bytes = original_;
  put_u32(bytes, kFfAt, 512);  // the header claims more weights than the file holds
  expect_load_error(bytes,
                    {"truncated", "d_ff 512", "the file has only " + std::to_string(bytes.size())});
  bytes = original_;
  put_u32(bytes, kContextAt, 128);  // fewer positions: the rest of the file is left over
  expect_load_error(bytes, {"trailing bytes", "max_context 128"});
}

TEST_F(GptWeightFileErrors, TruncatedFile) {
  expect_load_error(std::span(original_).first(original_.size() - 10),
                    {"truncated", "needs " + std::to_string(original_.size()) + " bytes",
                     "has only " + std::to_string(original_.size() - 10)});
  expect_load_error(std::span(original_).first(20), {"truncated header: 20 bytes"});
}

TEST_F(GptWeightFileErrors, TrailingBytes) {
  std::vector<unsigned char> bytes = original_;
  bytes.insert(bytes.end(), {0, 0, 0, 0});
  expect_load_error(bytes, {"4 trailing bytes after the checksum"});
}

TEST_F(GptWeightFileErrors, NonFiniteWeight) {
  std::vector<unsigned char> bytes = original_;
  bytes[kHeaderBytes + 2 * 5] = 0x00;  // wte[0][5] = +inf
  bytes[kHeaderBytes + 2 * 5 + 1] = 0x7c;
  expect_load_error(bytes, {"checksum mismatch"});  // caught by the checksum first
  restamp(bytes);
  expect_load_error(bytes, {"tensor wte has a non-finite value at index 5"});
}

// A flipped bit in a tensor (first, middle, last byte) or in the checksum itself is caught.
TEST_F(GptWeightFileErrors, FlippedByteFailsTheChecksum) {
  for (const std::size_t at : {kHeaderBytes, kHeaderBytes + 1, original_.size() / 2,
                               original_.size() - 5, original_.size() - 1}) {
    std::vector<unsigned char> bytes = original_;
    bytes[at] ^= 0x01;
    SCOPED_TRACE("byte " + std::to_string(at));
    expect_load_error(bytes, {"checksum mismatch", "corrupted or edited file"});
  }
}

// n_head 2 -> 1 or 4 keeps d_model divisible and every size consistent: only the checksum
// (which covers the header) tells that the file was edited.
TEST_F(GptWeightFileErrors, ChangedHeadCountFailsTheChecksum) {
  for (const std::uint32_t heads : {1u, 4u}) {
    std::vector<unsigned char> bytes = original_;
    put_u32(bytes, kHeadsAt, heads);
    expect_load_error(bytes, {"checksum mismatch"});
  }
}

TEST(GptWeightChecksum, MatchesZlibCrc32) {
  // The standard check value of CRC-32/ISO-HDLC (zlib.crc32(b"123456789")), and lengths that
  // exercise both the 8-byte steps and the byte tail.
  const std::string_view check = "123456789";
  EXPECT_EQ(specdec::examples::detail::crc32(
                std::span(reinterpret_cast<const unsigned char*>(check.data()), check.size())),
            0xCBF43926u);
  EXPECT_EQ(specdec::examples::detail::crc32({}), 0u);
  const std::string_view fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(specdec::examples::detail::crc32(
                std::span(reinterpret_cast<const unsigned char*>(fox.data()), fox.size())),
            0x414FA339u);
}

TEST_F(GptWeightFileErrors, ValidCopyLoads) {
  const fs::path path = dir_ / "copy.spdc";
  write_bytes(path, original_);
  EXPECT_EQ(load_gpt_weights(path).config.d_model, 96u);
}

// ---------------------------------------------------------------------------------------------
// No heap allocation per call after warm-up (glibc: malloc & co. are interposed and counted;
// operator new and Eigen both allocate through malloc). Skipped under sanitizers.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPECDEC_GPT_TEST_COUNTS_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SPECDEC_GPT_TEST_COUNTS_MALLOC 0
#endif
#endif
#if !defined(SPECDEC_GPT_TEST_COUNTS_MALLOC) && defined(__GLIBC__)
#define SPECDEC_GPT_TEST_COUNTS_MALLOC 1
#endif
#ifndef SPECDEC_GPT_TEST_COUNTS_MALLOC
#define SPECDEC_GPT_TEST_COUNTS_MALLOC 0
#endif

}  // namespace

#if SPECDEC_GPT_TEST_COUNTS_MALLOC
namespace {
std::atomic<std::size_t> g_allocations{0};  // constant-initialised: counts from before main()
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* pointer, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);

void* malloc(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(count, size);
}
void* realloc(void* pointer, std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(pointer, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** result, std::size_t alignment, std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  *result = __libc_memalign(alignment, size);
  return *result == nullptr ? ENOMEM : 0;
}
}  // extern "C"
#endif

namespace {

#if SPECDEC_GPT_TEST_COUNTS_MALLOC
/// Runs every kind of call on `model` and expects no allocation on any thread.
void expect_calls_do_not_allocate(GptModel& model) {
  model.reset();
  const std::vector<token_t>& text = genesis();
  const std::span<const token_t> context(text.data(), 50);
  {  // the harness sees an allocation inside the window
    const std::size_t before = g_allocations.load();
    std::vector<float> probe(3);
    asm volatile("" : : "g"(probe.data()) : "memory");  // keep the allocation (may be elided)
    EXPECT_GT(g_allocations.load() - before, 0u);
    EXPECT_EQ(probe.size(), 3u);
  }
  const std::vector<token_t> tree_tokens{10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<std::int32_t> tree_parents{-1, -1, 0, 0, 1, 2, 3, 4};
  const std::vector<token_t> after_tree{context[0], 11, 14, 17, 3};  // path 1 -> 4 -> 7, then 3
  const std::vector<token_t> big_tokens(GptModel::kDefaultMaxTreeNodes, 9);
  std::vector<std::int32_t> big_parents(GptModel::kDefaultMaxTreeNodes);
  for (std::size_t i = 0; i < big_parents.size(); ++i) {
    big_parents[i] = static_cast<std::int32_t>(i / 2) - 1;
  }
  const std::size_t before = g_allocations.load();
  model.target(context.first(40), 40);  // a prompt: three chunks of new positions
  model.draft(context.first(41));
  model.target(context.first(50), 9);  // verify 8 drafts
  model.target(context.first(45), 2);  // roll back
  // Tree calls (up to max_tree_nodes), then the calls that keep a path of them.
  model.score_tree(context.first(30), tree_tokens, tree_parents);
  model.score_tree(context.first(1), tree_tokens, tree_parents);
  model.target(after_tree, 2);
  model.score_tree(context.first(40), big_tokens, big_parents);
  model.score_tree(context.first(41), tree_tokens, tree_parents);
  model.reset();
  model.draft(context.first(20));
  EXPECT_EQ(g_allocations.load() - before, 0u);
}
#endif

TEST(GptModel, CallsDoNotAllocate) {
#if !SPECDEC_GPT_TEST_COUNTS_MALLOC
  GTEST_SKIP() << "allocation counting needs glibc and no sanitizer";
#else
  expect_calls_do_not_allocate(shared_target());
#endif
}

TEST(GptModel, BatchedCallsDoNotAllocateOnceTheirSequencesAreKnown) {
#if !SPECDEC_GPT_TEST_COUNTS_MALLOC
  GTEST_SKIP() << "allocation counting needs glibc and no sanitizer";
#else
  // A batched call allocates when it meets a new sequence id (its KV cache) or more rows than
  // any call before (the logits and chunk lists grow); after that, nothing.
  GptModel model = synthetic_model(GptModel::kDefaultChunkRows, GptModel::kDefaultMaxTreeNodes);
  const std::vector<token_t> text = random_tokens(40, model.vocab_size(), 3);
  const std::span<const token_t> all(text);
  const std::vector<specdec::ScoreRequest> first{
      {1, all.first(30), 25, 6}, {2, all.first(12), 12, 1}, {3, all.first(40), 31, 10}};
  const std::vector<specdec::ScoreRequest> then{
      {1, all.first(33), 30, 4}, {3, all.first(35), 32, 4}, {2, all.first(20), 13, 8}};
  const std::vector<specdec::DraftStepRequest> drafts{{3, all.first(36)}, {1, all.first(31)}};
  (void)model.score_batch(first);
  (void)model.draft_batch(drafts);
  const std::size_t before = g_allocations.load();
  (void)model.score_batch(then);
  (void)model.draft_batch(drafts);
  (void)model.score_batch(first);
  model.release(2);  // frees, allocates nothing
  EXPECT_EQ(g_allocations.load() - before, 0u);
#endif
}

TEST(GptModel, ThreadedCallsDoNotAllocate) {
#if !SPECDEC_GPT_TEST_COUNTS_MALLOC
  GTEST_SKIP() << "allocation counting needs glibc and no sanitizer";
#else
  GptModel model = GptModel::from_file(kTargetPath);
  model.set_threads(3);    // starts the workers: allocates, before the calls
  model.draft(genesis());  // a first call: the workers have run
  expect_calls_do_not_allocate(model);
#endif
}

}  // namespace
