#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Drop-in for Kaldi's steps/pytorchnn/lmrescore_nbest_pytorchnn.sh: the same six arguments and
# the same options, so a Kaldi recipe (e.g. egs/swbd/s5c/local/pytorchnn/run_nnlm.sh) switches
# by changing the script's path.  The model is one Kaldi's steps/pytorchnn/train.py trained.
#
#   1. rescore-import-kaldi-lm turns <nn-model> and <vocab> into a rescore checkpoint, once:
#      it is cached beside the model, in <nn-model>.rescore/ (import.opts records the options
#      it was made with; a newer model or other options make a new one).
#   2. ../lmrescore_nbest.sh (this script's directory's parent) rescores with it, with Kaldi's
#      settings: --N, --inv-acwt, --weight, the same old-LM removal (G.carpa or G.fst), no OOV
#      penalty (Kaldi's scorer maps OOV words to --oov-symbol and adds nothing), no word
#      insertion penalty, and writes lat.JOB.gz (and archives.JOB/lmwt.interp.<weight>, Kaldi's
#      name) that local/score.sh scores as before.
#
# State carry (--carry, not one of Kaldi's options):
#   rescored  (default) an LSTM/GRU utterance starts from the state after the previous
#             utterance's rescored best hypothesis (by the interpolated cost), along each
#             recording of the data dir in time order (segments, else utt2spk).  The default
#             because the history is then what the output says was said, the state never reads
#             padding, and recordings do not leak into each other.
#   kaldi     what Kaldi's compute_sentence_scores.py does: from the first-pass best (rank 1) of
#             the previous utterance of the same job, along the job's lattice archive in order,
#             across recordings; without its flaw (its carried state ran over the batch's
#             padding when rank 1 was shorter than the longest hypothesis).
#   none      every utterance from the zero state.
# A Transformer is scored without carry whatever --carry says, as Kaldi does: its absolute
# positions start at 0 in every sentence, and the model saw only positions below train.py's
# --seq_len.
#
# Kaldi's options this script does not implement give an error that names them:
# --use-phi true (phi-matcher removal for lattices rescored by lmrescore.sh) and --test true.

# Begin configuration section.
N=10                   # hypotheses per utterance
model_type=Transformer # LSTM, GRU or Transformer
embedding_dim=768      # the model's sizes, as steps/pytorchnn/train.py was given them
hidden_dim=768
nlayers=6
nhead=8

inv_acwt=10            # inverse acoustic scale (Kaldi's LMWT) for the N-best lists
weight=0.8 # interpolation weight of a neural network LM with a N-gram LM
oov_symbol="'<unk>'"   # the vocabulary's symbol for words outside it

cmd=run.pl             # how to run the jobs: run.pl, queue.pl, slurm.pl [options]
use_phi=false  # Kaldi's phi-matcher removal of the old LM: not implemented (true is an error)
test=false     # Kaldi's testing branch: not implemented (true is an error)
stage=1        # Stage of this script (Kaldi's numbering, 1-8), for partial reruns.
skip_scoring=false     # true: do not run local/score.sh
keep_ali=true          # false: drop the alignments from the N-best (smaller archives)
# Not in Kaldi's script:
carry=rescored   # whose state starts each utterance of an LSTM/GRU: rescored = after the previous
                 # utterance's rescored best, along each recording (segments, else utt2spk);
                 # kaldi = after the previous utterance's first-pass best (rank 1), along the
                 # job's lattice archive across recordings, as Kaldi's scorer; none = the zero
                 # state. A Transformer is scored without carry, as in Kaldi.
device=auto      # auto | cpu | cuda | cuda:N, for rescore-nbest
rescore_cmd=     # how to run the rescore-nbest jobs (e.g. "queue.pl --gpu 1"); empty: --cmd
one_process=auto # true: every job in one rescore-nbest process (torch and the model loaded
                 # once, the jobs batched together: less CPU, one process's threads); false:
                 # one process per job, as Kaldi's script; auto: true for run.pl
                 # (../lmrescore_nbest.sh --one-process)
rescore_opts=    # more rescore-nbest options (rescore-nbest --help)
# End configuration section.

help_message="Perform N-best rescoring with a PyTorch-trained neural language model (Kaldi's
steps/pytorchnn models), with rescore's engine.  The neural LM is interpolated with an N-gram LM
during rescoring.  No OOV penalty (--oov-penalty 0), as Kaldi's scorer: words outside the
vocabulary are scored as --oov-symbol.

Usage: $0 [options] <old-lang-dir> <nn-model> <vocab> <data-dir> <input-decode-dir> <output-decode-dir>
 e.g.: $0 --N 20 --model-type LSTM --embedding-dim 650 --hidden-dim 650 --nlayers 2 \\
         data/lang_sw1_fsh_fg exp/pytorch_lstm/model.pt data/pytorchnn/words.txt \\
         data/eval2000_hires exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg_pytorch_lstm_nbest
Run it from the Kaldi recipe directory, as Kaldi's script of this name, by its path in rescore.
It imports <nn-model> (Kaldi's steps/pytorchnn/train.py model, its sizes given by --model-type,
--embedding-dim, --hidden-dim, --nlayers, --nhead) once with rescore-import-kaldi-lm, cached in
<nn-model>.rescore/, then runs ../lmrescore_nbest.sh with Kaldi's settings: lattices -> N-best ->
old LM removed (G.carpa or G.fst) -> NN LM costs -> rescored lat.JOB.gz -> local/score.sh, and
prints the first pass's and the rescored WER at its end."
needs="utils/int2sym.pl utils/split_data.sh"
# shellcheck source=../libs/common.sh
. "$(dirname "$0")/../libs/common.sh"

[ $# -eq 6 ] || usage_exit
oldlang=$1 nn_model=$2 vocab=$3 data=$4 indir=$5 dir=$6

# Kaldi's options we do not implement: say so rather than do something else.
check_bool use_phi test
$use_phi && fail "--use-phi true is not implemented (phi-matcher old-LM removal); use Kaldi's script"
$test && fail "--test true is not implemented (Kaldi's testing branch); use Kaldi's script"
case "$carry" in
  rescored) state_carry=rescored; carry_scope=data ;;
  kaldi) state_carry="first-pass"; carry_scope=job ;;
  none) state_carry=none; carry_scope=data ;;
  *) fail "--carry must be rescored, kaldi or none, got '$carry'" ;;
esac
check_number N 'int>=1'
check_bool keep_ali skip_scoring
check_choice one_process auto true false
[ "$model_type" = Transformer ] && state_carry=none
# Kaldi's stages 1-8 -> ours: 1 lattice-to-nbest, 2 old-LM removal, 3-4 archives, 5 words_text,
# 6-7 neural LM and interpolation, 8 lattices.
case "$stage" in
  0|1) our_stage=1 ;; 2) our_stage=2 ;; 3|4) our_stage=3 ;; 5) our_stage=4 ;;
  6|7) our_stage=5 ;; 8) our_stage=6 ;; *) our_stage=7 ;;
esac

# 1. The imported model, cached beside the Kaldi one (import_model.sh, shared with the lattice
# script), after the checks of Kaldi's options and of the inputs.
step=$(dirname "$0")/../lmrescore_nbest.sh
# shellcheck source=import_model.sh
. "$(dirname "$0")/import_model.sh"
cache=  # set by import_checked
import_checked "$step" "$oldlang" "$nn_model" "$vocab" "$data" "$indir" "$dir" || exit 1

# 2. Our step, with Kaldi's settings.
bash "$step" --cmd "$cmd" --rescore-cmd "${rescore_cmd:-$cmd}" --stage "$our_stage" --N "$N" \
  --inv-acwt "$inv_acwt" --weight "$weight" --wip 0 --oov-penalty 0 \
  --state-carry "$state_carry" --carry-scope "$carry_scope" --device "$device" \
  --rescore-opts "$rescore_opts" --one-process "$one_process" --keep-ali "$keep_ali" \
  --skip-scoring "$skip_scoring" \
  "$oldlang" "$cache/model.pt" "$data" "$indir" "$dir"

# Kaldi's name for the interpolated costs, for scripts that read it.
for n in $(seq "$nj"); do
  cp "$dir/archives.$n/lmwt.interp" "$dir/archives.$n/lmwt.interp.$weight"
done
exit 0
