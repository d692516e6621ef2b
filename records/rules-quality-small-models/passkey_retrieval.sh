#!/usr/bin/env bash
# The passkey comparison of docs/rules.md on data/qwen2-retrieval (issue 16's passkey
# target): every rule at supports 193 and 385, contexts 1024 (where the model's dense attention
# answers 90% of trials) and 4092 (+ the question = the 4096 positions it was trained at),
# then 60 prompts at 4092 where dense attention answers (OUT_DIR-near).
#
#   records/rules-quality-small-models/passkey_retrieval.sh [OUT_DIR]    (default records/rules-quality-small-models/passkey-retrieval)
#
# Same seed, documents, depths and trials as tools/train_retrieval/evaluate.sh, so the dense
# column equals that run's and every run here answers the same prompts. The first stage of
# twostage and the sub-block count are per-run settings, hence three runs. Needs build/release
# (amc-eval) and data/qwen2-retrieval.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-records/rules-quality-small-models/passkey-retrieval}
eval=build/release/tools/eval/amc-eval
mapfile -t documents < <(/usr/bin/python3 tools/train_tiny/heldout_files.py)
common=(--model data/qwen2-retrieval --text "${documents[@]}" --contexts 1024,4092
        --depths 0.1,0.3,0.5,0.7,0.85 --trials 10 --supports 193,385)
"$eval" passkey "${common[@]}" --rules mean,bound,oracle,twostage \
  --out "$out/mean-bound-oracle-two4"
"$eval" passkey "${common[@]}" --rules twostage --shortlist-rule bound --out "$out/two4-bound"
"$eval" passkey "${common[@]}" --rules submean,twostage --shortlist-rule submean \
  --sub-blocks 8 --out "$out/sub8"
# Where dense attention answers at 4092 (values about 400-800 positions back, depths 0.8-0.9),
# 20 trials per depth: the 4096 measurement of issue 16 on 60 prompts rather than 10.
near=${out}-near
near_common=(--model data/qwen2-retrieval --text "${documents[@]}" --contexts 4092
             --depths 0.8,0.85,0.9 --trials 20 --supports 193,385)
"$eval" passkey "${near_common[@]}" --rules mean,bound,oracle,twostage \
  --out "$near/mean-bound-oracle-two4"
"$eval" passkey "${near_common[@]}" --rules twostage --shortlist-rule bound \
  --out "$near/two4-bound"
"$eval" passkey "${near_common[@]}" --rules submean,twostage --shortlist-rule submean \
  --sub-blocks 8 --out "$near/sub8"
echo "passkey_retrieval.sh: tables in $out/*/passkey.md and $near/*/passkey.md"
