#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Trains the neural LMs of a recipe with rescore-train-lm, one after the other, each into
# <exp-dir>/<model>/ (model.pt, log/train.log), from <lm-data-dir>/{train,valid,words}.txt:
#   lstm, lstm_pointer                 an LSTM body (--lstm-hidden x --lstm-layers)
#   transformer, transformer_pointer   a Transformer body (--transformer-*)
# with a softmax head, or (*_pointer) the implicit cache pointer over the last --history words,
# with memory augmentation unless --memory-aug false; the paper's sizes are the defaults.
# The vocabulary is words.txt's: training words outside it are <unk> (rescore-train-lm).
# Shared by the SWBD and WSJ recipes (their stage 3).

# Begin configuration section.
cmd=run.pl                        # how to run the training jobs: run.pl, queue.pl [options]
models="lstm lstm_pointer transformer transformer_pointer"  # the LMs to train
lstm_hidden=650                   # LSTM: 2 layers of 650
lstm_layers=2
transformer_hidden=512            # Transformer: 6 layers of 512, 8 attention heads
transformer_layers=6
transformer_heads=8
bptt=100                          # BPTT length T
history=100                       # pointer history L
memory_aug=true                   # the pointer models get memory augmentation (false: plain pointer);
                                  # with a 10k softmax the pointer + memory won the ablation
                                  # (docs/benchmarks.md), with the full vocabulary and classes it made
                                  # no difference
output=class                      # output layer: class (class-factored, exact; ~(C + V/C) x H per token
                                  # instead of V x H: 7.9x softmax's training speed at 30k words; the
                                  # class LSTM with carry won the ablation) | softmax
classes=                          # word classes of output=class; empty: round(sqrt(V)), V of words.txt
epochs=                           # empty: rescore-train-lm's default
train_opts=                       # more rescore-train-lm options, e.g. "--optimizer adam --lr 5e-4"
seed=1                            # random seed of every training
device=auto                       # auto | cpu | cuda | cuda:N
check_only=false                  # true: check the options and exit (a recipe does so before its stage 1)
# End configuration section.

help_message="Train the neural LMs of a recipe (rescore-train-lm), each into <exp-dir>/<model>/.

Usage: $0 [options] <lm-data-dir> <exp-dir>
 e.g.: $0 --cmd \"\$cuda_cmd\" --models 'lstm lstm_pointer' --device cuda data/rescore exp/rescore
<lm-data-dir> has train.txt, valid.txt (one sentence per line, in conversation order) and
words.txt (the vocabulary, Kaldi's symbol table)."
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -eq 2 ] || usage_exit
lmdata=$1
dir=$2

# Every option, then the inputs (made by the recipe's earlier stages), before any training.
[ -n "$models" ] || fail "--models must name one or more of lstm, lstm_pointer, transformer, transformer_pointer"
for model in $models; do
  case $model in lstm|lstm_pointer|transformer|transformer_pointer) ;;
    *) fail "--models: unknown model '$model' (lstm, lstm_pointer, transformer or transformer_pointer)" ;;
  esac
done
for var in lstm_hidden lstm_layers transformer_hidden transformer_layers transformer_heads bptt history seed; do
  check_number "$var" 'int>=1'
done
check_bool memory_aug check_only
check_choice output class softmax
[ -n "$classes" ] && check_number classes 'int>=1'
[ -n "$epochs" ] && check_number epochs 'int>=1'
check_device device
check_programs "${cmd%% *}" rescore-train-lm
check_passed_options rescore-train-lm train_opts
$check_only && exit 0
check_files "$lmdata/train.txt" "$lmdata/valid.txt"
check_words_txt "$lmdata/words.txt"

for model in $models; do
  case $model in
    lstm|lstm_pointer)
      opts=(--arch lstm --hidden "$lstm_hidden" --layers "$lstm_layers") ;;
    transformer|transformer_pointer)
      opts=(--arch transformer --hidden "$transformer_hidden" --layers "$transformer_layers"
            --n-heads "$transformer_heads") ;;
  esac
  case $model in
    *_pointer) opts+=(--head pointer --history "$history")
               if $memory_aug; then opts+=(--memory-aug); fi ;;
    *) opts+=(--head softmax) ;;
  esac
  if [ "$output" = class ]; then
    opts+=(--output class)  # without --classes: round(sqrt(V)), V the words of words.txt
    if [ -n "$classes" ]; then opts+=(--classes "$classes"); fi
  else
    opts+=(--output softmax)
  fi
  [ -n "$epochs" ] && opts+=(--epochs "$epochs")
  echo "$0: training $model (log: $dir/$model/log/train.log)"
  mkdir -p "$dir/$model/log"
  # $train_opts is a list of options: it must split.
  # shellcheck disable=SC2086
  $cmd "$dir/$model/log/train.log" \
    rescore-train-lm --train "$lmdata/train.txt" --valid "$lmdata/valid.txt" --words-txt "$lmdata/words.txt" \
      --out-dir "$dir/$model" --bptt "$bptt" --seed "$seed" --device "$device" "${opts[@]}" $train_opts
done
echo "$0: done, the LMs are in $dir"
