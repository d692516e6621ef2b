// The online-softmax state of one or more query heads: running max m, sum d = sum exp(s - m),
// and unnormalised output o = sum exp(s - m) v. Split-KV, block skipping and the omitted-mass
// arithmetic all speak this (m, d) vocabulary: lse = m + log d.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/aligned.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"

namespace amc {

/// Online-softmax states of `heads` query heads of width `head_dim`.
///
/// A head that has read nothing has m = -inf, d = 0: it normalises to zeros and its lse is
/// -inf, never NaN. States over disjoint position sets merge exactly (up to rounding) into the
/// state over their union, in any order.
class SoftmaxState {
 public:
  SoftmaxState() = default;
  SoftmaxState(std::int64_t heads, std::int64_t head_dim) { resize(heads, head_dim); }

  /// Resets to `heads` empty states; reuses memory.
  void resize(std::int64_t heads, std::int64_t head_dim) {
    AMC_CHECK(heads > 0, "amc::SoftmaxState", "heads must be positive, got ", heads);
    AMC_CHECK(head_dim > 0, "amc::SoftmaxState", "head_dim must be positive, got ", head_dim);
    heads_ = heads;
    head_dim_ = head_dim;
    max_.assign(static_cast<std::size_t>(heads), -std::numeric_limits<float>::infinity());
    sum_.assign(static_cast<std::size_t>(heads), 0.0f);
    accumulator_.assign(static_cast<std::size_t>(heads * head_dim), 0.0f);
  }

  void reset() { resize(heads_, head_dim_); }

  std::int64_t heads() const { return heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  float max(std::int64_t head) const { return max_[idx(head)]; }
  float sum(std::int64_t head) const { return sum_[idx(head)]; }
  bool empty(std::int64_t head) const { return sum_[idx(head)] == 0.0f; }

  /// [head_dim]: unnormalised output of `head`.
  std::span<const float> accumulator(std::int64_t head) const {
    return {accumulator_.data() + head * head_dim_, static_cast<std::size_t>(head_dim_)};
  }

  /// log sum exp(s_j) over what `head` read; -inf when it read nothing.
  float lse(std::int64_t head) const {
    return empty(head) ? -std::numeric_limits<float>::infinity()
                       : max_[idx(head)] + std::log(sum_[idx(head)]);
  }

  /// Adds one position to one head (scalar; for references, tests and tiny updates).
  void add(std::int64_t head, float score, std::span<const float> value) {
    AMC_CHECK(value.size() == static_cast<std::size_t>(head_dim_), "amc::SoftmaxState::add",
              "value has ", value.size(), " elements, head_dim is ", head_dim_);
    const std::size_t h = idx(head);
    const float new_max = std::max(max_[h], score);
    const float old_scale = sum_[h] == 0.0f ? 0.0f : std::exp(max_[h] - new_max);
    const float weight = std::exp(score - new_max);
    float* acc = accumulator_.data() + head * head_dim_;
    for (std::int64_t i = 0; i < head_dim_; ++i) acc[i] = acc[i] * old_scale + weight * value[i];
    sum_[h] = sum_[h] * old_scale + weight;
    max_[h] = new_max;
  }

  /// Folds `other` (same shape, states over positions disjoint from this one's) into this.
  void merge(const SoftmaxState& other) {
    AMC_CHECK(other.heads_ == heads_ && other.head_dim_ == head_dim_, "amc::SoftmaxState::merge",
              "shape mismatch: [", heads_, ", ", head_dim_, "] vs [", other.heads_, ", ",
              other.head_dim_, "]");
    for (std::int64_t h = 0; h < heads_; ++h) merge_head(h, other, h);
  }

  /// Folds head `other_head` of `other` into head `head` of this state.
  void merge_head(std::int64_t head, const SoftmaxState& other, std::int64_t other_head) {
    AMC_CHECK(other.head_dim_ == head_dim_, "amc::SoftmaxState::merge_head",
              "head_dim mismatch: ", head_dim_, " vs ", other.head_dim_);
    const std::size_t h = idx(head);
    const std::size_t o = other.idx(other_head);
    if (other.sum_[o] == 0.0f) return;  // nothing to add; also avoids -inf - -inf
    if (sum_[h] == 0.0f) {
      max_[h] = other.max_[o];
      sum_[h] = other.sum_[o];
      std::copy_n(other.accumulator_.data() + other_head * head_dim_, head_dim_,
                  accumulator_.data() + head * head_dim_);
      return;
    }
    const float new_max = std::max(max_[h], other.max_[o]);
    const float self_scale = std::exp(max_[h] - new_max);
    const float other_scale = std::exp(other.max_[o] - new_max);
    float* acc = accumulator_.data() + head * head_dim_;
    const float* other_acc = other.accumulator_.data() + other_head * head_dim_;
    for (std::int64_t i = 0; i < head_dim_; ++i) {
      acc[i] = acc[i] * self_scale + other_acc[i] * other_scale;
    }
    sum_[h] = sum_[h] * self_scale + other.sum_[o] * other_scale;
    max_[h] = new_max;
  }

  /// out = o / d for `head`; zeros when the head read nothing.
  void normalize(std::int64_t head, std::span<float> out) const {
    AMC_CHECK(out.size() == static_cast<std::size_t>(head_dim_), "amc::SoftmaxState::normalize",
              "out has ", out.size(), " elements, head_dim is ", head_dim_);
    const float d = sum_[idx(head)];
    const float inverse = d == 0.0f ? 0.0f : 1.0f / d;
    const float* acc = accumulator_.data() + head * head_dim_;
    for (std::int64_t i = 0; i < head_dim_; ++i) out[i] = acc[i] * inverse;
  }

  /// Folds a block of `count` scores of `head` in, for callers that mix the values themselves
  /// (flash-attention prefill: one GEMM for many heads): the running max and sum take the block
  /// in, the accumulator is rescaled to the new max, and `scores` becomes the block's weights
  /// exp(s - m), which the caller then adds, times their values, to row `head` of
  /// accumulator_data(). `count` > 0.
  void fold_scores(std::int64_t head, float* scores, std::int64_t count,
                   const kernels::KernelTable& table) {
    AMC_DASSERT(count > 0);
    const std::size_t h = idx(head);
    const float new_max = std::max(max_[h], table.max(scores, count));
    const float sum = table.exp_sum(scores, count, new_max);  // scores := exp(s - new_max)
    if (!empty(head)) {
      const float rescale = std::exp(max_[h] - new_max);
      sum_[h] *= rescale;
      table.scale(accumulator_.data() + head * head_dim_, rescale, head_dim_);
    }
    sum_[h] += sum;
    max_[h] = new_max;
  }

  /// [heads, head_dim] row-major: the unnormalised outputs, for callers that add weighted
  /// values in bulk after fold_scores.
  float* accumulator_data() { return accumulator_.data(); }

  /// Kernel arguments that update heads [first_head, first_head + count) of this state.
  kernels::AttendArgs attend_args(std::int64_t first_head, std::int64_t count) {
    AMC_DASSERT(first_head >= 0 && first_head + count <= heads_);
    kernels::AttendArgs args;
    args.heads = count;
    args.head_dim = head_dim_;
    args.running_max = max_.data() + first_head;
    args.running_sum = sum_.data() + first_head;
    args.accumulator = accumulator_.data() + first_head * head_dim_;
    return args;
  }

 private:
  std::size_t idx(std::int64_t head) const {
    AMC_DASSERT(head >= 0 && head < heads_);
    return static_cast<std::size_t>(head);
  }

  std::int64_t heads_ = 0;
  std::int64_t head_dim_ = 0;
  std::vector<float> max_;
  std::vector<float> sum_;
  AlignedVector<float> accumulator_;  // [heads, head_dim]
};

}  // namespace amc
