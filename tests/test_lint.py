"""The linters run clean: ruff (configured in pyproject.toml) over the Python of the repository.

shellcheck over the shell scripts runs in tests/test_recipes.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    r = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
