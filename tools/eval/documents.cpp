// Reading id and text documents; choosing the prefixes.
#include "documents.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "refuse.hpp"
#include "transformer/tokenizer.hpp"

namespace amc::eval {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(path, ": cannot open the document");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) refuse(path, ": cannot read the document");
  return s.str();
}

bool separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::vector<std::int32_t> parse_id_text(const std::string& text, const std::string& path,
                                        std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::size_t line = 1, line_start = 0, i = 0;
  while (i < text.size()) {
    if (separator(text[i])) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
      ++i;
      continue;
    }
    const std::size_t begin = i;
    while (i < text.size() && !separator(text[i])) ++i;
    const std::string entry = text.substr(begin, i - begin);
    const std::size_t column = begin - line_start + 1;
    // Digits only: no sign, no hex, no exponent; more than 10 digits cannot be an id.
    const bool digits = entry.size() <= 10 && std::all_of(entry.begin(), entry.end(), [](char c) {
                          return c >= '0' && c <= '9';
                        });
    if (!digits) {
      // A long entry (a binary file, a text file given as --ids) is quoted by its start only.
      refuse(path, ":", line, ":", column, ": '", entry.substr(0, 40),
             entry.size() > 40 ? "...'" : "'",
             " is not a decimal token id (ids are separated by whitespace or commas)");
    }
    const long long id = std::stoll(entry);
    if (id >= vocab) {
      refuse(path, ":", line, ":", column, ": id ", id, " is outside the model's vocabulary [0, ",
             vocab, ")");
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

std::vector<Document> load_documents(const std::vector<std::string>& paths,
                                     const transformer::Tokenizer* tokenizer, std::int64_t vocab) {
  std::vector<Document> documents;
  for (const std::string& path : paths) {
    Document d{path, {}};
    const std::string text = read_text(path);
    if (tokenizer == nullptr) {
      d.ids = parse_id_text(text, path, vocab);
    } else {
      try {
        d.ids = tokenizer->encode(text);
      } catch (const amc::error& e) {
        refuse(path, ": ", e.what());
      }
      for (std::size_t t = 0; t < d.ids.size(); ++t) {
        if (d.ids[t] >= vocab) {
          refuse(path, ": token ", t, " encodes to id ", d.ids[t],
                 ", outside the model's vocabulary [0, ", vocab, ")");
        }
      }
    }
    if (d.ids.empty()) refuse(path, ": the document holds no tokens");
    documents.push_back(std::move(d));
  }
  return documents;
}

std::vector<ContextPlan> plan_prefixes(const std::vector<Document>& documents,
                                       const std::vector<std::int64_t>& contexts,
                                       std::int64_t prefixes) {
  std::size_t longest = 0;
  for (const Document& d : documents) longest = std::max(longest, d.ids.size());
  std::vector<ContextPlan> plans;
  for (const std::int64_t context : contexts) {
    ContextPlan plan;
    plan.context = context;
    for (std::size_t i = 0; i < documents.size(); ++i) {
      if (static_cast<std::int64_t>(documents[i].ids.size()) < context) {
        ++plan.skipped;
      } else if (static_cast<std::int64_t>(plan.documents.size()) < prefixes) {
        plan.documents.push_back(i);
      }
    }
    if (plan.documents.empty()) {
      refuse("--contexts ", context, ": no document has ", context, " tokens (the longest has ",
             longest, "); give longer documents or a shorter context");
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

}  // namespace amc::eval
