#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# WSJ: neural LM N-best rescoring with rescore, as in Li, Povey and Khudanpur,
# "Neural language modeling with implicit cache pointers" (Interspeech 2020).
#
# THIS RECIPE EXPECTS A FINISHED KALDI WSJ SYSTEM: $KALDI_ROOT/egs/wsj/s5 (or --kaldi-dir)
# run through its chain model (local/chain/run_tdnn.sh), with the dev93 and eval92 decode
# dirs rescored by the big-dictionary 4-gram (decode_bd_tgpr_<set>_fg, G.carpa in
# data/lang_test_bd_fgconst), the cleaned LM training text that local/wsj_extend_dict.sh
# writes (data/local/dict_nosp_larger/cleaned.gz), and the hires data dirs.  It reads that
# system's data/ and exp/ and writes:
#   data/rescore/                    LM text (train, valid, test) and vocabulary, here
#   exp/rescore/<model>/             the neural LMs, here
#   <kaldi-dir>/<ac-model-dir>/decode_bd_tgpr_<set>_fg_rescore_<model>/
#                                    rescored decode dirs beside the first-pass ones (Kaldi's
#                                    scoring looks for ../final.mdl), scored by local/score.sh
#   exp/rescore/wer/                 the final WER and per-bucket WER tables
#
# Models (--models): lstm, lstm_pointer, transformer, transformer_pointer: an LSTM or a
# Transformer body with a softmax or the implicit cache pointer head; the paper's sizes are
# the defaults below.  Run: ./run.sh [--stage N] [--kaldi-dir DIR] [--device cuda] ...
# (./run.sh --help lists every option.)  The stages: 1 local/prepare_lm_text.sh (LM text),
# then rescore's recipes/steps (Kaldi's steps/ is linked here as ./steps): 2 make_vocab.sh,
# 3 train_lms.sh, 4 rescore_decode_dirs.sh (lmrescore_nbest.sh per decode dir), 5 wer_table.sh.
# The configuration section's options reach those steps by name (step_options):
# shellcheck disable=SC2034

# Begin configuration section.
stage=0                           # first stage to run
stop_stage=5                      # last stage to run
kaldi_dir=                        # the finished Kaldi system; empty: $KALDI_ROOT/egs/wsj/s5
ac_model_dir=exp/chain/tdnn1g_sp  # its acoustic model dir (relative to kaldi_dir)
lm=bd_fgconst                     # the LM of the decode dirs: data/lang_test_$lm (G.carpa)
decode_dir_pattern=decode_bd_tgpr_SET_fg   # decode dir names, SET replaced by each set
lm_text=data/local/dict_nosp_larger/cleaned.gz  # LM training text (relative to kaldi_dir)
valid_every=500                   # one LM text line in this many held out for validation
test_set=test_eval92              # perplexity text only
decode_sets="dev93 eval92"        # decode dirs to rescore (data/test_<set>_hires for scoring); the first
                                  # is the dev set of --tune
models="lstm lstm_pointer transformer transformer_pointer"
interpolate=                      # also rescore with these models interpolated, e.g.
                                  # lstm_pointer:transformer_pointer, into <decode-dir>_rescore_a+b
                                  # when every part is in $models; empty: none (in the ablation,
                                  # docs/benchmarks.md, it did not beat lstm_pointer alone)
mix=                              # shares of the interpolated models, e.g. 0.6,0.4; empty: equal
lstm_hidden=650                   # LSTM: 2 layers of 650
lstm_layers=2
transformer_hidden=768            # Transformer: 6 layers of 768, 8 attention heads
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

help_message="WSJ: neural LM N-best rescoring of a finished Kaldi system (the top of $0 says what
it reads and writes; steps/train_lms.sh --help and steps/rescore_decode_dirs.sh --help say more
of the options they share with it).

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

recipe_dirs "$KALDI_ROOT/egs/wsj/s5"  # kaldi_dir, steps (rescore's), lmdata
lang=data/lang_test_$lm  # in kaldi_dir

# The finished Kaldi system this recipe builds on; the decode dirs and references of the sets.
for f in "$kaldi_dir/$lm_text" "$kaldi_dir/data/$test_set/text" "$kaldi_dir/$lang/words.txt"; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi WSJ system)" && exit 1
done
decodes=() refs=()
for set in $decode_sets; do
  decode=$ac_model_dir/${decode_dir_pattern/SET/$set}
  for f in "$kaldi_dir/$decode/num_jobs" "$kaldi_dir/data/test_${set}_hires/utt2spk" "$kaldi_dir/data/test_$set/text"; do
    [ ! -f "$f" ] && echo "$0: expected file $f to exist (a finished Kaldi WSJ system)" && exit 1
  done
  decodes+=("data/test_${set}_hires:$decode")
  refs+=("$set:$kaldi_dir/data/test_$set/text:$kaldi_dir/$decode")
done
# Stages 3 and 4 with this script's options of the same names, checked before stage 1.
step_options "$steps/train_lms.sh"
train=("$steps/train_lms.sh" --cmd "$cuda_cmd" "${opts[@]}")
check_stage "${train[@]}" "$lmdata" exp/rescore
step_options "$steps/rescore_decode_dirs.sh"
rescore=("$steps/rescore_decode_dirs.sh" --cmd "$decode_cmd" --rescore-cmd "$cuda_cmd" "${opts[@]}")
check_stage "${rescore[@]}" "$kaldi_dir" "$lang" exp/rescore "${decodes[@]}"
check_programs rescore-nbest rescore-wer

in_stage 1 "LM text" && local/prepare_lm_text.sh --valid-every "$valid_every" \
  --test-data "$kaldi_dir/data/$test_set" "$kaldi_dir/$lm_text" "$lmdata"
in_stage 2 "vocabulary from $lang/words.txt" && "$steps/make_vocab.sh" "$kaldi_dir/$lang" "$lmdata"
in_stage 3 "training $models" && "${train[@]}" "$lmdata" exp/rescore
in_stage 4 "rescoring the decode dirs of $decode_sets" && "${rescore[@]}" "$kaldi_dir" "$lang" exp/rescore "${decodes[@]}"
in_stage 5 "WER tables" && "$steps/wer_table.sh" --models "$models" --interpolate "$interpolate" \
  "$lmdata/train.txt" exp/rescore/wer "${refs[@]}"
echo "$0: done"
