#!/usr/bin/env bash
# Issue 35 part 4, 2026-12-05 (fifth session): the transformer's bf16/f32 matvec asks for the
# row about 16 KiB later a line per line it reads (KernelTable::dot_ahead), instead of a whole
# row 4 rows ahead at once before each row; dense attention reads ahead the same way
# (stream-ahead-2026-12-05). amc-bench-qwen2 on the Qwen2-0.5B-shaped synthetic checkpoint
# (bf16), 2 threads, two rounds of (before, after), each a process of its own, nothing else
# running. Each run is skipped when its output exists.
#
#   records/weights-ahead-2026-12-05/run.sh
#
# Binaries: build/bench-before-ahead/amc-bench-qwen2 built at d06138e (before both changes);
# build/bench-ahead/amc-bench-qwen2 is build/release's of this change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/weights-ahead-2026-12-05
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
for round in 1 2; do
  for side in before after; do
    bin=build/bench-before-ahead
    [[ $side == after ]] && bin=build/bench-ahead
    txt=$out/amc-bench-qwen2-$side-$round.txt
    [[ -f $txt ]] && continue
    "$bin/amc-bench-qwen2" --model build/bench-qwen2-0.5b --rounds 3 --skip-long >"$txt.part" 2>&1
    mv "$txt.part" "$txt"
  done
done
grep -H -E "decode, short context:|decode at 16K" "$out"/amc-bench-qwen2-*.txt >"$out/summary.txt"
