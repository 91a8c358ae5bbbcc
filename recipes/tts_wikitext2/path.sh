# Sourced by run.sh: the toolkit from this checkout, with the Python that has it installed.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export repo_root
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
# $PYTHON when set (tests), else the active venv's python (README), else python3.
if [ -n "${PYTHON:-}" ]; then
  export python=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ]; then
  export python=python
else
  export python=python3
fi
# Decoding runs --nj processes; each single-threaded so they do not oversubscribe cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
