#!/usr/bin/env bash
# What a cold scattered 4 KiB block costs on this VM, and what asking for it ahead saves
# (scattered.cpp says what each mode does). Three rounds of every mode, alternated, work 80
# (about as long per block as the two-stage rule's second stage scores one block of 32 keys
# for 7 heads hot) and 0 (the reads alone); nothing else running. Writes output.txt.
#   records/rules-cold-translation-2026-12-06/run.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binary=$(mktemp)
g++ -O2 -mavx512f -mavx512dq "$here/scattered.cpp" -o "$binary"
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  for round in 1 2 3; do
    for work in 80 0; do
      for mode in hot plain warm-tlb ahead paced paced-l2 warm-ahead; do
        echo "round $round: $("$binary" "$mode" "$work")"
      done
    done
  done
} | tee "$here/output.txt"
rm -f "$binary"
