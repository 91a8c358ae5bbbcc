# shellcheck shell=bash
# Environment of the recipe, as in Kaldi's egs/*/s5/path.sh.
# KALDI_ROOT: your Kaldi checkout, with the finished WSJ system in egs/wsj/s5.
# RESCORE_VENV: the Python environment rescore is installed in (pip install rescore);
# leave it empty if rescore-nbest and rescore-train-lm are on PATH already.
export KALDI_ROOT=${KALDI_ROOT:-$HOME/kaldi}
export RESCORE_VENV=${RESCORE_VENV:-}

if [ ! -f "$KALDI_ROOT/tools/config/common_path.sh" ]; then
  echo >&2 "path.sh: $KALDI_ROOT/tools/config/common_path.sh not found: set KALDI_ROOT to your Kaldi checkout"
  exit 1
fi
# shellcheck disable=SC1091
[ -f "$KALDI_ROOT/tools/env.sh" ] && . "$KALDI_ROOT/tools/env.sh"
export PATH=$PWD/utils/:$KALDI_ROOT/tools/openfst/bin:$KALDI_ROOT/tools/sctk/bin:$PWD:$PATH
# shellcheck disable=SC1091
. "$KALDI_ROOT/tools/config/common_path.sh"
export LC_ALL=C
# shellcheck disable=SC1091
[ -n "$RESCORE_VENV" ] && . "$RESCORE_VENV/bin/activate"
# Python's own thread pools would oversubscribe the CPUs when run.pl starts many jobs.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
