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
# (./run.sh --help lists every option.)  Each stage calls a step:
#   1 local/prepare_lm_text.sh   2 steps/make_vocab.sh   3 steps/train_lms.sh
#   4 steps/rescore_decode_dirs.sh (lmrescore_nbest.sh per decode dir)   5 steps/wer_table.sh
# (steps/ here is rescore's recipes/steps; Kaldi's is linked as ./steps).
# The options of the configuration section reach those steps by name (step_options):
# shellcheck disable=SC2034

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
decode_sets="train_dev eval2000"  # decode dirs to rescore (data/<set>_hires for scoring); the first is the
                                  # dev set of --tune
models="lstm lstm_pointer transformer transformer_pointer"
interpolate=                      # also rescore with these models interpolated, e.g.
                                  # lstm_pointer:transformer_pointer, into <decode-dir>_rescore_a+b
                                  # when every part is in $models; empty: none (in the ablation,
                                  # docs/benchmarks.md, it did not beat lstm_pointer alone)
mix=                              # shares of the interpolated models, e.g. 0.6,0.4; empty: equal
lstm_hidden=650                   # LSTM: 2 layers of 650
lstm_layers=2
transformer_hidden=512            # Transformer: 6 layers of 512, 8 attention heads
transformer_layers=6
transformer_heads=8
bptt=100                          # BPTT length T
history=100                       # pointer history L
memory_aug=true                   # the pointer models get memory augmentation (false: plain pointer)
output=class                      # output layer: class (class-factored, exact, 7.9x faster) | softmax
classes=                          # word classes of output=class; empty: round(sqrt(V)), V of words.txt
epochs=                           # empty: rescore-train-lm's default
train_opts=                       # more rescore-train-lm options, e.g. "--optimizer adam --lr 5e-4"
seed=1
N=100                             # hypotheses per utterance
inv_acwt=10                       # inverse acoustic scale of the N-best lists
weight=0.8                        # NN LM interpolation weight
state_carry=rescored              # none | first-pass | rescored
device=auto                       # auto | cpu | cuda | cuda:N
tune=true                         # tune the setting (NN LM weight, LMWT, penalty) of each model on the
                                  # first of decode_sets (dev) and rescore the others with it
tune_opts="--wips=-1:3:0.5"       # more rescore-tune options (its grids)
# End configuration section.

help_message="Switchboard: neural LM N-best rescoring of a finished Kaldi system (the top of $0
says what it reads and writes; steps/train_lms.sh --help and steps/rescore_decode_dirs.sh --help
say more of the options they share with it).

Usage: $0 [options]
 e.g.: $0 --stage 3 --stop-stage 4 --device cuda --models 'lstm lstm_pointer'"
# --help (every option below) before path.sh, which needs KALDI_ROOT
# shellcheck source=../../steps/libs/help.sh
. ../../steps/libs/help.sh
# shellcheck source=path.sh
. ./path.sh  # KALDI_ROOT, rescore's environment; links steps/ and utils/ to Kaldi's
# shellcheck source=cmd.sh
. ./cmd.sh
# shellcheck source=../../steps/libs/common.sh
. ../../steps/libs/common.sh
[ $# -eq 0 ] || usage_exit

recipe_dirs "$KALDI_ROOT/egs/swbd/s5c"  # kaldi_dir, steps (rescore's), lmdata
lang=$kaldi_dir/data/lang_$lm

# The finished Kaldi system this recipe builds on.
for f in "$kaldi_dir/data/$train_set/text" "$kaldi_dir/data/$train_set/segments" \
         "$kaldi_dir/data/$valid_set/text" "$kaldi_dir/data/$test_set/text" "$lang/words.txt" \
         ${fisher_text:+"$kaldi_dir/$fisher_text"}; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi SWBD system)" && exit 1
done
decodes=()  # data dir:decode dir of each set, in the Kaldi system
refs=()     # set:reference text:decode dir, for the WER table
for set in $decode_sets; do
  for f in "$kaldi_dir/$ac_model_dir/decode_${set}_$lm/num_jobs" "$kaldi_dir/data/${set}_hires/utt2spk"; do
    [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi SWBD system)" && exit 1
  done
  decodes+=("data/${set}_hires:$ac_model_dir/decode_${set}_$lm")
  refs+=("$set:$kaldi_dir/data/$set/text:$kaldi_dir/$ac_model_dir/decode_${set}_$lm")
done
check_programs rescore-nbest rescore-wer
# The options of stages 3 and 4 (this script's of the same names), checked before stage 1.
step_options "$steps/train_lms.sh"
train=("$steps/train_lms.sh" --cmd "$cuda_cmd" "${opts[@]}")
step_options "$steps/rescore_decode_dirs.sh"
rescore=("$steps/rescore_decode_dirs.sh" --cmd "$decode_cmd" --rescore-cmd "$cuda_cmd" "${opts[@]}")
check_stage "${train[@]}" "$lmdata" exp/rescore
check_stage "${rescore[@]}" "$kaldi_dir" "data/lang_$lm" exp/rescore "${decodes[@]}"

in_stage 1 "LM text in conversation and time order" &&
  local/prepare_lm_text.sh --swbd-copies "$swbd_copies" --test-data "$kaldi_dir/data/$test_set" \
    ${fisher_text:+--fisher-text "$kaldi_dir/$fisher_text"} \
    "$kaldi_dir/data/$train_set" "$kaldi_dir/data/$valid_set" "$lmdata"
in_stage 2 "vocabulary from $lang/words.txt" && "$steps/make_vocab.sh" "$lang" "$lmdata"
in_stage 3 "training $models" && "${train[@]}" "$lmdata" exp/rescore
in_stage 4 "rescoring the decode dirs of $decode_sets" &&
  "${rescore[@]}" "$kaldi_dir" "data/lang_$lm" exp/rescore "${decodes[@]}"
# Noise and laughter marks and <unk> are not words to score (Kaldi's sclite scoring of
# eval2000 drops them too; its figures, printed last, stay the reference).
in_stage 5 "WER tables" && "$steps/wer_table.sh" --models "$models" --interpolate "$interpolate" \
  --drop-words '^(\[[a-z_-]+\]|<unk>)$' "$lmdata/train.txt" exp/rescore/wer "${refs[@]}"
echo "$0: done"
