// Tests for examples/gpt/bpe_tokenizer.hpp, the byte-level BPE of the example BPE draft
// (models/kjv-bpe.tokenizer): exactly the tokens tools/train/bpe.py produces, GPT-2's
// pre-tokenization, lossless round trips on any bytes, and the loader's errors.
//
// The expected token lists and hashes below are bpe.py's output, printed from the repository root
// by this script (python3 with tools/train on the path):
//   import sys; sys.path.insert(0, "tools/train")
//   from bpe import Tokenizer, pretokenize
//   tok = Tokenizer.load("models/kjv-bpe.tokenizer")
//   def lcg_bytes(n, seed, alphabet=None):   # the test's lcg_bytes()
//       x, out = seed, bytearray()
//       for _ in range(n):
//           x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
//           out.append(alphabet[(x >> 56) % len(alphabet)] if alphabet else x >> 56)
//       return bytes(out)
//   def fnv(ids):                            # the test's fnv1a() of the ids as u32 LE
//       h = 0xcbf29ce484222325
//       for i in ids:
//           for k in range(4):
//               h = ((h ^ ((i >> (8 * k)) & 0xff)) * 0x100000001b3) % (1 << 64)
//       return h
//   print(tok.encode(b" the LORD's"))        # and the other fixed strings of FixedStrings
//   print(pretokenize(b"Hello  world\n\nfoo  "))                # PreTokenization's cases
//   ids = tok.encode(open("models/prompts.txt", "rb").read()); print(len(ids), hex(fnv(ids)))
//   ids = tok.encode(lcg_bytes(4096, 1)); print(len(ids), hex(fnv(ids)))
//   ids = tok.encode(lcg_bytes(4096, 2, b"ab '\n\t0.\xc3sdLORD")); print(len(ids), hex(fnv(ids)))
// or, for one string: python3 tools/train/bpe.py encode models/kjv-bpe.tokenizer " the LORD's"
// They change whenever the tokenizer is retrained.

#include "gpt/bpe_tokenizer.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#ifndef SPECDEC_MODELS_DIR
#error "bpe_tokenizer_test needs SPECDEC_MODELS_DIR (see tests/CMakeLists.txt)"
#endif

namespace {

using specdec::token_t;
using specdec::examples::BpeTokenizer;

namespace fs = std::filesystem;

const fs::path kModelsDir = SPECDEC_MODELS_DIR;
const fs::path kTokenizerPath = kModelsDir / "kjv-bpe.tokenizer";

const BpeTokenizer& tokenizer() {
  static const BpeTokenizer t = BpeTokenizer::load(kTokenizerPath.string());
  return t;
}

std::vector<token_t> encode(std::string_view text) {
  std::vector<token_t> ids;
  tokenizer().encode(text, ids);
  return ids;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> pretokens(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = BpeTokenizer::pretoken_end(text, at);
    EXPECT_GT(end, at);
    out.emplace_back(text.substr(at, end - at));
    at = end;
  }
  return out;
}

// n bytes of a 64-bit LCG (bpe.py's lcg_bytes above): the top byte of each state, or the
// alphabet's letter it indexes.
std::string lcg_bytes(std::size_t n, std::uint64_t seed, std::string_view alphabet = {}) {
  std::string out;
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const auto top = static_cast<std::size_t>(x >> 56);
    out.push_back(alphabet.empty() ? static_cast<char>(static_cast<unsigned char>(top))
                                   : alphabet[top % alphabet.size()]);
  }
  return out;
}

std::uint64_t fnv1a(const std::vector<token_t>& ids) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const token_t id : ids) {
    const auto v = static_cast<std::uint32_t>(id);
    for (unsigned k = 0; k < 4; ++k) {
      h ^= (v >> (8 * k)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// A scratch file that is removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& name, std::string_view contents)
      : path_(fs::temp_directory_path() / name) {
    std::ofstream out(path_, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  }
  ~TempFile() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// The load error for `contents`, or "" if it loads.
std::string load_error(std::string_view contents) {
  const TempFile file("specdec_bpe_tokenizer_test.tokenizer", contents);
  try {
    (void)BpeTokenizer::load(file.path());
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------

TEST(BpeTokenizer, VocabularyIsTheBytesThenTheMerges) {
  const BpeTokenizer& t = tokenizer();
  ASSERT_EQ(t.size(), 1024u);
  for (int b = 0; b < 256; ++b) {
    ASSERT_EQ(t.bytes(b), std::string(1, static_cast<char>(b))) << b;
  }
  EXPECT_EQ(t.bytes(256), "th");  // the first merge: 116 104
  EXPECT_EQ(t.bytes(258), " the");
  for (token_t id = 256; id < 1024; ++id) EXPECT_GE(t.bytes(id).size(), 2u) << id;
  EXPECT_THROW((void)t.bytes(1024), std::out_of_range);
  EXPECT_THROW((void)t.bytes(-1), std::out_of_range);
  const std::vector<token_t> bad{65, 4096};
  EXPECT_THROW((void)t.decode(bad), std::out_of_range);
}

TEST(BpeTokenizer, FixedStringsEncodeAsBpePyDoes) {
  EXPECT_EQ(encode(" the LORD's"), (std::vector<token_t>{258, 348, 529}));
  EXPECT_EQ(encode("Psalms 23:1 The LORD is my shepherd; I shall not want."),
            (std::vector<token_t>{461, 890, 58, 49, 475, 348, 342, 389, 630, 506, 265, 100, 59, 298,
                                  317, 350, 266, 591, 46}));
  EXPECT_EQ(encode("\nGenesis 1:1 In the beginning God created the heaven and the earth.\n"),
            (std::vector<token_t>{10,  559, 308, 58,  49,  298, 110, 258, 914, 264, 110, 286,
                                  394, 282, 599, 283, 258, 835, 267, 258, 691, 46,  10}));
  EXPECT_EQ(encode("  two  spaces\n\n\tand 12345 don't we'll 'S"),
            (std::vector<token_t>{32, 785, 32,  433, 598, 274, 10,  10, 9,   387, 728, 51,
                                  52, 53,  287, 280, 39,  116, 481, 39, 278, 32,  39,  83}));
  EXPECT_EQ(encode("caf\xc3\xa9 \xe2\x80\x94 na\xefve\x80\xff!!"),
            (std::vector<token_t>{575, 102, 195, 169, 32, 226, 128, 148, 294, 97, 239, 322, 128,
                                  255, 33, 33}));
  EXPECT_TRUE(encode("").empty());
}

TEST(BpeTokenizer, LongTextsEncodeAsBpePyDoes) {
  const std::string prompts = read_file(kModelsDir / "prompts.txt");
  ASSERT_EQ(prompts.size(), 1801u);
  const std::vector<token_t> ids = encode(prompts);
  EXPECT_EQ(ids.size(), 722u);
  EXPECT_EQ(fnv1a(ids), 0x73ecd177dfcde10full);

  const std::vector<token_t> random = encode(lcg_bytes(4096, 1));
  EXPECT_EQ(random.size(), 4086u);
  EXPECT_EQ(fnv1a(random), 0x277320a2c038d0d8ull);

  const std::vector<token_t> words = encode(lcg_bytes(4096, 2, "ab '\n\t0.\xc3sdLORD"));
  EXPECT_EQ(words.size(), 3839u);
  EXPECT_EQ(fnv1a(words), 0x6e7d36b464f63a00ull);
}

TEST(BpeTokenizer, EncodeAppends) {
  std::vector<token_t> ids{7, 8};
  tokenizer().encode(" the", ids);
  tokenizer().encode(" the", ids);
  EXPECT_EQ(ids, (std::vector<token_t>{7, 8, 258, 258}));
}

TEST(BpeTokenizer, RoundTripsThePrompts) {
  const std::string prompts = read_file(kModelsDir / "prompts.txt");
  std::size_t lines = 0;
  for (std::size_t at = 0; at < prompts.size(); ++lines) {
    const std::size_t end = prompts.find('\n', at);
    ASSERT_NE(end, std::string::npos);
    std::string seen(1, '\n');  // what the models see: "\n" + the line
    seen.append(prompts, at, end - at);
    const std::vector<token_t> ids = encode(seen);
    EXPECT_EQ(tokenizer().decode(ids), seen);
    EXPECT_LT(ids.size(), seen.size()) << seen;
    at = end + 1;
  }
  EXPECT_EQ(lines, 60u);
  EXPECT_EQ(tokenizer().decode(encode(prompts)), prompts);
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  for (const std::string& text :
       {every_byte, every_byte + every_byte, std::string("\n\n\n   \t\t  \r\n  x  "),
        std::string(1000, ' '), std::string(1000, '\n') + "a", std::string(300, 'a'),
        std::string("\x80\x80\xff\xfe\xc3\xa9\x00\x00 \x7f'''s"), lcg_bytes(20000, 3),
        lcg_bytes(20000, 4,
                  " \n\x80\xc3\xa9"
                  "etLORDh'"),
        std::string()}) {
    EXPECT_EQ(tokenizer().decode(encode(text)), text);
  }
}

TEST(BpeTokenizer, PreTokenizationSplitsLikeGpt2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pretokens(" the LORD's"), (V{" the", " LORD", "'s"}));
  EXPECT_EQ(pretokens("Hello  world\n\nfoo  "),
            (V{"Hello", " ", " world", "\n", "\n", "foo", "  "}));
  EXPECT_EQ(pretokens("I'm 12ab?! x\t\ty"),
            (V{"I", "'m", " 12", "ab", "?!", " x", "\t", "\t", "y"}));
  EXPECT_EQ(pretokens(std::string_view("a \n b''s\x00\x01 \xc3\xa9t\xc3\xa9", 16)),
            (V{"a", " \n", " b", "''", "s", std::string("\x00\x01", 2), " \xc3\xa9t\xc3\xa9"}));
  EXPECT_EQ(pretokens("we'll they're I've he'd 'S"),
            (V{"we", "'ll", " they", "'re", " I", "'ve", " he", "'d", " '", "S"}));
  EXPECT_EQ(pretokens("Genesis 1:1"), (V{"Genesis", " 1", ":", "1"}));
  EXPECT_EQ(pretokens("x   "), (V{"x", "   "}));
  EXPECT_EQ(pretokens(" "), (V{" "}));
  EXPECT_EQ(pretokens("'"), (V{"'"}));
  // No merge crosses a pre-token: " the" is one token, " the" after a space is " " + " the".
  EXPECT_EQ(encode("  the"), (std::vector<token_t>{32, 258}));
}

TEST(BpeTokenizer, LoadErrorsNameTheFileAndTheProblem) {
  try {
    (void)BpeTokenizer::load("/nonexistent/kjv-bpe.tokenizer");
    ADD_FAILURE() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kjv-bpe.tokenizer"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }

  const std::string good = read_file(kTokenizerPath);
  EXPECT_EQ(load_error(good), "");
  EXPECT_EQ(load_error("SPDCBPE1 1 258 2\n97 98\n256 99\n"), "");

  const auto expect_error = [](std::string_view contents, std::string_view what) {
    const std::string error = load_error(contents);
    EXPECT_NE(error.find("specdec_bpe_tokenizer_test.tokenizer"), std::string::npos) << error;
    EXPECT_NE(error.find(what), std::string::npos) << "expected \"" << what << "\" in: " << error;
  };
  expect_error("", "missing line end");
  expect_error("SPDCGPT1 1 258 2\n97 98\n256 99\n", "not a BPE tokenizer file");
  expect_error("SPDCBPE1 2 258 2\n97 98\n256 99\n", "unsupported format version");
  expect_error("SPDCBPE1 1 259 2\n97 98\n256 99\n", "expected 256 + merges");
  expect_error("SPDCBPE1 1 258 2\n97 98\n257 99\n", "out of range");
  expect_error("SPDCBPE1 1 258 2\n97 98\n97 98\n", "repeats an earlier merge");
  expect_error("SPDCBPE1 1 258 2\n97 98\n", "the file ends after 1");
  expect_error("SPDCBPE1 1 258 2\n97 98\n256 99", "missing line end");
  expect_error("SPDCBPE1 1 258 2\n97 98\n256 99\n1 2\n", "content after");
  expect_error("SPDCBPE1 1 258 2\n97 98\n256 x9\n", "line 3: expected a token id");
  expect_error("SPDCBPE1 1 258 2\n97 98 99\n256 99\n", "line 2: expected two token ids");
  expect_error("SPDCBPE1 1 258 2\n97  98\n256 99\n", "expected two token ids");
  expect_error("SPDCBPE1 1 258 2\r\n97 98\n256 99\n", "the number of merges");

  // The shipped file with one byte changed: an id beyond the tokens defined so far.
  std::string corrupted = good;
  const std::size_t second_line = corrupted.find('\n') + 1;
  corrupted.replace(second_line, corrupted.find(' ', second_line) - second_line, "999");
  expect_error(corrupted, "line 2: merge 0 (999 104) refers to a token id out of range");
  // Truncated in the middle of a line.
  expect_error(good.substr(0, good.size() / 2), "missing line end");
}

}  // namespace
