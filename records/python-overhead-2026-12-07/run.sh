#!/usr/bin/env bash
# bench/python_overhead.py, three processes: amc.DenseDecoder.decode called from Python against
# the same operator looped in C++ (DenseDecoder.time_decode), one GQA group, 2048 positions.
#   records/python-overhead-2026-12-07/run.sh   (after scripts/quickstart test built the module)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/python-overhead-2026-12-07
for round in 1 2 3; do
  PYTHONPATH=build/release/python /usr/bin/python3 bench/python_overhead.py --json >"$out/overhead-$round.json"
done
