// Eigen aliases used at amc's boundaries. Inputs are taken as `const ConstMatrixRef&`,
// outputs as `MatrixRef` by value (Eigen's "functions taking Eigen types" idiom), so callers
// pass matrices, blocks and Maps over their own memory without copies.
#pragma once

#include <Eigen/Core>
#include <cstddef>

namespace amc {

/// Row-major dynamic f32 matrix: rows are positions or heads, columns are channels.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;
using VectorD = Eigen::VectorXd;

/// Read-only view of a row-major f32 matrix with any row stride (inner stride 1).
using ConstMatrixRef = Eigen::Ref<const RowMatrix, 0, Eigen::OuterStride<>>;
/// Writable view of a row-major f32 matrix with any row stride.
using MatrixRef = Eigen::Ref<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstVectorRef = Eigen::Ref<const Vector>;
using VectorRef = Eigen::Ref<Vector>;

/// Non-owning row-major view over caller memory: `rows` x `cols`, `row_stride` elements apart.
inline Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>> map_rows(
    const float* data, Eigen::Index rows, Eigen::Index cols, Eigen::Index row_stride) {
  return {data, rows, cols, Eigen::OuterStride<>(row_stride)};
}
inline Eigen::Map<RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>> map_rows(
    float* data, Eigen::Index rows, Eigen::Index cols, Eigen::Index row_stride) {
  return {data, rows, cols, Eigen::OuterStride<>(row_stride)};
}

}  // namespace amc
