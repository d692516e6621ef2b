#include "report_files.hpp"

#include <amc/error.hpp>

#include <cstdio>
#include <system_error>

#include "durable_file.hpp"

namespace amc::eval {

ReportOutputs write_report(const char* where, const std::filesystem::path& out_dir,
                           const std::vector<std::pair<std::string, std::string>>& tables,
                           const PlotJob& plot) {
  std::error_code failed;
  std::filesystem::create_directories(out_dir, failed);
  AMC_CHECK(!failed, where, "--out: cannot create directory ", out_dir.string(), ": ",
            failed.message());
  AMC_CHECK(std::filesystem::is_directory(out_dir), where, "--out: ", out_dir.string(),
            " is not a directory");
  ReportOutputs outputs;
  for (const auto& [name, text] : tables) {
    write_file_atomically(out_dir / name, text);
    outputs.files.push_back(out_dir / name);
  }
  const PlotResult drawn = draw_plots(out_dir, plot);
  for (const std::filesystem::path& file : plot_files(out_dir, plot, drawn)) {
    outputs.files.push_back(file);
  }
  if (!drawn.drawn) outputs.notes.push_back("plots in " + out_dir.string() + ": " + drawn.note);
  return outputs;
}

void print_report(const ReportOutputs& outputs) {
  for (const std::filesystem::path& file : outputs.files) {
    std::printf("wrote %s\n", file.string().c_str());
  }
  std::fflush(stdout);
  for (const std::string& note : outputs.notes)
    std::fprintf(stderr, "amc-eval: %s\n", note.c_str());
}

}  // namespace amc::eval
