// Rotary position embedding (RoPE) tables: the cos and sin of every rotation angle at a
// position, under one of two conventions for how the angles are computed.
//
// Rotate-half RoPE rotates the pair (x[i], x[i + d/2]) of a head of d channels by the angle
// position * inv_freq[i], inv_freq[i] = theta^(-2i/d). The two conventions differ only in the
// precision of that angle (see docs/transformer.md, "RoPE angles"):
//
// - transformers: as transformers' Qwen2RotaryEmbedding computes it, in float32:
//   inv_freq = 1 / theta^(float(2i) / d) (the exponent a float32 quotient, the power and the
//   reciprocal each rounded to float32), angle = float32(position) * inv_freq rounded to
//   float32. cos and sin of that float angle are computed in double and rounded to float.
//   The power is computed in double and rounded, whereas torch's float32 pow may be one ulp
//   off the correctly rounded power: torch's inv_freq then differs in the last bit (9 of the
//   1680 frequencies of theta in {1e4, 1e5, 5e5, 1e6, 5e6}, d in {16, ..., 256}; none of
//   Qwen2-0.5B's), which moves that angle by at most position * 2^-24 * inv_freq (below
//   1e-6 rad at 32K positions). torch's float32 cos and sin may differ from the correctly
//   rounded values by one float ulp (6e-8).
// - exact: inv_freq = theta^(-2i/d) and the angle in double, cos and sin rounded to float.
//
// They part most at the highest frequencies, whose float32 angles (about 0.65 x position rad
// for pair 1) are off by up to half a float ulp plus the position times inv_freq's rounding
// error: at most 7e-5 rad below 2K positions, 6e-4 below 16K and 1.2e-3 below 32K (theta 1e4
// or 1e6, head_dim 64). A model should run with the convention it was trained with; pretrained
// Qwen2 models were trained with transformers' float32 angles.
//
// Llama 3 models rescale the inverse frequencies (config.json "rope_scaling" with rope_type
// "llama3", RopeScaling below) before any angle is computed; each convention computes that
// rescaling its own way too (transformers: float32 steps as torch takes them; exact: double).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace amc::transformer {

/// config.json's "rope_scaling": none (null, absent, or rope_type "default"), or Llama 3's
/// frequency bands (rope_type "llama3"). With wavelen = 2 pi / inv_freq and
/// L = original_max_position_embeddings: inv_freq is kept where wavelen < L / high_freq_factor,
/// divided by factor where wavelen > L / low_freq_factor, and in between interpolated,
/// (1 - s) inv_freq / factor + s inv_freq with s = (L / wavelen - low) / (high - low)
/// (transformers' _compute_llama3_parameters).
struct RopeScaling {
  enum class Type : std::uint8_t { none, llama3 };
  Type type = Type::none;
  double factor = 1.0;                            ///< >= 1 (32 for Llama 3.2)
  double low_freq_factor = 1.0;                   ///< > 0 (1)
  double high_freq_factor = 1.0;                  ///< > low_freq_factor (4)
  double original_max_position_embeddings = 0.0;  ///< > 0 (8192)

  bool operator==(const RopeScaling&) const = default;
};

enum class RopeAngles : std::uint8_t {
  transformers,  ///< float32 inverse frequencies and angles, as transformers computes them
  exact,         ///< double inverse frequencies and angles
};

/// "transformers" or "exact".
std::string_view to_string(RopeAngles angles);

/// Parses "transformers" or "exact"; throws amc::error naming `field` and the value otherwise.
RopeAngles parse_rope_angles(std::string_view text, std::string_view field = "rope_angles");

/// The cos and sin tables of rotate-half RoPE for one head size and base.
class RotaryTable {
 public:
  /// \param theta the base (config.json's rope_theta), > 1
  /// \param head_dim channels per head, even and positive
  /// \param scaling Llama 3's rescaling of the inverse frequencies, or none
  RotaryTable(RopeAngles angles, double theta, std::int64_t head_dim,
              const RopeScaling& scaling = {});

  RopeAngles angles() const { return angles_; }
  std::int64_t half() const { return static_cast<std::int64_t>(inverse_frequency_.size()); }
  /// inv_freq[i], i < head_dim / 2, after any scaling: float32 values for the transformers
  /// convention, double values for exact.
  const std::vector<double>& inverse_frequency() const { return inverse_frequency_; }
  /// The rotation angle of pair i at `position` (a float32 value for transformers).
  double angle(std::int64_t position, std::int64_t i) const;
  /// cos[i] and sin[i] of every angle at `position`. \param cos, sin [head_dim / 2]
  void cos_sin(std::int64_t position, float* cos, float* sin) const;

 private:
  RopeAngles angles_;
  std::vector<double> inverse_frequency_;
};

}  // namespace amc::transformer
