#!/usr/bin/env bash
# What dense decode spends its instructions on (issue 35, part 4: measured, not guessed). This
# VM has no hardware performance counters, so callgrind counts the instructions of the hot
# kernel (count_instructions.cpp: 2048 positions in cache, 50 calls) on the AVX2 table, since
# valgrind does not run AVX-512; the same binary's native time per position on the AVX2 and
# AVX-512 tables goes beside the counts. Needs build/release/libamc.a and valgrind.
#
#   records/kv8-fused-2026-12-05/callgrind.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/kv8-fused-2026-12-05
bin=build/count-instructions
# -march=x86-64-v3: nothing outside the kernel tables may use AVX-512 under valgrind.
g++ -std=c++20 -O3 -DNDEBUG -march=x86-64-v3 -Iinclude -isystem /usr/include/eigen3 \
  "$out/count_instructions.cpp" build/release/libamc.a -lpthread -o "$bin"
for round in 1 2 3; do
  for dtype in bf16 f32 q8_0; do
    for kernels in avx2 avx512; do
      AMC_KERNELS=$kernels "$bin" "$dtype" 200
    done
  done
done | tee "$out/native-times-3-rounds.txt"
for dtype in bf16 f32 q8_0; do
  file=$out/callgrind-$dtype.out
  AMC_KERNELS=avx2 valgrind --tool=callgrind --toggle-collect='*run_decodes*' \
    --callgrind-out-file="$file" "$bin" "$dtype" 50 2>"$out/callgrind-$dtype.log"
  callgrind_annotate --inclusive=yes "$file" | head -40 >"$out/callgrind-$dtype.txt"
  gzip -9 -n -f "$file"
done
