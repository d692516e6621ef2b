// Medians and ranges per (context, support); CSV and Markdown.
#include "summary.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "text.hpp"

namespace amc::eval {
namespace {

/// Enough digits that a reader recomputing the medians from runs.jsonl agrees to 1e-9.
std::string number(double x) { return format("%.12g", x); }

std::string fixed(double x, int decimals, bool sign = false) {
  return format(sign ? "%+.*f" : "%.*f", decimals, x);
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<SummaryRow> summarize(const std::vector<Json>& records) {
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<const Json*>> groups;
  for (const Json& r : records) {
    groups[{r["context"].get<std::int64_t>(), r["support"].get<std::int64_t>()}].push_back(&r);
  }
  std::vector<SummaryRow> rows;
  for (const auto& [key, runs] : groups) {
    SummaryRow row;
    row.context = key.first;
    row.support = key.second;
    row.k = runs.front()->at("k").get<std::int64_t>();
    row.runs = static_cast<std::int64_t>(runs.size());
    std::vector<double> divergence, change, match, mass, support;
    for (const Json* r : runs) {
      row.exact_match_runs += r->at("exact_match").get<bool>() ? 1 : 0;
      divergence.push_back(r->at("first_divergence").get<double>());
      change.push_back(r->at("ppl_change_pct").get<double>());
      match.push_back(r->at("tf_match_pct").get<double>());
      mass.push_back(r->at("retained_mass_mean").get<double>());
      const Json& read = r->value("support_read_mean", Json(nullptr));  // null: dense control
      if (read.is_number()) support.push_back(read.get<double>());
    }
    row.median_first_divergence = median(divergence);
    row.median_ppl_change_pct = median(change);
    row.min_ppl_change_pct = *std::min_element(change.begin(), change.end());
    row.max_ppl_change_pct = *std::max_element(change.begin(), change.end());
    row.median_tf_match_pct = median(match);
    row.median_retained_mass = median(mass);
    if (!support.empty()) {
      double sum = 0.0;
      for (const double x : support) sum += x;
      row.mean_support_read = sum / static_cast<double>(support.size());
    }
    rows.push_back(row);
  }
  return rows;
}

std::string summary_csv(const std::vector<SummaryRow>& rows) {
  std::ostringstream s;
  s << "context,support,k,runs,exact_match_runs,median_first_divergence,median_ppl_change_pct,"
       "min_ppl_change_pct,max_ppl_change_pct,median_tf_match_pct,median_retained_mass,"
       "mean_support_read\n";
  for (const SummaryRow& r : rows) {
    s << r.context << ',' << r.support << ',' << r.k << ',' << r.runs << ',' << r.exact_match_runs
      << ',' << number(r.median_first_divergence) << ',' << number(r.median_ppl_change_pct) << ','
      << number(r.min_ppl_change_pct) << ',' << number(r.max_ppl_change_pct) << ','
      << number(r.median_tf_match_pct) << ',' << number(r.median_retained_mass) << ','
      << (r.mean_support_read ? number(*r.mean_support_read) : "") << '\n';
  }
  return s.str();
}

std::string summary_markdown(const std::vector<SummaryRow>& rows, const std::vector<Json>& records,
                             const SummaryNotes& notes) {
  const Json& c = notes.settings;
  const std::int64_t T = c.value("tokens", std::int64_t{0});
  const bool control = c.value("decode", std::string()) != "sparse";
  std::ostringstream s;
  s << "# Paired fresh-selection sweep\n\n";
  if (control) {
    s << "**Dense control**: every run decoded with dense attention; every row must show exact "
         "matches in all runs and a perplexity change of exactly 0.\n\n";
  }
  if (!notes.shard.empty()) s << notes.shard << "\n\n";
  s << "Greedy continuations of " << T << " tokens after a dense prefill of each prefix. "
    << "Sparse decoding selects afresh at every step, layer and "
    << (c.value("scope", std::string()) == "group" ? "GQA group" : "query head") << ": the first "
    << c.value("sinks", 0) << " positions, the last " << c.value("window", 0)
    << " positions and the k blocks of " << c.value("block_size", 0)
    << " positions ranked highest by the '" << c.value("rule", std::string())
    << "' rule (support = sinks + window + k x block size).\n\n";
  s << "| Context | Support (k) | Runs | Exact match | Median first divergence | Median PPL "
       "change | PPL change range | Median TF match | Median retained mass | Mean support read |\n";
  s << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const SummaryRow& r : rows) {
    s << "| " << r.context << " | " << r.support << " (" << r.k << ") | " << r.runs << " | "
      << r.exact_match_runs << "/" << r.runs << " | " << fixed(r.median_first_divergence, 1)
      << " | " << fixed(r.median_ppl_change_pct, 1, true) << "% | "
      << fixed(r.min_ppl_change_pct, 1, true) << "% to " << fixed(r.max_ppl_change_pct, 1, true)
      << "% | " << fixed(r.median_tf_match_pct, 1) << "% | " << fixed(r.median_retained_mass, 4)
      << " | " << (r.mean_support_read ? fixed(*r.mean_support_read, 1) : "-") << " |\n";
  }
  s << "\n**Perplexity is teacher-forced on the dense continuation**: the dense model's own "
       "greedy continuation is fed through the sparse model and its perplexity compared with "
       "the dense model's (change = sparse / dense - 1). It measures how much probability the "
       "sparse model still gives the dense model's choices, not the quality of free-running "
       "sparse text.\n\n";
  s << "- *Exact match*: runs whose sparse greedy continuation equals the dense one through all "
    << T << " tokens.\n"
    << "- *First divergence*: the step of the first differing token (step 0 is the token "
       "predicted by the shared dense prefill, so divergence is at step 1 or later); "
    << T << " when none differs.\n"
    << "- *TF match*: share of the " << T
    << " teacher-forced steps whose sparse argmax is the dense token.\n"
    << "- *Retained mass*: exp(L_S - L_all), the softmax mass the support kept, averaged over "
       "the teacher-forced decode steps, layers and heads of a run; the median over runs.\n"
    << "- *Mean support read*: positions each head read per step (sinks, window and selected "
       "blocks; less than the support when blocks overlap the window or a top-p budget stops "
       "early), averaged over steps, layers, heads and runs.\n"
    << "- Medians of an even number of runs are the mean of the two middle runs.\n\n";

  // The reference study's observation, checked on these runs.
  std::int64_t low_match = 0, low_match_high_ppl = 0;
  for (const Json& r : records) {
    if (r.at("tf_match_pct").get<double>() < 70.0) {
      ++low_match;
      if (r.at("ppl_change_pct").get<double>() > 100.0) ++low_match_high_ppl;
    }
  }
  s << "Runs with TF match below 70%: " << low_match << " of " << records.size();
  if (low_match > 0) s << "; of these, " << low_match_high_ppl << " have a PPL change above +100%";
  s << ".\n\n";

  s << "## Prefixes\n\n";
  for (const std::string& line : notes.prefixes) s << "- " << line << "\n";
  s << "\n## Settings\n\n```json\n" << c.dump(2) << "\n```\n\n";
  s << "## Plots\n\n" << notes.plots << "\n\n";
  s << "Every run's record (tokens, per-step NLL, per layer and head statistics) is in "
       "runs.jsonl; summary.csv holds this table's numbers in full precision.\n";
  return s.str();
}

}  // namespace amc::eval
