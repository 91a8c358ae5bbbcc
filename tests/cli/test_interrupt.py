"""Ctrl-C (SIGINT) on real runs, the signal sent once their progress has started: rescore-nbest
on the dev N-best set with a small model, and rescore-train-lm (which has a handler of its own:
it stops after the step in progress, with its last checkpoint saved). Each command exits 130,
its log says "interrupted" (the progress line and the error line, never "done"), and nothing is
left half-written: no temporary file, no lock, and for rescore-nbest no output at all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import shared_data_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dev_model(tmp_path_factory):
    """A random LSTM over the dev set's 3000 commonest hypothesis words (enough work for a run
    that lasts many progress intervals)."""
    dev = shared_data_path("tts-wikitext2-dev")
    pytest.importorskip("torch")
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    counts = Counter(w for line in (dev / "nbest" / "words_text").read_text().splitlines()
                     for w in line.split()[1:])
    vocab = Vocabulary(["<eos>", "<unk>"] + [w for w, _ in counts.most_common(3000)])
    path = tmp_path_factory.mktemp("nnlm") / "model.pt"
    save_checkpoint(build_model(ModelConfig(arch="lstm", hidden=64, layers=1), vocab).eval(), path)
    return dev, path


def interrupt(cmd, log: Path, pattern: str) -> int:
    """Run cmd with stderr to log, send SIGINT once pattern is in the log; its exit status."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", RESCORE_PROGRESS_SECONDS="0.2")
    with open(log, "w") as err:
        # SIGINT as a terminal's Ctrl-C delivers it (the default disposition, whatever pytest's is)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            text = wait_for(pattern, log, proc, 240)
            assert proc.poll() is None, f"the run ended before it could be interrupted:\n{text}"
            assert re.search(pattern, text, re.M), text
            proc.send_signal(signal.SIGINT)
            return proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def assert_interrupted(rc: int, text: str) -> None:
    assert rc == 130, text
    assert "error: interrupted" in text
    progress_lines = [line for line in text.splitlines() if "rescore.progress" in line]
    assert progress_lines and re.search(r", interrupted(;|$)", progress_lines[-1]), text
    assert not re.search(r"rescore.progress INFO: .*, done", text), text
    assert "Traceback" not in text


def wait_for(pattern: str, log: Path, proc: subprocess.Popen, seconds: float) -> str:
    """Poll the log file until pattern appears (or the process ends, or time is up)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        text = log.read_text() if log.exists() else ""
        if re.search(pattern, text, re.M) or proc.poll() is not None:
            return text
        time.sleep(0.1)
    return log.read_text()


def test_sigint_mid_run_exits_130_says_interrupted_and_leaves_nothing_half_written(tmp_path, dev_model):
    dev, model = dev_model
    out = tmp_path / "out"
    log = tmp_path / "stderr.log"
    cmd = [sys.executable, "-m", "rescore.cli.nbest", str(dev / "nbest"), str(out), "--data-dir", str(dev / "data"),
           "--words-txt", str(dev / "lang" / "words.txt"), "--model", str(model), "--device", "cpu",
           "--max-tokens", "512"]
    # the scoring has started: a progress line of hypotheses (not yet at 100%)
    rc = interrupt(cmd, log, r"rescore.progress INFO: .*\d+/\d+ hyp \((?!100%)")
    assert_interrupted(rc, log.read_text())
    # no output, no temporary or lock file; at most a manifest that says the set is incomplete
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert set(left) <= {"manifest.json"}, left
    if left:
        assert '"complete": false' in (out / "manifest.json").read_text()


def test_sigint_stops_training_with_a_whole_checkpoint_and_exit_130(tmp_path):
    from rescore.io.files import is_temporary
    from tests.train.test_train import write_corpus

    write_corpus(tmp_path / "train.txt", 3000, 1)
    write_corpus(tmp_path / "valid.txt", 100, 2)
    out = tmp_path / "lm"
    cmd = [sys.executable, "-m", "rescore.cli.train_lm", "--train", str(tmp_path / "train.txt"),
           "--valid", str(tmp_path / "valid.txt"), "--out-dir", str(out), "--hidden", "16", "--layers", "1",
           "--bptt", "8", "--epochs", "30", "--batch-size", "4", "--device", "cpu", "--threads", "1"]
    rc = interrupt(cmd, tmp_path / "stderr.log", r"rescore.progress INFO: epoch 1: \d+/\d+ batch \((?!100%)")
    text = (tmp_path / "stderr.log").read_text()
    assert_interrupted(rc, text)
    left = [p.name for p in out.rglob("*")]
    assert not any(is_temporary(name) or name == ".rescore.lock" for name in left), left
