#pragma once
// Dense types used everywhere. Row-major so that one token's vector (a row) is contiguous.
#include <Eigen/Core>

namespace attnlens {

using Index = Eigen::Index;
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;
using RowVector = Eigen::RowVectorXd;

}  // namespace attnlens
