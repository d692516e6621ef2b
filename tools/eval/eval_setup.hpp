// What every amc-eval command starts from: the options they share, checked, and the model,
// documents, prefix plan and support sizes they name.
#pragma once

#include <amc/attention/sparse_config.hpp>
#include <amc/storage.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "documents.hpp"
#include "run_log.hpp"
#include "support_sizes.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/rope.hpp"
#include "transformer/session_flags.hpp"

namespace amc::eval {

/// The selection settings amc-eval does not take as options: top_k comes from --supports, and
/// the eval measures the fixed-budget rules, so no scale override and no adaptive budget. Every
/// other setting of the library's table is an option and a field of the settings record.
inline constexpr std::string_view kSettingsNotTaken[] = {"top_k", "scale", "target_eps", "max_k"};

struct CommonArguments {
  std::string model;
  std::vector<std::string> text_files;
  std::vector<std::string> id_files;
  std::vector<std::int64_t> contexts;
  std::vector<std::int64_t> supports;
  std::int64_t prefixes = 5;
  std::int64_t tokens = 128;
  /// Every selection setting but kSettingsNotTaken (top_k is set per support size): the
  /// library's selection options (amc::cli::SparseOptions), applied after parsing.
  SparseConfig sparse;
  transformer::SessionFlags session;  ///< --threads, --kv-dtype, --weight-dtype, --rope-angles
  std::string out;
};

struct Setup {
  std::unique_ptr<transformer::Checkpoint> checkpoint;  // sessions refer to it: it must not move
  std::vector<Document> documents;
  std::vector<ContextPlan> plans;
  std::vector<SupportSize> supports;
  SparseConfig sparse;  ///< CommonArguments::sparse, validated (top_k set per support)
  /// The threads, KV cache dtype and RoPE angles the model runs with, "auto" resolved for the
  /// checkpoint (transformer::SessionFlags::session_options).
  transformer::SessionOptions session;
  std::filesystem::path out;
  /// One line per context: prefixes used of those requested, documents skipped as too short.
  std::vector<std::string> prefix_notes;
};

/// Checks the options (cheap checks first: counts, support sizes), loads the model and the
/// documents, plans the prefixes, checks that context + tokens fits the model, and creates the
/// output directory. Throws amc::error with the line to print for every refusal.
Setup prepare(const CommonArguments& a);

/// The settings every run record of `a` carries (and --resume and merge compare), paths made
/// absolute: the model, documents and dtypes, and every selection setting the eval takes, from
/// the library's table (a setting added there is recorded without a change here).
Json settings_json(const CommonArguments& a, const Setup& setup);

}  // namespace amc::eval
