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


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory) -> Path:
    """A random 1-layer, 16-dim GPT-2 with a 300-token byte-level BPE over the small N-best
    fixture's words, as save_pretrained writes it (skipped without the hf extra)."""
    pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
    pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")
    from tools.bench import bench_hf

    words = [w.split()[0] for w in (NBEST_SMALL / "words.txt").read_text().splitlines()]
    lines = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 4
    return bench_hf.save_random_gpt2(tmp_path_factory.mktemp("hf") / "gpt2", lines, vocab=300, layers=1, dim=16,
                                     heads=2, positions=64, scale=4.0)
