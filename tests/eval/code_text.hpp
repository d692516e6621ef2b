// Synthetic Python-like text for the amc-eval tests that run data/qwen2-tiny on documents
// written at test time.
#pragma once

#include <cstdint>
#include <string>

namespace amc::eval::test {

/// Code-like lines of varied length (0 to ~70 bytes: some blank, `def` lines, assignments
/// indented by 4 or 8), the same for the same seed: text the tiny model was trained on the like
/// of, so that its sparse runs differ from its dense ones.
inline std::string code_text(int lines, std::uint64_t seed) {
  std::string text;
  std::uint64_t s = seed;
  auto next = [&s](std::uint64_t n) {  // a 64-bit LCG's high bits, reduced to [0, n)
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (s >> 33) % n;
  };
  for (int i = 0; i < lines; ++i) {
    const std::uint64_t kind = next(10);
    if (kind == 0) {
      text += "\n";
    } else if (kind < 3) {
      text +=
          "def step_" + std::to_string(i) + "(value, count=" + std::to_string(next(100)) + "):\n";
    } else {
      text += std::string(4 * (1 + next(2)), ' ') + "value_" + std::to_string(i) + " = value_" +
              std::to_string(next(i + 1)) + " * " + std::to_string(next(1000)) + " + " +
              std::string(next(30), 'x') + "  # line " + std::to_string(i) + "\n";
    }
  }
  return text;
}

}  // namespace amc::eval::test
