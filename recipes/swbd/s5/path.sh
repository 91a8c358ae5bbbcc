# shellcheck shell=bash
# Environment of the recipe, as in Kaldi's egs/*/s5/path.sh: KALDI_ROOT, your Kaldi checkout
# with the finished Switchboard system in egs/swbd/s5c, and RESCORE_VENV, the Python environment
# rescore is installed in (leave it empty if the rescore-* commands are on PATH already).
# Set them here or in your environment; the rest is shared with the other recipes.
export KALDI_ROOT=${KALDI_ROOT:-$HOME/kaldi}
export RESCORE_VENV=${RESCORE_VENV:-}
# shellcheck source=../../steps/libs/path.sh
. ../../steps/libs/path.sh
