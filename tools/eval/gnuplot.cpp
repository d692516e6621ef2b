// Running gnuplot in the output directory.
#include "gnuplot.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <system_error>

#include "durable_file.hpp"
#include "text.hpp"

namespace amc::eval {
namespace {

/// Runs `gnuplot -e "output_suffix='.tmp'" SCRIPT` in `dir`, its messages going to the job's
/// log there. Returns an empty string when it succeeded, otherwise what went wrong.
std::string run_gnuplot(const std::filesystem::path& gnuplot, const std::filesystem::path& dir,
                        const PlotJob& job) {
  const std::filesystem::path log = dir / job.log_name;
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("cannot start it: ") + std::strerror(errno);
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    ::execl(gnuplot.c_str(), "gnuplot", "-e", "output_suffix='.tmp'", job.script_name.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return std::string("cannot wait for it: ") + std::strerror(errno);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  return WIFEXITED(status) ? format("exit status %d", WEXITSTATUS(status))
                           : format("killed by signal %d", WTERMSIG(status));
}

}  // namespace

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
         "if (!exists(\"output_suffix\")) output_suffix = ''\n"
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
                                 int width, int height, const std::string& terminal_options) {
  std::ostringstream s;
  const std::string size = std::to_string(width) + "," + std::to_string(height) + " noenhanced" +
                           (terminal_options.empty() ? "" : " " + terminal_options);
  s << "eval 'set terminal ' . png_terminal . ' size " << size << "'\n"
    << "set output " << gnuplot_string(name + ".png") << " . output_suffix\n"
    << plot_commands << "\nunset multiplot\nset output\n"
    << "set terminal svg size " << size << "\n"
    << "set output " << gnuplot_string(name + ".svg") << " . output_suffix\n"
    << plot_commands << "\nunset multiplot\nset output\n";
  return s.str();
}

std::vector<std::filesystem::path> plot_files(const std::filesystem::path& dir, const PlotJob& job,
                                              const PlotResult& result) {
  std::vector<std::filesystem::path> files;
  for (const auto& [name, content] : job.data) files.push_back(dir / name);
  files.push_back(dir / job.script_name);
  if (!result.drawn) return files;
  for (const std::string& image : job.images) {
    if (std::filesystem::exists(dir / image)) files.push_back(dir / image);
  }
  return files;
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
  const std::string failure = run_gnuplot(*gnuplot, dir, job);
  std::string drawn;
  for (const std::string& image : job.images) {
    std::filesystem::path temporary = dir / image;
    temporary += ".tmp";
    std::error_code missing;
    if (failure.empty() && std::filesystem::exists(temporary, missing)) {
      rename_durably(temporary, dir / image);
      drawn += (drawn.empty() ? "" : ", ") + image;
    } else {
      std::filesystem::remove(temporary, missing);
    }
  }
  if (!failure.empty()) {
    return {false, "Not drawn: gnuplot failed (" + failure + "; see " + job.log_name +
                       " in this directory); the data files and " + job.script_name +
                       " are written."};
  }
  std::error_code ignored;
  if (std::filesystem::file_size(dir / job.log_name, ignored) == 0) {
    std::filesystem::remove(dir / job.log_name, ignored);  // nothing to read in it
  }
  return {true, "Drawn with gnuplot from " + job.script_name + ": " + drawn + "."};
}

}  // namespace amc::eval
