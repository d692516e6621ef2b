#!/bin/sh
# Matvec benchmarks of amc-bench-gguf (f32 and 8-bit activations, every block type; the 8-bit
# ones now with Q5_0 and Q5_1), one run, from the repository root after
# `cmake -S . -B build/kq -DCMAKE_BUILD_TYPE=Release &&
# cmake --build build/kq --target amc-bench-gguf`. Output: matvec.json beside this script.
set -e
build/kq/bench/amc-bench-gguf --benchmark_filter=Matvec --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_out=records/q5-q8-2026-12-05/matvec.json --benchmark_out_format=json
