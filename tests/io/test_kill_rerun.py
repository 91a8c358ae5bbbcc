"""kill -9 of every command that writes, at the points where its outputs are half done: the run
(a subprocess) kills itself (SIGKILL) at a named point of rescore.io.outdir (``RESCORE_KILL_AT``:
a temporary file written but not yet renamed, or a replaced dir's old version moved aside), then
the same command runs again. The rerun must succeed, leave what an uninterrupted run leaves (the
same bytes; for training the same weights, optimizer state and records), and nothing else: no
temporary file or dir, no lock, anywhere in the world.

The inputs are the bad-input suite's small world (tests/cli/test_bad_input.py's ``base``). The
uninterrupted run and the rerun go in-process (click's CliRunner), so that only the killed run
pays for a new interpreter."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

from click.testing import CliRunner

from rescore.io import outdir
from tests.cli.test_bad_input import K, LA, LC, M, NO_FLITE, P, S, T, W, base  # noqa: F401 (base: the fixture)
from tests.conftest import REPO_ROOT
from tests.train.test_train_resume import assert_same_run

ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
# what changes from one run to the next by design: when and by which process a manifest was written
VOLATILE = {"manifest.json": ("time", "written_by")}


def _outputs(path: Path) -> Dict[str, bytes]:
    """{relative path: bytes} of an output file or dir (manifest.json without its volatile fields)."""
    if not path.exists():
        return {}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    out = {}
    for p in files:
        data = p.read_bytes()
        if p.name in VOLATILE:
            d = json.loads(data)
            for k in VOLATILE[p.name]:
                d.pop(k, None)
            data = json.dumps(d, sort_keys=True).encode()
        out[str(p.relative_to(path)) if p != path else p.name] = data
    return out


def _leftovers(world: Path) -> List[str]:
    return [str(p.relative_to(world)) for p in world.rglob("*")
            if outdir.is_temporary(p.name) or p.name == outdir.LOCK_NAME]


def _args(args: Sequence[str], world: Path) -> List[str]:
    return [a.replace("{w}", str(world)) for a in args]


def _killed(module: str, args: Sequence[str], world: Path, kill_at: str) -> subprocess.CompletedProcess:
    """The command in a subprocess that kills itself at ``kill_at``."""
    return subprocess.run([sys.executable, "-m", module, *_args(args, world)],
                          env=dict(ENV, **{outdir.KILL_ENV: kill_at}), capture_output=True, text=True, timeout=300)


def _run(module: str, args: Sequence[str], world: Path):
    """The command in-process (no kill point: the environment of the tests has none)."""
    import importlib

    assert outdir.KILL_ENV not in os.environ
    main = getattr(importlib.import_module(module), "convert" if module.endswith("convert") else "main")
    return CliRunner().invoke(main, _args(args, world), catch_exceptions=False)


# (id, module, arguments, the output they write, kill points, what the world needs first)
# Kill points: "write:N", the N-th file renamed into place; "swap:1", an earlier output dir moved
# aside, the new one not yet in. "again": the killed run writes over an uninterrupted run's output.
CASES = [
    ("nbest", "rescore.cli.nbest", ["{w}/nb", "{w}/out", "--data-dir", "{w}/nb/data", "--model", "{w}/model.pt",
                                    "--device", "cpu"], "out", ["write:1", "write:4 again"], None),
    ("nbest-tsv", "rescore.cli.nbest", ["{w}/n.tsv", "{w}/out", "--data-dir", "{w}/nb/data"], "out",
     ["write:3"], "tsv"),
    ("convert-to-file", "rescore.cli.convert", ["{w}/nb", "{w}/n.tsv"], "n.tsv", ["write:1 again"], None),
    ("convert-to-kaldi", "rescore.cli.convert", ["{w}/n.tsv", "{w}/kaldi", "--to", "kaldi"], "kaldi",
     ["write:3 again"], "tsv"),
    ("convert-to-espnet", "rescore.cli.convert", ["{w}/n.tsv", "{w}/espnet", "--to", "espnet"], "espnet",
     ["write:2"], "tsv"),
    ("tune", "rescore.cli.tune", ["{w}/nb", "--data-dir", "{w}/nb/data", "--nn-costs", "{w}/lmwt.nn", "--weights",
                                  "0,0.5", "--inv-acwts", "8,10", "--wips", "0", "--params-out", "{w}/p.json"],
     "p.json", ["write:1"], None),
    ("wer", "rescore.cli.wer", [*W, "--report", "{w}/wer.json"], "wer.json", ["write:1 again"], None),
    ("ppl", "rescore.cli.ppl", [*P, "--report", "{w}/ppl.json"], "ppl.json", ["write:1"], None),
    ("lattice-cover", "rescore.cli.lattice", LC, "c.txt", ["write:1"], None),
    ("lattice-apply", "rescore.cli.lattice", LA, "r.txt", ["write:1 again"], None),
    ("import-kaldi-lm", "rescore.cli.import_kaldi_lm", K, "imp", ["write:1"], None),
    ("train-lm", "rescore.cli.train_lm", T, "out", ["write:1", "write:3"], None),
    ("make-nbest", "rescore.cli.make_nbest", M, "out", ["write:3"], "pocketsphinx"),
    ("tts-data", "rescore.cli.tts_data", S, "out", ["write:2"], "flite"),
    ("import-lm", "rescore.cli.import_lm", ["{w}/gpt2", "{w}/imported"], "imported", ["write:1", "swap:1 again"],
     "gpt2"),
]

# how a killed run is run again where that is not the same command: a training goes on with --resume
# (a fresh start into its dir is refused: it would overwrite what may be days of training)
RERUN = {"train-lm": ["--resume"]}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_killed_run_leaves_nothing_a_rerun_does_not_clean(case, base, tmp_path, request):  # noqa: F811
    name, module, args, output, points, needs = case
    world = tmp_path / "w"
    shutil.copytree(base, world)
    if needs == "pocketsphinx":
        pytest.importorskip("pocketsphinx", reason="the mini extra (pocketsphinx) is not installed")
    if needs == "flite" and NO_FLITE:
        pytest.skip(NO_FLITE)
    if needs == "gpt2":
        shutil.copytree(request.getfixturevalue("tiny_gpt2"), world / "gpt2")
    if needs == "tsv":
        r = _run("rescore.cli.convert", ["{w}/nb", "{w}/n.tsv"], world)
        assert r.exit_code == 0, r.output
    target = world / output
    r = _run(module, args, world)
    assert r.exit_code == 0, r.output
    whole = _outputs(target)
    assert whole
    if name == "train-lm":
        shutil.copytree(target, tmp_path / "whole")
    for point in points:
        point, _, again = point.partition(" ")
        if not again:  # (else: the killed run replaces the uninterrupted run's output)
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        r = _killed(module, args, world, point)
        assert r.returncode == -signal.SIGKILL, f"{name} did not reach {point}: {r.stderr[-3000:]}"
        r = _run(module, [*args, *RERUN.get(name, ())], world)
        assert r.exit_code == 0, f"the rerun after a kill at {point}: {r.output}"
        if name == "train-lm":  # (a checkpoint records the time: the same weights, state and records)
            assert_same_run(tmp_path / "whole", target)
        else:
            assert _outputs(target) == whole, f"the rerun after a kill at {point} differs from an uninterrupted run"
        assert not _leftovers(world), (point, _leftovers(world))
