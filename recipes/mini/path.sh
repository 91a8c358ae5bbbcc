# Source from recipes/mini: the toolkit from this checkout, with the Python that has it installed.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
# The venv's python when one is active (README), else python3.
python=${PYTHON:-python3}
command -v python >/dev/null 2>&1 && [ -n "${VIRTUAL_ENV:-}" ] && python=python
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
