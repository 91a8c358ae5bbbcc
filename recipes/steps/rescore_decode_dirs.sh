#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Rescores decode dirs of a finished Kaldi system with each neural LM of a recipe (and, with
# --interpolate, with an interpolation of them), through lmrescore_nbest.sh run from the Kaldi
# system's directory as a Kaldi step (its path.sh, cmd.sh, local/score.sh): each
# <decode-dir> gives <decode-dir><suffix><model>, beside it (Kaldi's scoring looks for
# ../final.mdl).  With --tune true (the default) the first <data-dir>:<decode-dir> is the dev set:
# after it is rescored, rescore-tune reads its output dir (all jobs) and the other sets are
# rescored with the setting tuned there (lmrescore_nbest.sh --params <exp-dir>/tune/<model>.json).
# Shared by the SWBD and WSJ recipes (their stage 4).

# Begin configuration section.
cmd=run.pl                        # how to run the Kaldi jobs (lmrescore_nbest.sh --cmd)
rescore_cmd=                      # how to run the rescore-nbest jobs; empty: --cmd
models="lstm lstm_pointer transformer transformer_pointer"  # the LMs, dirs <exp-dir>/<model>
interpolate=                      # also rescore with these models interpolated, e.g.
                                  # lstm_pointer:transformer_pointer (NN term sum_k mix_k l_k), into
                                  # <decode-dir><suffix>a+b when every part is in --models; empty: none
                                  # (in the ablation, docs/benchmarks.md, it did not beat lstm_pointer alone)
mix=                              # shares of the interpolated models, e.g. 0.6,0.4; empty: equal
suffix=_rescore_                  # rescored decode dir = <decode-dir><suffix><model>
N=100                             # hypotheses per utterance
inv_acwt=10                       # inverse acoustic scale of the N-best lists (> 0)
weight=0.8                        # NN LM interpolation weight, in [0, 1]
state_carry=rescored              # none | first-pass | rescored
device=auto                       # auto | cpu | cuda | cuda:N
nbest_opts=                       # more options of lmrescore_nbest.sh, e.g. "--train-text data/rescore/train.txt"
tune=true                         # true: tune on the first set (dev), apply to the others; false: every
                                  # set at --weight, --inv-acwt
tune_opts="--wips=-1:3:0.5"       # more rescore-tune options (its grids), e.g. "--weights 0:1:0.05"
check_only=false                  # true: check the options and exit (a recipe does so before its stage 1)
# End configuration section.

help_message="Rescore Kaldi decode dirs with a recipe's neural LMs (lmrescore_nbest.sh, from <kaldi-dir>).

Usage: $0 [options] <kaldi-dir> <lang-dir> <exp-dir> <data-dir>:<decode-dir> [<data-dir>:<decode-dir> ...]
 e.g.: $0 --cmd \"\$decode_cmd\" --rescore-cmd \"\$cuda_cmd\" --models 'lstm lstm_pointer' \\
         ~/kaldi/egs/swbd/s5c data/lang_sw1_fsh_fg exp/rescore \\
         data/eval2000_hires:exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg
<lang-dir> (words.txt and G.carpa or G.fst), each <data-dir> and <decode-dir> are relative to
<kaldi-dir> (or absolute); <exp-dir> holds the models, <exp-dir>/<model>/model.pt.
With --tune true the first <data-dir>:<decode-dir> is the dev set the setting is tuned on
(<exp-dir>/tune/<model>.json, rescore-tune's --params-out); the others get that setting."
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -ge 4 ] || usage_exit
kaldi_dir=$1
lang=$2
[ -d "$kaldi_dir" ] || fail "expected the Kaldi system's directory $kaldi_dir to exist"
exp=$3
[ "${exp#/}" = "$exp" ] && exp=$PWD/$exp  # (the steps run from kaldi_dir)
shift 3
nbest_step=$(cd "$(dirname "$0")" && pwd)/lmrescore_nbest.sh  # (run from kaldi_dir)

# Every option, then the inputs (the models made by the recipe's stage 3), before any work;
# lmrescore_nbest.sh checks each decode dir again before its own first stage.
check_number N 'int>=1'
check_number inv_acwt '>0'
check_number weight 0..1
check_choice state_carry none first-pass rescored
check_device device
check_bool check_only tune
[ -n "$models" ] || fail "--models must name one or more models (dirs of $exp)"
systems=$(lm_systems "$models" "$interpolate")
[ "$systems" = "$models" ] && [ -n "$interpolate" ] &&
  echo "$0: not rescoring with $interpolate: each of its models must be one of --models ($models)"
for spec in "$@"; do
  case "$spec" in ?*:?*) ;; *) fail "expected <data-dir>:<decode-dir>, got '$spec'" ;; esac
done
[ -x "$nbest_step" ] || fail "expected $nbest_step (the N-best step it runs) to exist"
if $tune; then check_programs rescore-tune; check_passed_options rescore-tune tune_opts; fi
$check_only && exit 0
for model in $models; do check_files "$exp/$model/model.pt"; done
for spec in "$@"; do
  IFS=: read -r data decode <<< "$spec"
  (cd "$kaldi_dir" && check_files "$data/utt2spk" "$decode/num_jobs") || exit 1
done

for model in $systems; do
  model_path=$exp/$model
  mix_opts=()
  if [[ $model == *+* ]]; then  # the interpolation: a colon list of the model dirs, --mix
    model_path=$(for part in ${model//+/ }; do printf "%s:" "$exp/$part"; done)
    model_path=${model_path%:}
    if [ -n "$mix" ]; then mix_opts=(--mix "$mix"); fi
  fi
  setting=()  # the dev set (the first) at --weight; with --tune true the others at its tuned setting
  first=true
  for spec in "$@"; do
    IFS=: read -r data decode <<< "$spec"
    echo "$0: rescoring $decode with $model${setting[*]:+ (${setting[*]})}"
    # $nbest_opts is a list of options: it must split.
    # shellcheck disable=SC2086
    (cd "$kaldi_dir" &&
      "$nbest_step" --cmd "$cmd" --rescore-cmd "${rescore_cmd:-$cmd}" \
        --N "$N" --inv-acwt "$inv_acwt" --weight "$weight" "${setting[@]}" \
        --state-carry "$state_carry" --device "$device" "${mix_opts[@]}" $nbest_opts \
        "$lang" "$model_path" "$data" "$decode" "$decode$suffix$model") || exit 1
    if $tune && $first; then
      params=$exp/tune/$model.json
      mkdir -p "$exp/tune"
      echo "$0: tuning $model on $decode$suffix$model -> $params"
      # $tune_opts is a list of options: it must split.
      # shellcheck disable=SC2086
      (cd "$kaldi_dir" &&
        rescore-tune "$decode$suffix$model" --data-dir "$data" $tune_opts --params-out "$params") || exit 1
      setting=(--params "$params")
    fi
    first=false
  done
done
echo "$0: done"
