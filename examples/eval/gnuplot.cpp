// Running gnuplot in the output directory.
#include "gnuplot.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "durable_file.hpp"

namespace amc::eval {

std::optional<std::filesystem::path> find_gnuplot() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / "gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

std::string gnuplot_preamble() {
  return "# Written by amc-eval; run `gnuplot <this file>` in this directory to redraw.\n"
         "png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n"
         "set encoding utf8\n"
         "set grid\n"
         "set key outside right top\n";
}

std::string gnuplot_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string gnuplot_both_formats(const std::string& name, const std::string& plot_commands,
                                 int width, int height) {
  std::ostringstream s;
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  s << "eval 'set terminal ' . png_terminal . ' size " << size << " noenhanced'\n"
    << "set output " << gnuplot_string(name + ".png.tmp") << "\n"
    << plot_commands << "\nunset multiplot\nset output\n"
    << "set terminal svg size " << size << " noenhanced\n"
    << "set output " << gnuplot_string(name + ".svg.tmp") << "\n"
    << plot_commands << "\nunset multiplot\nset output\n";
  return s.str();
}

PlotResult draw_plots(const std::filesystem::path& dir, const PlotJob& job) {
  for (const auto& [name, content] : job.data) write_file_atomically(dir / name, content);
  write_file_atomically(dir / job.script_name, job.script);
  const std::optional<std::filesystem::path> gnuplot = find_gnuplot();
  if (!gnuplot) {
    return {false,
            "Not drawn: gnuplot was not found on PATH (Debian: apt-get install gnuplot-nox). "
            "The data files and " +
                job.script_name + " are written; run `gnuplot " + job.script_name +
                "` in this directory to draw them."};
  }
  const std::filesystem::path log = dir / "gnuplot.log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    ::execl(gnuplot->c_str(), "gnuplot", job.script_name.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  const bool ran =
      pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string drawn;
  for (const std::string& image : job.images) {
    std::filesystem::path temporary = dir / image;
    temporary += ".tmp";
    std::error_code missing;
    if (ran && std::filesystem::exists(temporary, missing)) {
      rename_durably(temporary, dir / image);
      drawn += (drawn.empty() ? "" : ", ") + image;
    } else {
      std::filesystem::remove(temporary, missing);
    }
  }
  if (!ran) {
    return {false,
            "Not drawn: gnuplot failed (see gnuplot.log in this directory); the data "
            "files and " +
                job.script_name + " are written."};
  }
  return {true, "Drawn with gnuplot from " + job.script_name + ": " + drawn + "."};
}

}  // namespace amc::eval
