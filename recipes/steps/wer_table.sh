#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# The final table of the recipe: for each decode set, the WER of the first-pass 1-best and of
# each rescored 1-best, overall and per rare-word bucket (buckets from the LM training text's
# word counts, rarest first), with rescore-wer; then Kaldi's own best WER
# of each rescored decode dir (local/score.sh's sweep over LMWT and the insertion penalty).
#
# The first-pass 1-best is rank 1 of the N-best lists (lattice-to-nbest ranks at the
# --inv-acwt of the rescoring step), read from the first model's archives.

# Begin configuration section.
models="lstm lstm_pointer transformer transformer_pointer"  # the rescored systems
interpolate=       # also this interpolation of two or more of them, e.g. lstm:transformer (its
                   # decode dirs end in <suffix>lstm+transformer), when every part is in --models
suffix=_rescore_   # rescored decode dir = <decode-dir><suffix><model>
drop_words=        # awk regex of tokens left out of references and hypotheses (noise marks)
# End configuration section.

help_message="The WER table of a recipe: first-pass and rescored 1-best of each decode set, overall
and per rare-word bucket (rescore-wer), then Kaldi's best WER of each rescored decode dir.

Usage: $0 [options] <lm-train-text> <out-dir> <set>:<ref-text>:<decode-dir> [<set>:<ref-text>:<decode-dir> ...]
 e.g.: $0 --models 'lstm lstm_pointer' data/rescore/train.txt exp/rescore/wer \\
         eval2000:../s5c/data/eval2000/text:../s5c/exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg
Run it from the recipe directory (recipes/swbd/s5 or recipes/wsj/s5: path.sh, steps/, utils/).
Writes <out-dir>/summary.txt and, per set and system, the rescore-wer report (.txt, .json, .png)."
needs="utils/best_wer.sh"
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -ge 3 ] || usage_exit
train_text=$1
out=$2
shift 2

models=$(lm_systems "$models" "$interpolate")
check_files "$train_text"
check_programs rescore-wer python3
for spec in "$@"; do
  IFS=: read -r set ref decode <<< "$spec"
  first_model=${models%% *}
  [ -n "$set" ] && [ -n "$decode" ] || fail "expected <set>:<ref-text>:<decode-dir>, got '$spec'"
  check_files "$ref" "$decode${suffix}$first_model/archives.1/words_text"
  for model in $models; do check_files "$decode$suffix$model/text"; done
done
mkdir -p "$out"

# Kaldi text (utt-id words) without the tokens that match --drop-words.
filter() {
  # The regex goes through the environment: awk -v would eat its backslashes.
  DROP_WORDS=$drop_words awk '{
    re = ENVIRON["DROP_WORDS"]; line = $1
    for (i = 2; i <= NF; i++) if (re == "" || $i !~ re) line = line " " $i
    print line }' "$1"
}

for spec in "$@"; do
  IFS=: read -r set ref decode <<< "$spec"
  first_model=${models%% *}
  # Keys are <utt>-<rank>: rank 1 is the first-pass best.
  cat "$decode$suffix$first_model"/archives.*/words_text |
    awk '$1 ~ /-1$/ { sub(/-1$/, "", $1); print }' | LC_ALL=C sort > "$out/$set.first-pass.text"
  filter "$ref" > "$out/$set.ref.text"
  for name in first-pass $models; do
    hyp=$decode$suffix$name/text
    [ "$name" == first-pass ] && hyp=$out/$set.first-pass.text
    filter "$hyp" > "$out/$set.$name.hyp.text"
    # An utterance the decode lost counts as deleted (--allow-missing), as in Kaldi's scoring.
    rescore-wer "$out/$set.ref.text" "$out/$set.$name.hyp.text" --train-text "$train_text" --allow-missing \
      --report "$out/$set.$name.json" --plot "$out/$set.$name.png" > "$out/$set.$name.txt"
  done
done

# One line per set and system: overall WER, then the WER of each bucket (rarest first).
python3 - "$out" "first-pass $models" "$@" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out, systems, specs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
for spec in specs:
    name = spec.split(":")[0]
    print(f"# {name}: WER % overall | per rare-word bucket, rarest first")
    for system in systems:
        with open(os.path.join(out, f"{name}.{system}.json")) as f:
            report = json.load(f)
        buckets = " ".join("     -" if b.get("wer") is None else f"{b['wer']:6.2f}"
                           for b in report.get("buckets", []))
        print(f"{system:24s} {report['wer']:6.2f} | {buckets}")
PY

echo "# Kaldi's scoring of the rescored lattices (best over LMWT and insertion penalty)"
for spec in "$@"; do
  IFS=: read -r set ref decode <<< "$spec"
  for model in $models; do
    dir=$decode$suffix$model
    # Sets scored with sclite (SWBD's eval2000) leave *.ctm.filt.sys, those scored with compute-wer wer_*.
    if ls "$dir"/score_*/*.ctm.filt.sys >/dev/null 2>&1; then
      grep -h Sum "$dir"/score_*/*.ctm.filt.sys | utils/best_wer.sh
    elif ls "$dir"/wer_* >/dev/null 2>&1; then
      grep -h WER "$dir"/wer_* | utils/best_wer.sh
    else
      echo "$dir: not scored by Kaldi"
    fi
  done
done | tee -a "$out/summary.txt"
