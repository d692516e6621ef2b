// Terminal bar or plain progress lines.
#include "progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "text.hpp"

namespace amc::eval {
namespace {

std::string duration(double seconds) {
  const long long s = std::llround(seconds);
  if (s >= 3600) return format("%lldh%02lldm", s / 3600, s / 60 % 60);
  if (s >= 60) return format("%lldm%02llds", s / 60, s % 60);
  return format("%llds", s);
}

}  // namespace

Progress::Progress(std::int64_t total, bool terminal)
    : total_(total), terminal_(terminal), start_(Clock::now()), last_draw_(start_) {}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::eta() const {
  if (done_ == 0) return "ETA after the first run";
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  return "ETA " +
         duration(elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_));
}

void Progress::draw() {
  constexpr int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string text = format("[%s] %lld/%lld runs | %s, %s | %s | %s", bar.c_str(),
                            static_cast<long long>(done_), static_cast<long long>(total_),
                            duration(elapsed).c_str(), eta().c_str(), run_.c_str(), stage_.c_str());
  // A line wider than the terminal would wrap, and \r would then redraw only its last part.
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 &&
      text.size() >= size.ws_col) {
    text.resize(size.ws_col - 1u);
  }
  // \r and "erase to the end of the line": the line is redrawn in place.
  std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
  std::fflush(stderr);
  drawn_ = true;
  last_draw_ = Clock::now();
}

void Progress::begin(const std::string& run) {
  run_ = run;
  stage_.clear();
  if (terminal_) {
    draw();
  } else {
    std::fprintf(stderr, "amc-eval: run %lld/%lld: %s ...\n", static_cast<long long>(done_ + 1),
                 static_cast<long long>(total_), run.c_str());
  }
}

void Progress::stage(const char* stage, std::int64_t step, std::int64_t steps) {
  if (!terminal_) return;
  if (Clock::now() - last_draw_ < std::chrono::milliseconds(200) && step != steps) return;
  stage_ = std::string(stage) + " " + std::to_string(step) + "/" + std::to_string(steps);
  draw();
}

void Progress::end(const std::string& result) {
  ++done_;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  if (terminal_) {
    stage_ = result;
    draw();
  } else {
    std::fprintf(stderr, "amc-eval: run %lld/%lld done: %s: %s; elapsed %s, %s\n",
                 static_cast<long long>(done_), static_cast<long long>(total_), run_.c_str(),
                 result.c_str(), duration(elapsed).c_str(), eta().c_str());
  }
}

void Progress::note(const std::string& line) {
  if (drawn_) std::fprintf(stderr, "\r\x1b[K");
  std::fprintf(stderr, "amc-eval: %s\n", line.c_str());
  if (drawn_) draw();
}

void Progress::finish() {
  if (drawn_) std::fprintf(stderr, "\r\x1b[K");
  drawn_ = false;
  std::fflush(stderr);
}

}  // namespace amc::eval
