#!/usr/bin/env bash
# Every measurement of docs/results-smollm2.md: the study's paired fresh-selection sweep and the
# passkey probe on SmolLM2-135M-Instruct (the GGUF file of scripts/fetch-model), for each rule.
#
#   records/smollm2-quality/run.sh [OUT_DIR]     (default records/smollm2-quality)
#
# Text the model reads (Debian 12 packages, so anyone can take the same prefixes):
#   prose: five "What's New in Python" essays (python3.11-doc's reStructuredText sources,
#          English prose with a few code samples);
#   code:  five Python standard-library modules (/usr/lib/python3.11, python3.11-minimal).
# Contexts 2048, 4096 and 8064 (+ 128 scored tokens = SmolLM2's 8192 positions), supports 193,
# 385 and 769 (k = 8, 20 and 44 blocks of 16 beside 1 sink and a window of 64: at most 1/8 of
# the context from 4096 on), 5 prefixes per context; the study's settings otherwise.
# Each sweep is skipped when its summary exists and resumed (--resume) when it was interrupted,
# so the script can be stopped and started again at any time.
# Needs build/release (amc-eval, or AMC_EVAL=PATH), python3 and gnuplot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-records/smollm2-quality}
eval=${AMC_EVAL:-build/release/tools/eval/amc-eval}  # AMC_EVAL: another build of it
model=$(scripts/fetch-model)
docs=/usr/share/doc/python3.11/html/_sources/whatsnew
[[ -d $docs ]] || { echo "run.sh: $docs is missing: apt-get install python3.11-doc" >&2; exit 2; }
prose=("$docs"/{2.5,2.6,2.7,3.2,3.3}.rst.txt)
code=(/usr/lib/python3.11/{argparse,tarfile,zipfile,datetime,inspect}.py)

# sweep and passkey take their contexts and supports from $contexts and $supports when set.
sweep() {  # CORPUS NAME FLAGS...: one sweep into $out/sweeps-CORPUS/NAME
  local corpus=$1 name=$2
  shift 2
  local dir=$out/sweeps-$corpus/$name
  [[ -f $dir/summary.csv ]] && return 0
  local resume=()
  [[ -s $dir/runs.jsonl ]] && resume=(--resume)  # an interrupted sweep continues
  local -n documents=$corpus
  echo "run.sh: sweep $corpus/$name ($(date -u +%H:%M:%S))"
  "$eval" sweep --model "$model" --text "${documents[@]}" --contexts "${contexts:-2048,4096,8064}" \
    --supports "${supports:-193,385,769}" --prefixes 5 --tokens 128 "$@" "${resume[@]}" --out "$dir"
  gzip -9 -n -f "$dir/runs.jsonl"
  rm -f "$dir"/gnuplot*.log
}

passkey() {  # NAME FLAGS...: one passkey run into $out/passkey/NAME
  local name=$1
  shift
  local dir=$out/passkey/$name
  [[ -f $dir/passkey.md ]] && return 0
  rm -rf "$dir"
  echo "run.sh: passkey $name ($(date -u +%H:%M:%S))"
  "$eval" passkey --model "$model" --text "${code[@]}" --contexts "${contexts:-1024,2048,4096,8160}" \
    --depths 0.1,0.3,0.5,0.7,0.9 --trials 6 --supports "${supports:-193,385,769}" "$@" --out "$dir"
}

# Summary precision: the sweeps and passkey runs named *-bf16, two2-bound, two4-bound-q8kv,
# tp95-two4-bound and code's bound scored the channel bounds rounded outward to bf16
# (--summary-precision bf16; their rules read no mean keys); every other run scored the exact f32
# summaries (the default, --summary-precision f32).
bf16=(--summary-precision bf16)

# twostage/bound with bf16 bounds, and with a shortlist of 2 instead of 4, where the supports are
# at most 1/8 of the context (385 at 4096, 385 and 769 at 8064; the passkey at 8160).
contexts=4096,8064 supports=385,769 sweep prose two4-bound-bf16 --rule twostage --shortlist 4 \
  --shortlist-rule bound "${bf16[@]}"
contexts=4096,8064 supports=385,769 sweep prose two2-bound --rule twostage --shortlist 2 \
  --shortlist-rule bound "${bf16[@]}"
contexts=8160 supports=385,769 passkey two4-bound-bf16 --rules twostage --shortlist-rule bound \
  "${bf16[@]}"

# The 8-bit KV cache (--kv-dtype q8_0: keys and values in q8_0 blocks, as llama.cpp's q8_0
# cache): the passkey at 8160 (dense and twostage/bound) and the prose sweep at 8064, against the
# bf16 cache's runs above.
contexts=8160 supports=385,769 passkey two4-bound-q8kv --rules twostage --shortlist-rule bound \
  --kv-dtype q8_0 "${bf16[@]}"
contexts=8064 supports=385,769 sweep prose two4-bound-q8kv --rule twostage --shortlist 4 \
  --shortlist-rule bound --kv-dtype q8_0 "${bf16[@]}"

# Every rule per query head (the study's scope) on the whole grid.
sweep prose mean --rule mean
sweep prose oracle --rule oracle
sweep prose bound --rule bound
sweep prose two4 --rule twostage --shortlist 4
sweep prose two4-bound --rule twostage --shortlist 4 --shortlist-rule bound
passkey mean-bound-oracle-two4 --rules mean,bound,oracle,twostage
passkey two4-bound --rules twostage --shortlist-rule bound
sweep code mean --rule mean
sweep code oracle --rule oracle
sweep code two4-bound --rule twostage --shortlist 4 --shortlist-rule bound
sweep code two4 --rule twostage --shortlist 4
for corpus in prose code; do
  sweep "$corpus" tp95-two4-bound --rule twostage --shortlist 4 --shortlist-rule bound \
    --top-p 0.95 "${bf16[@]}"
done
sweep code bound --rule bound "${bf16[@]}"
# The sub-block rules.
passkey sub4 --rules submean,twostage --shortlist-rule submean --sub-blocks 4
for corpus in prose code; do
  sweep "$corpus" sub4 --rule submean --sub-blocks 4
  sweep "$corpus" two4-sub4 --rule twostage --shortlist 4 --shortlist-rule submean --sub-blocks 4
done

# The passkey with a top-p budget (the tp95 sweeps above).
passkey tp95-two4-bound --rules twostage --shortlist-rule bound --top-p 0.95 "${bf16[@]}"

# The passkey with a shortlist of 2.
contexts=8160 supports=385,769 passkey two2-bound --rules twostage --shortlist 2 \
  --shortlist-rule bound "${bf16[@]}"

# The tables (with G, as records/rules-quality-small-models/gap_closed.py computes it), the plots,
# and the study's findings counted on these runs.
python3 records/smollm2-quality/report.py "$out"
python3 records/smollm2-quality/study_side_by_side.py "$out" > "$out/study_side_by_side.txt"
