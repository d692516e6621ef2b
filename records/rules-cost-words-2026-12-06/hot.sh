#!/usr/bin/env bash
# hot_second_stage.cpp against the library of 65d49aa (the worktree of run.sh's header) and of
# this change (build/release), alternated twice; output in hot.txt. Run with nothing else running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/rules-cost-words-2026-12-06
for side in before after; do
  lib=build/release/libamc.a
  [[ $side == before ]] && lib=/tmp/wt-before/BUILD/libamc.a
  g++ -O2 -std=c++20 -march=native -Iinclude -I/usr/include/eigen3 "$out/hot_second_stage.cpp" \
    "$lib" -o "/tmp/hot-$side" -lpthread
done
{
  sha256sum /tmp/wt-before/BUILD/libamc.a build/release/libamc.a
  for round in 1 2; do
    for side in before after; do
      echo "== $side, round $round"
      "/tmp/hot-$side"
    done
  done
} | tee "$out/hot.txt"
