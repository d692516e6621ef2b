#!/usr/bin/env bash
# Issue 32: three levers of the sparse step's cold reads, each alone, in one run
# (2026-12-06): four binaries alternated three times, each size a process of its own,
# nothing else running:
#   base    amc-bench of a669c14 (the code of the current table of cost-topk-2026-12-06);
#   ahead   655776f: the two-stage rule's second stage asks for each shortlisted block's keys
#           while the block before it is scored (KernelTable::log_sum_exp_rows' RowsAhead);
#   attend  6d30a7f: ahead, and sparse attention asks for the next range's first rows during
#           the range before it (AttendArgs::next_keys) instead of reading them before it;
#   words   5841b42: attend, and the bf16 word scans stream from 256 rows (the channel bound's
#           512 rows at 16384).
# Each process: the whole sparse step and selection of mean (0), bound (1), twostage/mean (2),
# twostage/bound (3), submean (4), oracle (5), cold, one GQA group (BM_RuleSparseDecode,
# BM_RuleSelect); at 16384 also dense decode (BM_DenseDecode/16384, issue 32's "8x faster than
# dense"), at 131072 also the mean step's touched-bytes bound (BM_SparseDecode and
# BM_StreamRead). Each step is skipped when its output exists; summarize.py writes summary.md.
#
#   binaries: build/release/bench/amc-bench built at each commit, copied to
#   build/bench-ahead-before, build/bench-ahead-after, build/bench-ahead-attend, build/bench-words256
#   records/rules-cost-ahead-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-cost-ahead-2026-12-06
declare -A binary=([base]=build/bench-ahead-before/amc-bench
                   [ahead]=build/bench-ahead-after/amc-bench
                   [attend]=build/bench-ahead-attend/amc-bench
                   [words]=build/bench-words256/amc-bench)
declare -A extra=([16384]='BM_DenseDecode/16384/' [131072]='BM_(SparseDecode|StreamRead)/131072/')
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum "${binary[@]}" >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
for round in 1 2 3; do
  for side in base ahead attend words; do
    for n in 16384 131072; do
      json=$out/rules-$n-$side-$round.json
      [[ -f $json ]] && continue
      date -u +"%H:%M:%S $side $n $round" >>"$out/times.txt"
      "${binary[$side]}" \
        --benchmark_filter="^(BM_Rule(SparseDecode|Select)/$n/rule:(0|1|2|3|4|5)/|${extra[$n]})" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"
python3 "$out/summarize.py"
