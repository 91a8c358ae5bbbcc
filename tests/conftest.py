"""Shared test helpers: where the shared data lives, and a scratch copy of the small N-best fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (CI and fresh-check.sh provide it); never copied into the repo.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
NBEST_SMALL = FIXTURES / "nbest-small"


def shared_data_path(*parts: str) -> Path:
    """Path under ../shared/data; skips the calling test with a clear reason when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs {p} (the shared data beside the checkout, ../shared/data) which is absent")
    return p


@pytest.fixture
def shared_data() -> Path:
    """The ../shared/data folder (test skipped where it is absent)."""
    return shared_data_path()


@pytest.fixture
def nbest_small(tmp_path: Path) -> Path:
    """A writable copy of tests/fixtures/nbest-small (N-best archives, words.txt, data/)."""
    dst = tmp_path / "nbest-small"
    shutil.copytree(NBEST_SMALL, dst)
    return dst


def dead_pid() -> int:
    """The pid of a process that has ended (for a temporary name of a killed run)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                       check=True)
    return int(p.stdout)
