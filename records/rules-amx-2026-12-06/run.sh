#!/usr/bin/env bash
# The AMX kernel (amx_kernel.cpp) against the avx512 table on the two-stage rule's second stage
# (blocks.cpp), hot and cold, three rounds alternated, nothing else running. Needs build/release
# (libamc.a). amx-table.patch, on c15b787, is the same kernel as a kernel table: the build that
# steps/run.sh measured.
#   records/rules-amx-2026-12-06/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$here/../../.."
binary="$(mktemp)"
g++ -O2 -std=c++20 -DNDEBUG -mavx512f -mavx512bw -mavx512dq -mavx512cd -mavx2 -mfma -mf16c \
  -Wno-maybe-uninitialized -I"$root/include" -I"$root/src" \
  "$here/blocks.cpp" "$here/amx_kernel.cpp" "$root/build/release/libamc.a" -o "$binary"
{
  grep -m1 "model name" /proc/cpuinfo
  for round in 1 2 3; do
    echo "round $round ($(date -u +%H:%M:%S) UTC)"
    for placement in hot near far; do
      for kernel in avx512 amx read; do
        [[ $placement == hot && $kernel == read ]] && continue
        "$binary" "$kernel" "$placement"
      done
    done
  done
} | tee "$here/output.txt"
rm -f "$binary"
# The tile configuration's cost (config_cost.cpp), quoted as "50 ns" in docs/selectors.md.
g++ -O2 -mamx-tile -mamx-bf16 "$here/config_cost.cpp" -o "$binary"
"$binary" | tee "$here/config_cost.txt"
rm -f "$binary"
