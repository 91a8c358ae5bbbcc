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
N=10
model_type=Transformer # LSTM, GRU or Transformer
embedding_dim=768
hidden_dim=768
nlayers=6
nhead=8

inv_acwt=10
weight=0.8 # interpolation weight of a neural network LM with a N-gram LM
oov_symbol="'<unk>'"

cmd=run.pl
use_phi=false  # Kaldi's phi-matcher removal of the old LM: not implemented (true is an error)
test=false     # Kaldi's testing branch: not implemented (true is an error)
stage=1        # Stage of this script (Kaldi's numbering, 1-8), for partial reruns.
skip_scoring=false
keep_ali=true
# Not in Kaldi's script:
carry=rescored   # rescored | kaldi | none (see the top of this script)
device=auto      # auto | cpu | cuda, for rescore-nbest
rescore_cmd=     # how to run the rescore-nbest jobs (e.g. "queue.pl --gpu 1"); empty: $cmd
rescore_opts=    # more rescore-nbest options (rescore-nbest --help)
# End configuration section.

echo "$0 $*"  # Print the command line for logging

set -eo pipefail
# shellcheck disable=SC1091
[ -f ./path.sh ] && . ./path.sh
# shellcheck disable=SC1091
. utils/parse_options.sh
set -u

if [ $# != 6 ]; then
  echo "Perform N-best rescoring with a PyTorch-trained neural language model (Kaldi's"
  echo "steps/pytorchnn models), with rescore's engine.  The neural LM is interpolated with"
  echo "an N-gram LM during rescoring."
  echo ""
  echo "Usage: $0 [options] <old-lang-dir> <nn-model> <vocab> <data-dir> <input-decode-dir> <output-decode-dir>"
  echo " e.g.: $0 --N 20 --model-type LSTM --embedding-dim 650 --hidden-dim 650 --nlayers 2 \\"
  echo "         data/lang_sw1_fsh_fg exp/pytorch_lstm/model.pt data/pytorchnn/words.txt \\"
  echo "         data/eval2000_hires exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg_pytorch_lstm_nbest"
  echo "Main options (defaults in the configuration section of this script):"
  echo "  --N <N>                        # Value of N in N-best rescoring (default: $N)"
  echo "  --model-type <LSTM|GRU|Transformer> --embedding-dim <d> --hidden-dim <d> --nlayers <n> --nhead <n>"
  echo "                                 # the model, as steps/pytorchnn/train.py was given it"
  echo "  --inv-acwt <inv-acwt>          # LM scale for the N-best lists (default: $inv_acwt)"
  echo "  --weight <w>                   # neural LM weight (default: $weight)"
  echo "  --oov-symbol <word>            # OOV symbol of the vocabulary (default: $oov_symbol)"
  echo "  --cmd <run.pl|queue.pl [opts]> # how to run jobs."
  echo "  --carry <rescored|kaldi|none>  # state carry of an LSTM/GRU (default: $carry)"
  echo "  --device <auto|cpu|cuda>       # where rescore-nbest runs (default: $device)"
  exit 1
fi

oldlang=$1
nn_model=$2
vocab=$3
data=$4
indir=$5
dir=$6

# Kaldi's options we do not implement: say so rather than do something else.
$use_phi && echo "$0: --use-phi true is not implemented (phi-matcher old-LM removal); use Kaldi's script" && exit 1
$test && echo "$0: --test true is not implemented (Kaldi's testing branch); use Kaldi's script" && exit 1
case "$carry" in
  rescored) state_carry=rescored; carry_scope=data ;;
  kaldi) state_carry=first-pass; carry_scope=job ;;
  none) state_carry=none; carry_scope=data ;;
  *) echo "$0: --carry must be rescored, kaldi or none, got '$carry'"; exit 1 ;;
esac
case "$model_type" in
  LSTM|GRU) ;;
  Transformer) state_carry=none ;;
  *) echo "$0: --model-type must be LSTM, GRU or Transformer, got '$model_type'"; exit 1 ;;
esac
for f in "$nn_model" "$vocab" "$indir/lat.1.gz"; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist." && exit 1
done
here=$(dirname "$0")
step=$here/../lmrescore_nbest.sh
[ ! -f "$step" ] && echo "$0: expected $step beside this script's directory" && exit 1
[ ! -f "$here/import_model.sh" ] && echo "$0: expected $here/import_model.sh beside this script" && exit 1
command -v rescore-import-kaldi-lm >/dev/null 2>&1 ||
  { echo "$0: not found on PATH: rescore-import-kaldi-lm (activate rescore's environment in path.sh)"; exit 1; }

# Kaldi passes --oov "$oov_symbol" through run.pl, whose shell strips the quotes of its default.
oov=${oov_symbol#\'}
oov=${oov%\'}

# Kaldi's stages 1-8 -> ours: 1 lattice-to-nbest, 2 old-LM removal, 3-4 archives, 5 words_text,
# 6-7 neural LM and interpolation, 8 lattices.
case "$stage" in
  0|1) our_stage=1 ;; 2) our_stage=2 ;; 3|4) our_stage=3 ;; 5) our_stage=4 ;;
  6|7) our_stage=5 ;; 8) our_stage=6 ;; *) our_stage=7 ;;
esac

# 1. The imported model, cached beside the Kaldi one (import_model.sh, shared with the lattice script).
# shellcheck disable=SC1091
. "$here/import_model.sh"
cache=  # set by import_kaldi_model
import_kaldi_model "$nn_model" "$vocab" "$dir" "$model_type" "$embedding_dim" "$hidden_dim" \
  "$nlayers" "$nhead" "$oov" || exit 1

# 2. Our step, with Kaldi's settings.
bash "$step" --cmd "$cmd" --rescore-cmd "${rescore_cmd:-$cmd}" --stage "$our_stage" --N "$N" \
  --inv-acwt "$inv_acwt" --weight "$weight" --wip 0 --oov-penalty 0 \
  --state-carry "$state_carry" --carry-scope "$carry_scope" --device "$device" \
  --rescore-opts "$rescore_opts" --keep-ali "$keep_ali" --skip-scoring "$skip_scoring" \
  "$oldlang" "$cache/model.pt" "$data" "$indir" "$dir"

# Kaldi's name for the interpolated costs, for scripts that read it.
nj=$(< "$indir/num_jobs")
for n in $(seq "$nj"); do
  cp "$dir/archives.$n/lmwt.interp" "$dir/archives.$n/lmwt.interp.$weight"
done
exit 0
