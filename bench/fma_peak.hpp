// The arithmetic ceiling of one core for amc-bench's roofline (bench/report): how many f32
// multiply-adds per second it sustains with operands in registers, at the widest vector ISA
// the CPU runs. Dense decode of a GQA group does 2 x heads x head_dim of them per position (the
// scores and the weighted values), so this rate, with BM_StreamRead's bandwidth, bounds its
// time per position from below.
#pragma once

#include <cstdint>

namespace amc::bench {

/// Runs `rounds` rounds of kFmaChains independent FMA chains over vectors of the widest ISA
/// (AVX-512, else AVX2+FMA, else plain f32 multiply-adds), and stores a value that depends on
/// every chain in *sink so that nothing is optimised away. Returns the lane FMAs performed.
std::int64_t fma_peak(std::int64_t rounds, float* sink);

/// The ISA fma_peak runs on this CPU: "avx512", "avx2" or "scalar".
const char* fma_peak_isa();

}  // namespace amc::bench
