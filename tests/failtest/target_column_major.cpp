// Must not compile: the target returns a column-major Eigen matrix (Eigen's default), whose
// rows are strided; specdec views each row as V contiguous floats.
// Expected diagnostic: "specdec: TargetModel returned a column-major Eigen matrix; ... must be
// RowMajor ...".
#include <Eigen/Core>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct Draft {
  Eigen::VectorXf operator()(std::span<const specdec::token_t>) const {
    return Eigen::VectorXf::Zero(8);
  }
};

struct ColumnMajorTarget {
  Eigen::MatrixXf operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return Eigen::MatrixXf::Zero(static_cast<Eigen::Index>(n), 8);
  }
};

int main() {
  Draft draft;
  ColumnMajorTarget target;
  specdec::SpeculativeDecoder<Draft, ColumnMajorTarget> decoder(draft, target);
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}
