"""Training resumes exactly: an interrupted run (Ctrl-C, or kill -9 in a subprocess) resumed
with --resume ends with weights bit-identical (torch.equal) to a run never stopped, on the CPU.

Also: options that differ from the checkpoint's are refused by name; an OUT_DIR of an earlier run
is refused without --resume; options that would do nothing are refused."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from rescore.cli.train_lm import main as train_main
from rescore.errors import RescoreError
from rescore.io.outdir import is_temporary
from rescore.models import ModelConfig
from rescore.train.loop import TrainOptions, train_lm

REPO = Path(__file__).resolve().parents[2]
TIME_FIELDS = ("tokens_per_s", "train_seconds", "cpu_seconds", "epoch_cpu_seconds")


def write_corpus(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(40)]
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + "\n"
                            for _ in range(n)))


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "train.txt", 120, 1)
    write_corpus(tmp_path / "valid.txt", 20, 2)
    return tmp_path


# arch, head, extra CLI options: dropout everywhere (the RNG), a pointer history with memory
# (carried state), Adam with warm-up (optimizer state), epochs that end inside the text (the
# state is carried across epoch ends)
SETUPS = {
    "lstm-pointer-sgd": ["--arch", "lstm", "--head", "pointer", "--memory-aug", "--history", "6",
                         "--optimizer", "sgd", "--lr", "2", "--anneal", "2"],
    "transformer-adam": ["--arch", "transformer", "--head", "softmax", "--n-heads", "2",
                         "--context", "6", "--optimizer", "adam", "--lr", "0.003",
                         "--warmup", "7"],
}


def cli_args(corpus, out, setup, epochs=4):
    return ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(out), "--hidden", "12", "--layers", "1", "--dropout", "0.3",
            "--bptt", "6", "--batch-size", "3", "--epoch-batches", "23", "--epochs", str(epochs),
            "--device", "cpu", "--threads", "1", "--seed", "5", *SETUPS[setup]]


def assert_same_run(a: Path, b: Path) -> None:
    """model.pt and last.pt of two runs: every weight, the optimizer state, RNG, records."""
    for name in ("model.pt", "last.pt"):
        ca = torch.load(a / name, weights_only=True)
        cb = torch.load(b / name, weights_only=True)
        assert ca["state_dict"].keys() == cb["state_dict"].keys()
        for k in ca["state_dict"]:
            assert torch.equal(ca["state_dict"][k], cb["state_dict"][k]), (name, k)
        if name == "last.pt":
            sa, sb = ca["train_state"], cb["train_state"]
            for k, v in sa["optimizer"]["state"].items():
                for kk in v:
                    assert torch.equal(v[kk], sb["optimizer"]["state"][k][kk]), (k, kk)
            assert torch.equal(sa["rng"][0]["torch"], sb["rng"][0]["torch"])
            for k in ("step", "epoch", "lr", "anneals", "best"):
                assert sa[k] == sb[k], k
    ra, rb = (json.loads((d / "train.json").read_text()) for d in (a, b))
    assert ra["status"] == rb["status"] == "done"
    def strip(recs):
        return [{k: v for k, v in r.items() if k not in TIME_FIELDS} for r in recs]
    assert strip(ra["records"]) == strip(rb["records"])


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_interrupt_then_resume_is_bit_identical(corpus, setup, monkeypatch):
    """Ctrl-C during step k (mid-epoch), then --resume: the same weights as a run never stopped."""
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "whole", setup))
    assert r.exit_code == 0, r.output
    k = 37  # in epoch 2, between two periodic checkpoints
    calls = {"n": 0}

    def interrupting(real_step):
        def step(self, *a, **kw):
            calls["n"] += 1
            if calls["n"] == k:  # Ctrl-C arrives inside the optimizer step
                os.kill(os.getpid(), signal.SIGINT)
            return real_step(self, *a, **kw)
        return step

    for cls in (torch.optim.SGD, torch.optim.Adam):
        monkeypatch.setattr(cls, "step", interrupting(cls.step))
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "cut", setup))
    assert r.exit_code == 130, r.output
    monkeypatch.undo()
    cut = torch.load(corpus / "cut" / "last.pt", weights_only=True)["train_state"]
    assert cut["step"] == k and cut["epoch"] == 1
    assert json.loads((corpus / "cut" / "train.json").read_text())["status"] == "interrupted"
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "cut", setup) + ["--resume"])
    assert r.exit_code == 0, r.output
    assert_same_run(corpus / "whole", corpus / "cut")


@pytest.mark.slow
def test_kill_9_then_resume_is_bit_identical(corpus):
    """kill -9 at a random point after a periodic checkpoint; --resume redoes the lost steps."""
    setup = "lstm-pointer-sgd"
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "whole", setup, epochs=5))
    assert r.exit_code == 0, r.output
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "rescore.cli.train_lm",
           *cli_args(corpus, corpus / "killed", setup, epochs=5), "--save-every", "4", "--resume"]
    last = corpus / "killed" / "last.pt"
    rng = random.Random()
    # first a kill at a random time (start-up, or the first steps: --resume then finds no
    # last.pt, or an early one), then one at a random step after a periodic checkpoint
    for when in ("time", "step"):
        target, delay = rng.randint(8, 80), rng.uniform(0.3, 2.5)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.time()
        deadline = t0 + 120
        try:
            while proc.poll() is None and time.time() < deadline:
                if when == "time" and time.time() - t0 >= delay:
                    proc.send_signal(signal.SIGKILL)
                    break
                if when == "step" and last.exists():
                    try:
                        step = torch.load(last, weights_only=True)["train_state"]["step"]
                    except (RuntimeError, OSError, EOFError):  # replaced while we read it
                        continue
                    if step >= target:
                        time.sleep(random.random() * 0.05)  # somewhere after that checkpoint
                        proc.send_signal(signal.SIGKILL)
                        break
                time.sleep(0.005)
        finally:
            proc.wait(timeout=60)
        if when == "step":
            assert proc.returncode == -signal.SIGKILL, (target, proc.stderr.read()[-2000:])
        if proc.returncode == -signal.SIGKILL and (corpus / "killed" / "train.json").exists():
            record = json.loads((corpus / "killed" / "train.json").read_text())
            # a killed run is marked incomplete, unless the kill came after it had ended (a
            # fast machine can finish the 5 epochs before a "time" kill lands)
            assert record["status"] == "running" or (
                record["status"] == "done" and len(record["records"]) == 5), record["status"]
    # the resumed run goes on from what the killed one left (a stale temporary file included)
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "killed", setup, epochs=5)
                           + ["--save-every", "4", "--resume"])
    assert r.exit_code == 0, r.output
    assert not [p for p in (corpus / "killed").iterdir() if is_temporary(p.name)]
    assert_same_run(corpus / "whole", corpus / "killed")


def test_resume_with_other_options_names_them(corpus):
    args = cli_args(corpus, corpus / "out", "lstm-pointer-sgd", epochs=1)
    assert CliRunner().invoke(train_main, args).exit_code == 0
    changed = [a if a != "6" else "6" for a in args]
    changed[changed.index("--bptt") + 1] = "5"
    changed[changed.index("--lr") + 1] = "3"
    changed[changed.index("--hidden") + 1] = "10"
    before = (corpus / "out" / "last.pt").read_bytes()
    r = CliRunner().invoke(train_main, changed + ["--resume"])
    assert r.exit_code != 0
    assert "--bptt 6 (now 5)" in r.output and "--lr 2.0 (now 3.0)" in r.output
    assert "--hidden 12 (now 10)" in r.output and "last.pt" in r.output
    assert "Traceback" not in r.output
    assert (corpus / "out" / "last.pt").read_bytes() == before
    # what may change: the number of epochs (and where/how fast it runs)
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "out", "lstm-pointer-sgd",
                                                epochs=2) + ["--resume"])
    assert r.exit_code == 0, r.output
    assert len(json.loads((corpus / "out" / "train.json").read_text())["records"]) == 2
    # the training text changed under the same name: its data position means nothing any more
    write_corpus(corpus / "train.txt", 120, 9)
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "out", "lstm-pointer-sgd",
                                                epochs=3) + ["--resume"])
    assert r.exit_code != 0 and "SHA-256" in r.output, r.output


def test_earlier_run_refused_without_resume(corpus):
    args = cli_args(corpus, corpus / "out", "lstm-pointer-sgd", epochs=1)
    assert CliRunner().invoke(train_main, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in (corpus / "out").iterdir()}
    r = CliRunner().invoke(train_main, args)
    assert r.exit_code == 1
    assert "--resume" in r.output and "last.pt" in r.output and "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in (corpus / "out").iterdir()} == before


@pytest.mark.parametrize("extra,message", [
    (["--head", "softmax", "--memory-aug"], "--memory-aug: expected --head pointer"),
    (["--head", "pointer", "--coverage", "0.5"], "--coverage: expected --head pointer-generator"),
    (["--head", "psmm", "--memory-aug"], "--memory-aug: expected --head pointer"),
    (["--arch", "lstm", "--n-heads", "2"], "--n-heads: expected --arch transformer"),
    (["--arch", "lstm", "--positions", "none"], "--positions: expected --arch transformer"),
    (["--head", "softmax", "--history", "5"], "--history: expected a --head that keeps a history"),
])
def test_options_that_do_nothing_are_refused(corpus, extra, message):
    base = ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(corpus / "out"), "--device", "cpu"]
    r = CliRunner().invoke(train_main, base + extra)
    assert r.exit_code in (1, 2) and message in r.output, r.output
    assert not (corpus / "out").exists()


def test_library_options_checked_when_built():
    with pytest.raises(RescoreError, match="--bptt"):
        TrainOptions(train="t", valid="v", out_dir="o", bptt=0)
    with pytest.raises(RescoreError, match="--lr"):
        TrainOptions(train="t", valid="v", out_dir="o", lr=float("nan"))
    with pytest.raises(RescoreError, match="--memory-aug"):
        train_lm(ModelConfig(head="softmax", memory_aug=True),
                 TrainOptions(train="t", valid="v", out_dir="o"))


def test_max_minutes_stops_at_the_first_epoch_end_past_the_budget(corpus):
    """--max-minutes: a budget smaller than one epoch's training time stops after epoch 1 (not
    inside it: the epoch is finished, validated and its best model kept); train.json says done."""
    out = corpus / "out"
    args = cli_args(corpus, out, "lstm-pointer-sgd", epochs=6) + ["--max-minutes", "1e-6"]
    r = CliRunner().invoke(train_main, args)
    assert r.exit_code == 0, r.output
    record = json.loads((out / "train.json").read_text())
    assert record["status"] == "done"
    assert [e["epoch"] for e in record["records"]] == [1]
    assert (out / "model.pt").exists()
    r = CliRunner().invoke(train_main, cli_args(corpus, corpus / "bad", "lstm-pointer-sgd")
                           + ["--max-minutes", "-1"])
    assert r.exit_code in (1, 2) and "--max-minutes" in r.output, r.output


def test_train_state_of_an_older_last_pt():
    """A last.pt's train_state: what it holds is kept (lr included), what older versions lack is
    filled in (the time budgets from the records), keys of other concerns are left out."""
    from rescore.train.state import TrainState

    saved = {"epoch": 2, "step": 30, "lr": 0.5, "records": [{"train_seconds": 2.0}, {"train_seconds": 3.0}],
             "epoch_seconds": 1.5, "world_size": 1, "train_sha256": "ab", "options": {}}
    ts = TrainState.from_saved(saved, lr=20.0)
    assert (ts.epoch, ts.step, ts.lr, ts.train_seconds) == (2, 30, 0.5, 5.0)
    assert (ts.cpu_seconds, ts.epoch_cpu_seconds) == (5.0, 1.5)  # wall time: an upper bound
    assert list(ts.to_dict()) == ["epoch", "step", "epoch_start", "lr", "anneals", "best", "records", "epoch_loss",
                                  "epoch_tokens", "epoch_seconds", "train_seconds", "epoch_cpu_seconds",
                                  "cpu_seconds"]
    assert TrainState.from_saved(ts.to_dict(), lr=20.0) == ts
