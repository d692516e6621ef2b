// The documents prefixes are cut from, and the plan of which document gives which prefix.
//
// A document is one file: text (encoded with the model's tokenizer) or token ids (decimal
// integers separated by whitespace and/or commas). The prefix of a context length N is a
// document's first N tokens; the continuation is generated, never read from the document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace amc::transformer {
class Tokenizer;
}

namespace amc::eval {

struct Document {
  std::string path;               ///< as given on the command line
  std::vector<std::int32_t> ids;  ///< [tokens]
};

/// Parses an id file's text. Throws amc::error "PATH:LINE:COLUMN: ..." for an entry that is
/// not a decimal integer or an id outside [0, vocab).
std::vector<std::int32_t> parse_id_text(const std::string& text, const std::string& path,
                                        std::int64_t vocab);

/// Reads id files (tokenizer == nullptr) or encodes text files with `tokenizer`. Throws
/// amc::error naming the file for an unreadable file, a bad id, an id the model's vocabulary
/// lacks, or an empty document.
std::vector<Document> load_documents(const std::vector<std::string>& paths,
                                     const transformer::Tokenizer* tokenizer, std::int64_t vocab);

/// Which documents give the prefixes of one context length.
struct ContextPlan {
  std::int64_t context = 0;
  std::vector<std::size_t> documents;  ///< [prefixes used] indices into the documents
  std::size_t skipped = 0;             ///< documents shorter than the context
};

/// For each context, the first `prefixes` documents (in the order given) holding at least
/// `context` tokens. Throws amc::error for a context no document is long enough for, naming it
/// and the longest document's length.
std::vector<ContextPlan> plan_prefixes(const std::vector<Document>& documents,
                                       const std::vector<std::int64_t>& contexts,
                                       std::int64_t prefixes);

}  // namespace amc::eval
