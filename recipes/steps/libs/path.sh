# shellcheck shell=bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# The environment of the SWBD and WSJ recipes, sourced by their path.sh (Kaldi's egs/*/s5/path.sh)
# in the recipe's directory:
#   KALDI_ROOT    your Kaldi checkout (default ~/kaldi), with the finished Kaldi system in egs/;
#   RESCORE_VENV  the Python environment rescore is installed in (from its repository or its
#                 wheel: docs/getting-started.md); empty
#                 when rescore-nbest and rescore-train-lm are on PATH already.
# On the first run it links steps/ and utils/ to $KALDI_ROOT/egs/wsj/s5's, as Kaldi recipes do.
export KALDI_ROOT=${KALDI_ROOT:-$HOME/kaldi}
export RESCORE_VENV=${RESCORE_VENV:-}

if [ ! -f "$KALDI_ROOT/tools/config/common_path.sh" ]; then
  echo >&2 "path.sh: $KALDI_ROOT/tools/config/common_path.sh not found: set KALDI_ROOT to your Kaldi checkout"
  exit 1
fi
if [ ! -f utils/parse_options.sh ]; then
  ln -sfn "$KALDI_ROOT/egs/wsj/s5/steps" steps
  ln -sfn "$KALDI_ROOT/egs/wsj/s5/utils" utils
fi
# shellcheck disable=SC1091
[ -f "$KALDI_ROOT/tools/env.sh" ] && . "$KALDI_ROOT/tools/env.sh"
export PATH=$PWD/utils/:$KALDI_ROOT/tools/openfst/bin:$KALDI_ROOT/tools/sctk/bin:$PWD:$PATH
# shellcheck disable=SC1091
. "$KALDI_ROOT/tools/config/common_path.sh"
export LC_ALL=C
# The rescore-* commands at the end of PATH (they find their own Python) rather than activating
# the environment, so that Kaldi's scripts keep the python3 they had.
if [ -n "$RESCORE_VENV" ]; then export PATH=$PATH:$RESCORE_VENV/bin; fi
# Python's own thread pools would oversubscribe the CPUs when run.pl starts many jobs.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
