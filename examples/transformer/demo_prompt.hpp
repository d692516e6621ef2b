// The demo's prompts (amc-generate --demo): each states a value early and asks for it again at its
// end, so that the right continuation has to retrieve it from far back in the context, which
// dense attention can do and a sparse selection does only if it picks the block that holds it.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace amc::transformer {

struct DemoPrompt {
  std::string text;        ///< the prompt, for the tokenizer's encode_with_special_tokens
  std::string_view value;  ///< the value the right continuation gives
  std::string_view where;  ///< where the prompt states and asks for it, for the verdict line
  /// Cuts the value a continuation gives out of its text.
  std::string (*answer)(std::string_view continuation);
};

namespace demo_detail {

/// The text up to the closing quote or the end of the line (a Python string literal's value).
inline std::string up_to_quote(std::string_view text) {
  return std::string(text.substr(0, text.find_first_of("\"\n")));
}

/// The first run of digits in the first line that has one.
inline std::string first_number(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t end = i;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  return std::string(text.substr(i, end - i));
}

}  // namespace demo_detail

/// Python code (what data/qwen2-tiny and data/qwen2-retrieval were trained on; Qwen2-0.5B
/// continues it too): 298 tokens with Qwen2's tokenizer and 1285 with the byte-level one of the
/// trained checkpoints, so the context outgrows the default sparse support of 193 positions.
/// REPORT_KEY = "60417" is set in its third line and asked for again in its last, about 1200
/// bytes later.
inline DemoPrompt code_demo_prompt() {
  return {R"(import collections

REPORT_KEY = "60417"


class LineCounter:
    """Counts the lines of text files, by extension."""

    def __init__(self, extensions):
        self.extensions = tuple(extensions)
        self.counts = collections.Counter()
        self.skipped = []

    def add_file(self, path):
        if not path.endswith(self.extensions):
            self.skipped.append(path)
            return 0
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        extension = path.rsplit(".", 1)[-1]
        self.counts[extension] += lines
        return lines

    def total(self):
        return sum(self.counts.values())

    def report(self):
        for extension, lines in self.counts.most_common():
            print(f"{extension}: {lines} lines")
        if self.skipped:
            print(f"skipped {len(self.skipped)} files")


def count_lines(paths, extensions=(".py", ".txt")):
    counter = LineCounter(extensions)
    for path in paths:
        counter.add_file(path)
    counter.report()
    return counter.total()


def most_common_extension(paths, extensions=(".py", ".txt")):
    counter = LineCounter(extensions)
    for path in paths:
        counter.add_file(path)
    return counter.counts.most_common(1)[0][0]


REPORT_KEY = ")",
          "60417",
          "sets REPORT_KEY = \"60417\" in its third line and asks for it again in its last",
          demo_detail::up_to_quote};
}

/// English prose in a ChatML conversation (the template of SmolLM2-Instruct and Qwen's chat
/// models), for instruction-tuned models whose tokenizer has <|im_start|> and <|im_end|>: a
/// note gives the harbour office's safe combination, 60417, in its first paragraph; about 700
/// tokens of prose about the harbour follow; the question comes last, and the assistant's
/// answer is begun for it ("The combination of the safe is"), so a model that read the note
/// continues with the number.
inline DemoPrompt chat_demo_prompt() {
  return {R"(<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
<|im_start|>user
Read these notes from the harbour office, then answer my question.

Note for the night clerk: the combination of the harbour office safe is 60417. Keep the logbook and the spare keys inside it, and lock it before you leave.

The harbour at Kestrel Bay was dug in the last years of the eighteenth century, when the fishing fleet had outgrown the shingle beach where the boats were once drawn up by hand. Two stone piers were built out from the headland, and a narrow channel was cut between them so that boats could come in at any state of the tide. For most of the next hundred years the harbour served the herring fleet. In a good season more than two hundred boats worked from the bay, and the quays were lined with curing sheds, rope walks and cooperages where barrels were made for the catch.

The lighthouse on the north pier was added in 1852, after a winter in which three boats were lost on the rocks below the headland. Its first lamp burned whale oil and could be seen for about eight miles in clear weather. The keeper lived in a small cottage at the root of the pier with his family, and the logbooks he kept, which record the weather, the ships that passed and the hours the lamp was lit, are still held by the town library. In 1911 the oil lamp was replaced by a paraffin burner, and in 1958 the light was converted to electricity and the last keeper retired.

When the herring shoals moved away from the coast in the 1920s, the fleet shrank quickly. Many of the curing sheds were pulled down, and the harbour turned to other trades. Coal was brought in by small steamers for the town's gasworks, timber was landed for the boatyards, and in summer pleasure boats took visitors along the cliffs to see the seabird colonies. During the Second World War the harbour was used by minesweepers, and a boom was stretched across the entrance each night to keep out enemy craft.

Today the harbour is run by a trust of local residents. About forty fishing boats still work from the bay, most of them catching crab and lobster in pots set along the rocky shore. The old fish market has become a museum, where visitors can see a restored herring drifter, models of the piers as they were built, and the original lens from the lighthouse. The harbour master's office stands at the end of the south quay, where it keeps the tide tables, the mooring register and the records of every boat that has used the harbour since the trust was founded.

The trust's greatest task is the upkeep of the piers themselves. Winter storms wash stones out of the seaward faces every year, and a team of masons spends each spring resetting them with lime mortar, as the original builders did. A survey in 2019 found that the north pier had moved by several centimetres at its head, and the trust raised money from the town and from visitors to drive new piles beneath it. The work took two summers and was finished without closing the harbour to the fishing boats for a single day.

Question: what is the combination of the harbour office safe?<|im_end|>
<|im_start|>assistant
The combination of the harbour office safe is)",
          "60417",
          "gives the safe's combination, 60417, in the note that opens the user's message and "
          "asks for it at its end",
          demo_detail::first_number};
}

}  // namespace amc::transformer
