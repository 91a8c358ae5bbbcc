#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Kaldi's steps/pytorchnn/lmrescore_lattice_pytorchnn.sh, with its arguments and options, on
# rescore: a Kaldi recipe switches by changing the script's path.  The model Kaldi's
# steps/pytorchnn/train.py saved is imported once (rescore-import-kaldi-lm) and cached beside
# it, in <nn-model>.rescore/ as lmrescore_nbest_pytorchnn.sh caches it (import_model.sh);
# then ../lmrescore_lattice.sh does the work (the same path-cover method as Kaldi's script:
# prune, expand, path cover, NN LM scores, each arc's score from its best history).
#
# What differs from Kaldi's script (the reasons are in rescore/nbest/lattice.py):
#  - the paths of utterance k start from the LM state after the rescored best path of
#    utterance k-1 of the same conversation (--state-carry rescored, the default here; Kaldi
#    scores every path from an empty history: --state-carry none);
#  - arcs between the same two states, and paths with epsilon arcs (every lattice
#    nbest-to-lattice writes), get their own scores;
#  - Kaldi's lattice-add-nnlmscore is not needed.
# Kaldi's stages map to ours: 0 -> 1 (prune, expand), 1 -> 2 (path cover), 2 -> 3 (NN LM
# scores), 3 and 4 -> 4 (arc scores, old LM out).

# Begin configuration section.
model_type=Transformer # LSTM, GRU or Transformer
embedding_dim=768      # the model's sizes, as steps/pytorchnn/train.py was given them
hidden_dim=768
nlayers=6
nhead=8

inv_acwt=10            # inverse acoustic scale (Kaldi's LMWT) for pruning and the path cover
weight=0.8 # interpolation weight of a neural network LM with a N-gram LM
beam=5                 # lattice-prune beam
epsilon=0.5            # lattice-expand posterior threshold
oov_symbol="'<unk>'"   # the vocabulary's symbol for words outside it

cmd=run.pl             # how to run the jobs: run.pl, queue.pl, slurm.pl [options]
stage=0                # Stage of this script (Kaldi's numbering, 0-4), for partial reruns.
skip_scoring=false     # true: do not run local/score.sh
# rescore's own (not in Kaldi's script):
state_carry=rescored  # none (Kaldi's: every path from an empty history) | first-pass | rescored
device=auto           # auto | cpu | cuda | cuda:N, for rescore-nbest
rescore_opts=         # more options of ../lmrescore_lattice.sh, e.g. "--oov-penalty auto --max-tokens 4096"
# End configuration section.

help_message="Perform lattice rescoring with a PyTorch-trained neural language model (Kaldi's
steps/pytorchnn models), with rescore's engine, by Kaldi's path-cover method.  The neural LM is
interpolated with an N-gram LM during rescoring.  No OOV penalty unless --rescore-opts gives one
(--oov-penalty 0, as Kaldi's scorer).

Usage: $0 [options] <old-lang-dir> <nn-model> <vocab> <data-dir> <input-decode-dir> <output-decode-dir>
 e.g.: $0 --model-type LSTM --embedding-dim 650 --hidden-dim 650 --nlayers 2 \\
         data/lang_sw1_fsh_fg exp/pytorch_lstm/model.pt data/pytorchnn/words.txt \\
         data/eval2000_hires exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg_pytorch_lstm_lat
Run it from the Kaldi recipe directory, as Kaldi's script of this name, by its path in rescore."
needs="utils/int2sym.pl utils/split_data.sh"
# shellcheck source=../libs/common.sh
. "$(dirname "$0")/../libs/common.sh"

[ $# -eq 6 ] || usage_exit
oldlang=$1 nn_model=$2 vocab=$3 data=$4 indir=$5 dir=$6

check_number beam '>0'
check_number epsilon 0..1
check_choice state_carry none first-pass rescored
check_bool skip_scoring

# The imported model, cached beside the Kaldi one as the N-best script caches it (one cache,
# in <nn-model>.rescore/, for both: import_model.sh), after the checks of Kaldi's options and
# of the inputs.
step=$(dirname "$0")/../lmrescore_lattice.sh
# shellcheck source=import_model.sh
. "$(dirname "$0")/import_model.sh"
cache=  # set by import_checked
import_checked "$step" "$oldlang" "$nn_model" "$vocab" "$data" "$indir" "$dir" || exit 1

our_stage=$((stage + 1))
[ "$our_stage" -gt 4 ] && our_stage=4
# $rescore_opts holds options: it must split.
# shellcheck disable=SC2086
"$step" --cmd "$cmd" --stage "$our_stage" --inv-acwt "$inv_acwt" --weight "$weight" \
  --beam "$beam" --epsilon "$epsilon" --state-carry "$state_carry" --device "$device" --oov-penalty 0 \
  --skip-scoring "$skip_scoring" $rescore_opts \
  "$oldlang" "$cache/model.pt" "$data" "$indir" "$dir" || exit 1
exit 0
