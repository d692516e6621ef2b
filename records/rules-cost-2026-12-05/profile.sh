#!/usr/bin/env bash
# Where twostage/bound's selection spends its time with the KV in cache (selectors.md, "Cost"):
# select_hot.cpp (one KV head of N random bf16 positions, 7 query heads, blocks of 32, k 16,
# per-group scope, the selection called CALLS times per round) built against build/release's
# libamc.a, timed, then sampled by perf (cpu-clock; this VM has no hardware counters). Output:
# profile-131072.txt beside this script.
#   records/rules-cost-2026-12-05/profile.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
here=records/rules-cost-2026-12-05
bin=build/select-hot
g++ -std=c++20 -O3 -DNDEBUG -march=native -g -Iinclude -isystem /usr/include/eigen3 \
  "$here/select_hot.cpp" build/release/libamc.a -lpthread -o "$bin"
{
  echo "# $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  "$bin" 131072 bound 200
  perf record -q -e cpu-clock -F 5000 -o "$bin.perf" "$bin" 131072 twostage/bound 3000
  # The samples include the setup (filling 16 M random numbers: normal_distribution, page
  # clearing); shares of the selection are these shares over the selection's own symbols.
  perf report -i "$bin.perf" --no-children --percent-limit 0.5 --stdio 2>/dev/null | grep '%'
} >"$here/profile-131072.txt" 2>&1
