// Progress of a long evaluation on stderr: on a terminal one line redrawn in place (a bar, the
// counts, the current run and stage, elapsed time and an estimate of the time left); otherwise
// (a log file, a pipe) plain lines, one when a run starts its stages and one when it ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace amc::eval {

class Progress {
 public:
  /// \param total  runs to do in this invocation
  /// \param terminal  draw a bar (normally: stderr is a terminal)
  Progress(std::int64_t total, bool terminal);

  /// Whether stderr is a terminal.
  static bool stderr_is_terminal();

  /// The run now in progress (e.g. "context 2048, prefix 1, support 193").
  void begin(const std::string& run);
  /// Where the current run is (called often; redraws at most ~5 times a second).
  void stage(const char* stage, std::int64_t step, std::int64_t steps);
  /// The current run is done; `result` is a short summary of it.
  void end(const std::string& result);
  /// A line of its own (clears the bar first).
  void note(const std::string& line);
  /// Clears the bar at the end.
  void finish();

 private:
  void draw();
  std::string eta() const;

  using Clock = std::chrono::steady_clock;
  std::int64_t total_, done_ = 0;
  bool terminal_;
  Clock::time_point start_, last_draw_;
  std::string run_, stage_;
  bool drawn_ = false;
};

}  // namespace amc::eval
