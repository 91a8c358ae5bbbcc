#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Switchboard: neural LM N-best rescoring with rescore, as in Li, Povey and Khudanpur,
# "Neural language modeling with implicit cache pointers" (Interspeech 2020).
#
# THIS RECIPE EXPECTS A FINISHED KALDI SWITCHBOARD SYSTEM: $KALDI_ROOT/egs/swbd/s5c (or
# --kaldi-dir) run through its chain model, with the train_dev and eval2000 decode dirs
# rescored by the sw1_fsh_fg 4-gram (G.carpa in data/lang_sw1_fsh_fg), the Fisher
# transcripts in data/local/lm/fisher/text1.gz, and the hires data dirs.  It reads that
# system's data/ and exp/ and writes:
#   data/rescore/                    LM text (train, valid, test) and vocabulary, here
#   exp/rescore/<model>/             the neural LMs, here
#   <kaldi-dir>/<ac-model-dir>/decode_<set>_<lm>_rescore_<model>/
#                                    rescored decode dirs beside the first-pass ones (Kaldi's
#                                    scoring looks for ../final.mdl), scored by local/score.sh
#   exp/rescore/wer/                 the final WER and per-bucket WER tables
#
# Models (--models): lstm, lstm_pointer, transformer, transformer_pointer: an LSTM or a
# Transformer body with a softmax or the implicit cache pointer head; the paper's sizes are
# the defaults below.  Run: ./run.sh [--stage N] [--kaldi-dir DIR] [--device cuda] ...

# Begin configuration section.
stage=0                           # first stage to run
stop_stage=5                      # last stage to run
kaldi_dir=                        # the finished Kaldi system; empty: $KALDI_ROOT/egs/swbd/s5c
ac_model_dir=exp/chain/tdnn7q_sp  # its acoustic model dir (relative to kaldi_dir)
lm=sw1_fsh_fg                     # the first-pass LM: data/lang_$lm, decode dirs decode_<set>_$lm
train_set=train_nodev             # LM training transcripts (data/<set>, with segments)
valid_set=train_dev               # LM validation transcripts
test_set=eval2000                 # perplexity text only
fisher_text=data/local/lm/fisher/text1.gz  # relative to kaldi_dir; empty: no Fisher text
swbd_copies=3                     # Switchboard repeated against Fisher in the LM text
decode_sets="train_dev eval2000"  # decode dirs to rescore (data/<set>_hires for scoring)
models="lstm lstm_pointer transformer transformer_pointer"
interpolate=                       # also rescore with these models interpolated, e.g.
                                  # lstm_pointer:transformer_pointer (NN term sum_k mix_k l_k), into
                                  # <decode-dir>_rescore_a+b when every part is in $models; empty: none
                                  # (in issue 16's ablation it did not beat lstm_pointer alone)
mix=                              # shares of the interpolated models, e.g. 0.6,0.4; empty: equal
lstm_hidden=650                   # LSTM: 2 layers of 650
lstm_layers=2
transformer_hidden=512            # Transformer: 6 layers of 512, 8 attention heads
transformer_layers=6
transformer_heads=8
bptt=100                          # BPTT length T
history=100                       # pointer history L
memory_aug=true                   # the pointer models get memory augmentation (false: plain pointer);
                                  # (with a 10k softmax the pointer + memory won issue 16's ablation;
                                  # with the full vocabulary and classes it made no difference)
output=class                      # output layer: class (class-factored, exact; ~(C + V/C) x H per token
                                  # instead of V x H: 7.9x softmax's training speed at 30k words; the
                                  # class LSTM with carry won issue 16's ablation) | softmax
classes=                          # word classes of output=class; empty: round(sqrt(V)), V of words.txt
epochs=                           # empty: rescore-train-lm's default
train_opts=                       # more rescore-train-lm options, e.g. "--optimizer adam --lr 5e-4"
seed=1
N=100                             # hypotheses per utterance
inv_acwt=10                       # inverse acoustic scale of the N-best lists
weight=0.8                        # NN LM interpolation weight
state_carry=rescored              # none | first-pass | rescored
device=auto                       # auto | cpu | cuda
# End configuration section.

set -eo pipefail
# shellcheck disable=SC1091
. ./cmd.sh
# shellcheck disable=SC1091
. ./path.sh
if [ ! -f utils/parse_options.sh ]; then
  # Kaldi recipes link steps/ and utils/ from egs/wsj/s5; do the same, once.
  ln -sfn "$KALDI_ROOT/egs/wsj/s5/steps" steps
  ln -sfn "$KALDI_ROOT/egs/wsj/s5/utils" utils
fi
# shellcheck disable=SC1091
. utils/parse_options.sh
set -u

if [ $# != 0 ]; then
  echo "Usage: $0 [options]   (options: the configuration section at the top of $0)"
  echo " e.g.: $0 --stage 3 --stop-stage 4 --device cuda --models 'lstm lstm_pointer'"
  exit 1
fi

[ -z "$kaldi_dir" ] && kaldi_dir=$KALDI_ROOT/egs/swbd/s5c
kaldi_dir=$(cd "$kaldi_dir" && pwd)
recipe_dir=$PWD
rescore_steps=$(cd ../../steps && pwd)
lmdata=data/rescore
lang=$kaldi_dir/data/lang_$lm

# The finished Kaldi system this recipe builds on.
for f in "$kaldi_dir/data/$train_set/text" "$kaldi_dir/data/$train_set/segments" \
         "$kaldi_dir/data/$valid_set/text" "$kaldi_dir/data/$test_set/text" "$lang/words.txt" \
         ${fisher_text:+"$kaldi_dir/$fisher_text"}; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi SWBD system)" && exit 1
done
for set in $decode_sets; do
  for f in "$kaldi_dir/$ac_model_dir/decode_${set}_$lm/num_jobs" "$kaldi_dir/data/${set}_hires/utt2spk"; do
    [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi SWBD system)" && exit 1
  done
done
for prog in rescore-train-lm rescore-nbest rescore-wer; do
  command -v "$prog" >/dev/null 2>&1 ||
    { echo "$0: $prog not on PATH: install rescore and set RESCORE_VENV in path.sh"; exit 1; }
done

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  echo "$0: stage 1: LM text in conversation and time order"
  local/prepare_lm_text.sh --swbd-copies "$swbd_copies" --test-data "$kaldi_dir/data/$test_set" \
    ${fisher_text:+--fisher-text "$kaldi_dir/$fisher_text"} \
    "$kaldi_dir/data/$train_set" "$kaldi_dir/data/$valid_set" "$lmdata"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  echo "$0: stage 2: vocabulary from $lang/words.txt"
  cp "$lang/words.txt" "$lmdata/words.txt"
  if ! awk '$1 == "<unk>" { found = 1 } END { exit !found }' "$lmdata/words.txt"; then
    awk '$2 >= next_id { next_id = $2 + 1 } END { print "<unk>", next_id }' \
      "$lang/words.txt" >> "$lmdata/words.txt"
  fi
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  for model in $models; do
    case $model in
      lstm|lstm_pointer)
        opts=(--arch lstm --hidden "$lstm_hidden" --layers "$lstm_layers") ;;
      transformer|transformer_pointer)
        opts=(--arch transformer --hidden "$transformer_hidden" --layers "$transformer_layers"
              --n-heads "$transformer_heads") ;;
      *) echo "$0: unknown model $model (lstm, lstm_pointer, transformer, transformer_pointer)"; exit 1 ;;
    esac
    case $model in
      *_pointer) opts+=(--head pointer --history "$history")
                 if $memory_aug; then opts+=(--memory-aug); fi ;;
      *) opts+=(--head softmax) ;;
    esac
    case $output in
      class) opts+=(--output class --classes "${classes:-$(awk '$1 != "<eps>" && $1 != "<s>" &&
               $1 != "</s>" && $1 !~ /^#/ { n++ } END { printf "%d", sqrt(n + 1) + 0.5 }' "$lmdata/words.txt")}") ;;
      softmax) opts+=(--output softmax) ;;
      *) echo "$0: --output class or softmax, not $output"; exit 1 ;;
    esac
    [ -n "$epochs" ] && opts+=(--epochs "$epochs")
    # the vocabulary is words.txt's; training words outside it are <unk> (rescore-train-lm)
    text_opts=(--train "$lmdata/train.txt" --valid "$lmdata/valid.txt" --words-txt "$lmdata/words.txt")
    echo "$0: stage 3: training $model (log: exp/rescore/$model/log/train.log)"
    mkdir -p "exp/rescore/$model/log"
    # cuda_cmd comes from cmd.sh; $train_opts is a list of options: it must split.
    # shellcheck disable=SC2154,SC2086
    $cuda_cmd "exp/rescore/$model/log/train.log" \
      rescore-train-lm "${text_opts[@]}" --out-dir "exp/rescore/$model" \
        --bptt "$bptt" --seed "$seed" --device "$device" "${opts[@]}" $train_opts
  done
fi

systems=$models
if [ -n "$interpolate" ]; then
  interp_name=${interpolate//:/+}
  for part in ${interpolate//:/ }; do
    case " $models " in *" $part "*) ;; *) interp_name=; break ;; esac
  done
  if [ -n "$interp_name" ]; then systems="$models $interp_name"; fi
fi

if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  for model in $systems; do
    model_path=$recipe_dir/exp/rescore/$model
    mix_opts=()
    if [[ $model == *+* ]]; then  # the interpolation: a colon list of the model dirs, --mix
      model_path=$(for part in ${model//+/ }; do printf "%s:" "$recipe_dir/exp/rescore/$part"; done)
      model_path=${model_path%:}
      if [ -n "$mix" ]; then mix_opts=(--mix "$mix"); fi
    fi
    for set in $decode_sets; do
      indir=$kaldi_dir/$ac_model_dir/decode_${set}_$lm
      echo "$0: stage 4: rescoring $indir with $model"
      # From the Kaldi system's directory, as a Kaldi step: its path.sh, local/score.sh.
      # shellcheck disable=SC2154  # decode_cmd comes from cmd.sh
      (cd "$kaldi_dir" &&
        "$rescore_steps/lmrescore_nbest.sh" --cmd "$decode_cmd" --rescore-cmd "$cuda_cmd" \
          --N "$N" --inv-acwt "$inv_acwt" --weight "$weight" \
          --state-carry "$state_carry" --device "$device" "${mix_opts[@]}" \
          "data/lang_$lm" "$model_path" "data/${set}_hires" \
          "$indir" "${indir}_rescore_$model")
    done
  done
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  echo "$0: stage 5: WER tables"
  sets=()
  for set in $decode_sets; do
    sets+=("$set:$kaldi_dir/data/$set/text:$kaldi_dir/$ac_model_dir/decode_${set}_$lm")
  done
  # Noise and laughter marks and <unk> are not words to score (Kaldi's sclite scoring of
  # eval2000 drops them too; its figures, printed last, stay the reference).
  "$rescore_steps/wer_table.sh" --models "$systems" --drop-words '^(\[[a-z_-]+\]|<unk>)$' \
    "$lmdata/train.txt" exp/rescore/wer "${sets[@]}"
fi

echo "$0: done"
