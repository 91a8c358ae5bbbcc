"""Progress: a tqdm bar on a terminal (a pseudo-terminal made by `script`), log lines at the set
interval when stderr is a file, even while one step is long; and a real command's log."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_train import write_corpus

REPO = Path(__file__).resolve().parents[1]

# Three steps (a done line: over 1 s), then one step of 1.5 s with no update: the log must not go quiet.
CHILD = """
import logging, time
logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(name)s: %(message)s")
from rescore.progress import progress
for i in progress(range(3), desc="quick", unit="step"):
    time.sleep(0.4)
bar = progress(total=2, desc="slow", unit="hyp")
bar.update(1)
time.sleep(1.5)
bar.update(1)
bar.close()
"""


def _env(**kw):
    return dict(os.environ, PYTHONPATH=str(REPO), **kw)


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script (util-linux) for a pseudo-terminal")
def test_bar_on_a_terminal(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / 'child.py'))}"
    r = subprocess.run(["script", "-q", "-c", cmd, "/dev/null"], capture_output=True, text=True,
                       env=_env(RESCORE_PROGRESS_SECONDS="0.2"), timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    frames = r.stdout.replace("\r", "\n")
    assert re.search(r"slow: 100%\|.*\| 2/2", frames), frames  # tqdm's own bar
    assert "rescore.progress" not in frames  # on a terminal: the bar, no log lines


def test_log_lines_at_the_interval_while_a_step_is_long(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    with open(tmp_path / "log", "w") as err:
        r = subprocess.run([sys.executable, str(tmp_path / "child.py")], stderr=err, stdout=subprocess.PIPE,
                           env=_env(RESCORE_PROGRESS_SECONDS="0.2"), timeout=120)
    assert r.returncode == 0
    log = (tmp_path / "log").read_text()
    assert "%|" not in log  # no bar in a file
    slow = [(int(t), m) for t, m in re.findall(r"^(\d+) rescore.progress: (slow: .*)$", log, re.M)]
    assert slow[-1][1].startswith("slow: 2/2 hyp (100%)") and "done" in slow[-1][1]
    during = [t for t, m in slow if m.startswith("slow: 1/2 hyp (50%)")]
    # 1.5 s without an update, a line every 0.2 s: about 7 (a loaded machine may delay some)
    assert len(during) >= 4, log
    assert max(b - a for a, b in zip(during, during[1:])) < 1000, log
    assert re.search(r"quick: 3/3 step \(100%\)", log)


# A library's own bars (transformers' GGUF conversion, its weight loading) after library_bars().
LIBRARY_CHILD = """
import logging, time
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
from rescore.progress import library_bars
library_bars()
from transformers import modeling_gguf_pytorch_utils as gguf_loading
from transformers.utils import logging as tf_logging
for _ in gguf_loading.tqdm(range(60), desc="Converting and de-quantizing GGUF tensors..."):
    time.sleep(0.02)
for _ in tf_logging.tqdm(range(50), desc="Loading weights"):
    pass
"""


@pytest.mark.slow
def test_library_bars_are_log_lines_in_a_log(tmp_path):
    """Stderr to a file: transformers' GGUF conversion bar becomes rescore.progress's log lines,
    its weight-loading bar is off: no carriage-return frames."""
    pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
    (tmp_path / "child.py").write_text(LIBRARY_CHILD)
    with open(tmp_path / "log", "w") as err:
        r = subprocess.run([sys.executable, str(tmp_path / "child.py")], stderr=err, stdout=subprocess.PIPE,
                           env=_env(RESCORE_PROGRESS_SECONDS="0.3"), timeout=300)
    log = (tmp_path / "log").read_text()
    assert r.returncode == 0, log
    assert "\r" not in log and "%|" not in log and "Loading weights" not in log, log
    assert re.search(r"^rescore.progress: Converting and de-quantizing GGUF tensors\.\.\.: 60/60 it \(100%\).*done",
                     log, re.M), log


@pytest.mark.slow
def test_training_logs_progress_in_a_log_file(tmp_path):
    """rescore-train-lm with stderr to a file (as under run.pl): epoch progress lines."""
    write_corpus(tmp_path / "train.txt", 400, 1)
    write_corpus(tmp_path / "valid.txt", 60, 2)
    args = ["--train", str(tmp_path / "train.txt"), "--valid", str(tmp_path / "valid.txt"),
            "--out-dir", str(tmp_path / "lm"), "--hidden", "16", "--layers", "1", "--bptt", "8",
            "--epochs", "1", "--batch-size", "4", "--device", "cpu", "--threads", "1"]
    with open(tmp_path / "log", "w") as err:
        r = subprocess.run([sys.executable, "-m", "rescore.cli.train_lm", *args], stderr=err,
                           stdout=subprocess.PIPE, env=_env(RESCORE_PROGRESS_SECONDS="0.05"), timeout=300)
    log = (tmp_path / "log").read_text()
    assert r.returncode == 0, log
    assert re.search(r"rescore.progress INFO: epoch 1: \d+/\d+ batch \(\d+%\), .* batch/s, elapsed", log), log


def test_bad_interval_falls_back_with_a_warning(monkeypatch, caplog):
    from rescore.progress import DEFAULT_SECONDS, log_interval

    monkeypatch.setenv("RESCORE_PROGRESS_SECONDS", "soon")
    assert log_interval() == DEFAULT_SECONDS and "RESCORE_PROGRESS_SECONDS" in caplog.text
    monkeypatch.setenv("RESCORE_PROGRESS_SECONDS", "2.5")
    assert log_interval() == 2.5


def test_interrupted_work_logs_interrupted_not_done(caplog):
    """Ctrl-C through a bar's with block or loop: its last line says interrupted; a bar still open
    when the command stops (close_interrupted) too; finished work still says done."""
    import logging

    from rescore.progress import close_interrupted, progress

    caplog.set_level(logging.INFO, logger="rescore.progress")
    with pytest.raises(KeyboardInterrupt):
        with progress(total=10, desc="with", unit="hyp", interval=60) as bar:
            bar.update(3)
            raise KeyboardInterrupt
    loop = progress(range(10), desc="loop", unit="hyp", interval=60)
    with pytest.raises(KeyboardInterrupt):
        for i in loop:
            if i == 4:
                raise KeyboardInterrupt
    # the loop's generator stays suspended (its frame is in the traceback): the command closes it
    close_interrupted()
    lines = [r.getMessage() for r in caplog.records if r.name == "rescore.progress"]
    assert any(m.startswith("with: 3/10 hyp (30%)") and m.endswith(", interrupted") for m in lines), lines
    assert any(m.startswith("loop: 4/10 hyp (40%)") and m.endswith(", interrupted") for m in lines), lines
    assert not any("done" in m for m in lines), lines
    caplog.clear()
    bar = progress(total=2, desc="whole", unit="hyp", interval=60)
    bar._t0 -= 2  # work long enough for a done line
    bar.update(2)
    bar.close()
    close_interrupted()  # nothing open any more
    lines = [r.getMessage() for r in caplog.records if r.name == "rescore.progress"]
    assert len(lines) == 1 and lines[0].endswith(", done"), lines
