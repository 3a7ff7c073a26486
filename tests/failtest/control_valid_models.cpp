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

// Valid user strategies, shaped like the strategy failtests' broken ones.
struct EmptyProposer {
  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest&, Coins&) {
    return {};
  }
};
struct TwoTokenPolicy {
  bool draft_more(const specdec::DraftState& state) const { return state.drafted < 2; }
  void observe(const specdec::RoundReport&) {}
};
static_assert(specdec::Proposer<EmptyProposer> && specdec::DraftLengthPolicy<TwoTokenPolicy>);
static_assert(specdec::Verifier<specdec::TokenVerifier> &&
              specdec::Verifier<specdec::BlockVerifier>);

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
  specdec::StrategyDecoder d(flat_target, EmptyProposer{}, TwoTokenPolicy{},
                             specdec::BlockVerifier{});
  specdec::StrategyDecoder e(flat_target, specdec::ModelProposer(span_draft), TwoTokenPolicy{},
                             specdec::TokenVerifier{});
  return static_cast<int>(
      a.generate(prompt, config).tokens.size() + b.generate(prompt, config).tokens.size() +
      c.generate(prompt, config).tokens.size() + d.generate(prompt, config).tokens.size() +
      e.generate(prompt, config).tokens.size());
}
