"""Fault tests: kill -9 at random points of rescore-nbest and rescore-train-lm, and two writers
into one dir. What is left must be complete and identical to an uninterrupted run, or clearly
marked incomplete (a manifest or train.json that says so); a rerun (or --resume) then finishes
to the uninterrupted result. (kill -9 of training with exact resume: test_train_resume.py.)"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescore.io import outdir

from tests.conftest import NBEST_SMALL

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
OUTPUTS = ("lmwt.nn", "lmwt.interp", "text")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    w = tmp_path_factory.mktemp("faults")
    shutil.copytree(NBEST_SMALL, w / "nb")
    words = [l.split()[0] for l in (NBEST_SMALL / "words.txt").read_text().splitlines()]
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=8, layers=1, dropout=0.0),
                        Vocabulary(["<eos>", "<unk>"] + [x for x in words if not x.startswith("<")]))
    save_checkpoint(model, w / "model.pt")
    ref = w / "ref"
    r = subprocess.run(_nbest_cmd(w, ref), env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return w


def _nbest_cmd(w: Path, out: Path):
    return [sys.executable, "-m", "rescore.cli.nbest", str(w / "nb"), str(out), "--data-dir",
            str(w / "nb" / "data"), "--model", str(w / "model.pt"), "--device", "cpu"]


def _outputs(d: Path):
    return {n: (d / n).read_bytes() for n in OUTPUTS if (d / n).exists()}


def _assert_complete_or_marked(out: Path, ref: Path) -> str:
    """'nothing', 'incomplete' (marked so) or 'complete' (and then identical to ref)."""
    if not out.exists():
        return "nothing"
    files = [p.name for p in out.iterdir() if not outdir.is_temporary(p.name)
             and p.name != outdir.LOCK_NAME]
    manifest = outdir.read_manifest(out)
    if manifest is None:
        assert not files, f"files without a manifest saying whether they are complete: {files}"
        return "nothing"
    if not manifest.get("complete"):
        return "incomplete"
    assert _outputs(out) == _outputs(ref), "a complete set that differs from the uninterrupted run"
    return "complete"


@pytest.mark.slow
def test_kill_9_rescore_nbest_at_random_points(world, tmp_path):
    rng = random.Random()
    seen = []
    # where to kill: a random time, just after OUT_DIR appears, just after a first output appears
    for k, when in enumerate(["time", "dir", "output"]):
        out = tmp_path / f"out{k}"
        proc = subprocess.Popen(_nbest_cmd(world, out), env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        t0, deadline = time.time(), time.time() + 120
        delay = rng.uniform(0.2, 3.0)
        while proc.poll() is None and time.time() < deadline:
            hit = {"time": time.time() - t0 >= delay, "dir": out.exists(),
                   "output": any((out / n).exists() for n in OUTPUTS)}[when]
            if hit:
                time.sleep(rng.uniform(0, 0.02))
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
        proc.wait(timeout=60)
        seen.append(_assert_complete_or_marked(out, world / "ref"))
        # a rerun into the same dir: no lock left behind, temporaries cleaned, the same result
        r = subprocess.run(_nbest_cmd(world, out), env=ENV, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert _assert_complete_or_marked(out, world / "ref") == "complete"
        assert not [p for p in out.iterdir() if outdir.is_temporary(p.name)]
    assert seen  # (which states were hit varies from run to run; each one was checked)


def test_second_writer_fails_fast(world, tmp_path):
    """A dir another run is writing (its lock held): refused at once, nothing written."""
    import fcntl

    from rescore.cli.nbest import main

    out = tmp_path / "out"
    out.mkdir()
    with open(out / outdir.LOCK_NAME, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        f.write("pid 12345\n")
        f.flush()
        t0 = time.time()
        r = CliRunner().invoke(main, [str(world / "nb"), str(out), "--data-dir",
                                      str(world / "nb" / "data"), "--model",
                                      str(world / "model.pt"), "--device", "cpu"])
        assert time.time() - t0 < 30
        assert r.exit_code == 1 and "error: " in r.output and str(out) in r.output, r.output
        assert "pid 12345" in r.output
        assert sorted(p.name for p in out.iterdir()) == [outdir.LOCK_NAME]
    r = CliRunner().invoke(main, [str(world / "nb"), str(out), "--data-dir",
                                  str(world / "nb" / "data"), "--model", str(world / "model.pt"),
                                  "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert _assert_complete_or_marked(out, world / "ref") == "complete"


@pytest.mark.slow
def test_two_writers_at_once(world, tmp_path):
    """Two runs started together into one dir: one may be refused (a lock error), never both
    succeeding into a mixed set; the dir ends complete and identical to one run."""
    out = tmp_path / "out"
    procs = [subprocess.Popen(_nbest_cmd(world, out), env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in results)
    assert codes in ([0, 0], [0, 1]), results
    for c, err in results:
        if c == 1:
            assert "error: " in err and "Traceback" not in err and str(out) in err, err
    assert _assert_complete_or_marked(out, world / "ref") == "complete"


def test_second_trainer_fails_fast(tmp_path):
    """rescore-train-lm into a dir another training holds: refused at once, nothing written."""
    import fcntl

    from rescore.cli.train_lm import main

    (tmp_path / "t.txt").write_text("a b c\nb c a\n" * 20)
    out = tmp_path / "out"
    out.mkdir()
    with open(out / outdir.LOCK_NAME, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = CliRunner().invoke(main, ["--train", str(tmp_path / "t.txt"), "--valid",
                                      str(tmp_path / "t.txt"), "--out-dir", str(out),
                                      "--hidden", "8", "--layers", "1", "--bptt", "4",
                                      "--batch-size", "2", "--epochs", "1", "--device", "cpu"])
        assert r.exit_code == 1 and "error: " in r.output and str(out) in r.output, r.output
        assert sorted(p.name for p in out.iterdir()) == [outdir.LOCK_NAME]
