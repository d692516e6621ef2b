#!/usr/bin/env bash
# Issue 35 part 4, 2026-12-05 (sixth session): weight streaming at short context on the VM of
# that evening (records/cold-flush-2026-12-05/lscpu.txt), the current code (no change
# since weights-ahead-2026-12-05). amc-bench-qwen2 on the Qwen2-0.5B-shaped synthetic bf16
# checkpoint (written by its first run when absent), 2 threads, medians of 3 rounds per
# process, two processes, nothing else running. Each run is skipped when its output exists.
#
#   records/weights-2026-12-05-evening/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/weights-2026-12-05-evening
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
for round in 1 2; do
  txt=$out/amc-bench-qwen2-$round.txt
  [[ -f $txt ]] && continue
  build/release/bench/amc-bench-qwen2 --model build/bench-qwen2-0.5b --rounds 3 --skip-long \
    >"$txt.part" 2>&1
  mv "$txt.part" "$txt"
done
grep -H -E "decode, short context:|decode at 16K" "$out"/amc-bench-qwen2-*.txt >"$out/summary.txt"
