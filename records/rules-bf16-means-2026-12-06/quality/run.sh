#!/usr/bin/env bash
# The mean-pooled rule's quality on SmolLM2-135M-Instruct scoring the f32 mean keys (mean-f32)
# or their bf16 copy (mean-bf16): the prose sweep of records/smollm2-quality/run.sh at 4096 and 8064
# with supports 385 and 769, one amc-eval for both. That amc-eval was built at ca9f503 with
# switch.patch applied, which keeps the bf16 copy and makes AMC_MEAN_BF16 choose it (the library
# as committed always scores the copy: it gives mean-bf16's outputs). Then compare.py.
#   AMC_EVAL=path/to/that/amc-eval records/rules-bf16-means-2026-12-06/quality/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../../.."
eval=${AMC_EVAL:?the amc-eval built with switch.patch}
model=$(scripts/fetch-model)
docs=/usr/share/doc/python3.11/html/_sources/whatsnew
[[ -d $docs ]] || { echo "run.sh: $docs is missing: apt-get install python3.11-doc" >&2; exit 2; }
prose=("$docs"/{2.5,2.6,2.7,3.2,3.3}.rst.txt)
for side in f32 bf16; do
  dir=$here/mean-$side
  [[ -f $dir/summary.csv ]] && continue
  if [[ $side == bf16 ]]; then export AMC_MEAN_BF16=1; else unset AMC_MEAN_BF16; fi
  "$eval" sweep --model "$model" --text "${prose[@]}" --contexts 4096,8064 --supports 385,769 \
    --prefixes 5 --tokens 128 --score mean --out "$dir"
  gzip -9 -n -f "$dir/runs.jsonl"
  rm -f "$dir"/*.dat "$dir"/*.png "$dir"/*.svg "$dir"/plots.gp
done
python3 "$here/compare.py" | tee "$here/compare.txt"
