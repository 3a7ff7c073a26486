// Positive control for the failtest harness: the same kind of program with valid models must
// compile with exactly the command the failtests use, so their failures come from the model
// types alone, not from a broken include path or flag. Covers each accepted return kind.
#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

using RowMajorMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct SpanDraft {
  std::array<float, 8> row{};
  std::span<const float> operator()(std::span<const specdec::token_t>) { return row; }
};
struct EigenDraft {
  Eigen::VectorXf operator()(std::span<const specdec::token_t>) const {
    return Eigen::VectorXf::Zero(8);
  }
};
struct FlatTarget {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};
struct RowMajorTarget {
  RowMajorMatrixXf operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return RowMajorMatrixXf::Zero(static_cast<Eigen::Index>(n), 8);
  }
};

static_assert(specdec::DraftModel<SpanDraft> && specdec::DraftModel<EigenDraft>);
static_assert(specdec::TargetModel<FlatTarget> && specdec::TargetModel<RowMajorTarget>);

int main() {
  SpanDraft span_draft;
  EigenDraft eigen_draft;
  FlatTarget flat_target;
  RowMajorTarget row_major_target;
  const std::vector<specdec::token_t> prompt = {1};
  const specdec::GenerationConfig config;
  specdec::SpeculativeDecoder<SpanDraft, FlatTarget> a(span_draft, flat_target);
  specdec::SpeculativeDecoder<EigenDraft, RowMajorTarget> b(eigen_draft, row_major_target);
  specdec::AutoregressiveDecoder<RowMajorTarget> c(row_major_target);
  return static_cast<int>(a.generate(prompt, config).tokens.size() +
                          b.generate(prompt, config).tokens.size() +
                          c.generate(prompt, config).tokens.size());
}
