"""Tiny training runs: the loss goes down, resume continues, 2-process torchrun trains."""

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from rescore.cli.train_lm import main as train_main
from rescore.train.data import load_streams
from rescore.models import ModelConfig, build_model, load_checkpoint
from rescore.train.ppl import stream_loss
from rescore.train.loop import TrainOptions, train_lm
from rescore.settings import BODY_NAMES
from rescore.train.options import DEFAULT_LR
from rescore.vocab import Vocabulary

REPO = Path(__file__).resolve().parents[2]


def write_corpus(path: Path, n_sentences: int, seed: int) -> None:
    """Sentences with a grammar and a per-'document' name that repeats (pointer-friendly)."""
    rng = random.Random(seed)
    names = [f"name{i}" for i in range(30)]
    lines = []
    for i in range(n_sentences):
        if i % 5 == 0:
            name = rng.choice(names)
        verb = rng.choice(["saw", "met", "called"])
        obj = rng.choice(["the cat", "a dog", "the old man", "a friend"])
        lines.append(f"{name} {verb} {obj} and {name} {rng.choice(['left', 'stayed'])}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "train.txt", 400, 1)
    write_corpus(tmp_path / "valid.txt", 60, 2)
    return tmp_path


def tiny_config(head="softmax", **kw):
    return ModelConfig(arch=kw.pop("arch", "lstm"), head=head, hidden=16, layers=1, history=8,
                       context=8, n_heads=2, dropout=0.0, **kw)


def initial_valid_loss(config, corpus, seed=1):
    vocab = Vocabulary.from_text(corpus / "train.txt")
    torch.manual_seed(seed)
    model = build_model(config, vocab)
    nll, n = stream_loss(model, load_streams(corpus / "valid.txt", vocab, 4, pad=True), 8, "cpu")
    return nll / n


@pytest.mark.parametrize("arch,head,mem,optim", [("lstm", "pointer", True, "sgd"),
                                                 ("transformer", "pointer", False, "adam")])
def test_tiny_training_lowers_valid_loss(corpus, arch, head, mem, optim):
    config = tiny_config(head, arch=arch, memory_aug=mem)
    before = initial_valid_loss(tiny_config(head, arch=arch, memory_aug=mem), corpus)
    opts = TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt",
                        out_dir=corpus / "out", epochs=3, batch_size=4, bptt=8,
                        optimizer=optim, lr=DEFAULT_LR[optim] * (5 if optim == "adam" else 1),
                        warmup=5 if optim == "adam" else 0, device="cpu", threads=1)
    summary = train_lm(config, opts)
    records = json.loads((corpus / "out" / "train.json").read_text())["records"]
    assert len(records) == 3
    after = min(r["valid_loss"] for r in records)
    assert after < before - 0.5, (before, after)
    model = load_checkpoint(corpus / "out" / "model.pt")
    assert model.config.memory_aug == mem and model.config.arch == arch
    assert math.isclose(summary["best_valid_ppl"], math.exp(after))


def test_resume_continues(corpus):
    out = corpus / "out"
    base = dict(train=corpus / "train.txt", valid=corpus / "valid.txt", out_dir=out,
                batch_size=4, bptt=8, epoch_batches=5, device="cpu", lr=1.0, threads=1)
    train_lm(tiny_config(), TrainOptions(epochs=1, **base))
    first = torch.load(out / "last.pt", weights_only=True)["train_state"]
    assert (first["epoch"], first["step"]) == (1, 5)
    train_lm(tiny_config(), TrainOptions(epochs=2, resume=True, **base))
    second = json.loads((out / "train.json").read_text())["records"]
    assert [r["step"] for r in second] == [5, 10]
    assert second[0] == json.loads(json.dumps(first["records"][0]))  # the first epoch was kept
    # as if interrupted 2 batches into epoch 3: the resumed epoch does the 3 batches left
    ckpt = torch.load(out / "last.pt", weights_only=True)
    ckpt["train_state"]["step"] = 12
    torch.save(ckpt, out / "last.pt")
    train_lm(tiny_config(), TrainOptions(epochs=3, resume=True, **base))
    third = json.loads((out / "train.json").read_text())["records"]
    assert [r["step"] for r in third] == [5, 10, 15]


def test_cli_trains_and_rejects_unknown_head(corpus):
    args = ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(corpus / "cli"), "--hidden", "16", "--layers", "1", "--bptt", "8",
            "--epochs", "1", "--batch-size", "4", "--device", "cpu", "--threads", "1"]
    r = CliRunner().invoke(train_main, args + ["--head", "pointer", "--memory-aug"])
    assert r.exit_code == 0, r.output
    model = load_checkpoint(corpus / "cli" / "model.pt")
    assert (model.config.head, model.config.history, model.config.memory_aug) == ("pointer", 8, True)
    r = CliRunner().invoke(train_main, args + ["--head", "nonsense"])
    assert r.exit_code == 2 and "nonsense" in r.output  # a bad option: a usage error


def test_torchrun_two_processes(corpus):
    """2-process DistributedDataParallel on CPU (gloo); the checkpoint loads."""
    out = corpus / "ddp"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           "-m", "rescore.cli.train_lm", "--train", str(corpus / "train.txt"),
           "--valid", str(corpus / "valid.txt"), "--out-dir", str(out), "--hidden", "16",
           "--layers", "1", "--bptt", "8", "--epochs", "2", "--batch-size", "2",
           "--head", "pointer", "--device", "cpu", "--threads", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    log = json.loads((out / "train.json").read_text())
    assert log["world_size"] == 2 and len(log["records"]) == 2
    assert log["records"][1]["valid_loss"] < log["records"][0]["valid_loss"] + 0.1
    model = load_checkpoint(out / "model.pt")
    assert model.config.head == "pointer"


def test_same_seed_same_result(corpus):
    losses = []
    for run in ("a", "b"):
        opts = TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt",
                            out_dir=corpus / run, epochs=1, batch_size=4, bptt=8, epoch_batches=4,
                            device="cpu", lr=1.0, threads=1, seed=7)
        train_lm(ModelConfig(arch="lstm", head="pointer", hidden=16, layers=1, history=8,
                             dropout=0.3), opts)
        losses.append(json.loads((corpus / run / "train.json").read_text())["records"][0]["valid_loss"])
    assert losses[0] == losses[1]


def test_vocabulary_from_kaldi_words_txt(corpus):
    """--words-txt: the vocabulary is words.txt's (in id order, Kaldi's symbols left out) and
    training words outside it are <unk>, as in Kaldi's pytorchnn recipes."""
    words = ["<eps>", "!SIL", "the", "cat", "a", "dog", "saw", "and", "<unk>", "#0", "<s>", "</s>"]
    wt = corpus / "words.txt"
    wt.write_text("".join(f"{w} {i}\n" for i, w in enumerate(words)))
    r = CliRunner().invoke(train_main, [
        "--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
        "--out-dir", str(corpus / "out"), "--words-txt", str(wt), "--hidden", "8", "--layers",
        "1", "--epochs", "1", "--epoch-batches", "2", "--bptt", "8", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    vocab = load_checkpoint(corpus / "out/model.pt").vocab
    assert vocab.words == ["<eos>", "<unk>", "!SIL", "the", "cat", "a", "dog", "saw", "and"]
    assert vocab.encode(["name3", "saw", "the", "old", "man"])[0] == [1, 7, 3, 1, 1]
    r = CliRunner().invoke(train_main, [
        "--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
        "--out-dir", str(corpus / "out2"), "--words-txt", str(wt), "--max-vocab", "5",
        "--device", "cpu"])
    assert r.exit_code == 2 and "either --words-txt or --max-vocab" in r.output  # usage error

@pytest.mark.parametrize("arch,extra", [("gru", []), ("kaldi-transformer", ["--positions", "sinusoidal"])])
def test_cli_trains_every_registered_body(corpus, arch, extra):
    """--arch offers every body of the registry; the two the other tests do not train (lstm and
    transformer are trained above and in test_train_resume.py) train here and load back."""
    assert {"lstm", "transformer", arch} <= set(BODY_NAMES)
    args = ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(corpus / arch), "--arch", arch, "--hidden", "8", "--layers", "1",
            "--n-heads" if arch != "gru" else "--bptt", "2" if arch != "gru" else "8",
            "--epochs", "1", "--batch-size", "4", "--device", "cpu", "--threads", "1"] + extra
    r = CliRunner().invoke(train_main, args)
    assert r.exit_code == 0, r.output
    assert load_checkpoint(corpus / arch / "model.pt").config.arch == arch


def test_kaldi_transformer_needs_its_positions(corpus):
    args = ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(corpus / "out"), "--arch", "kaldi-transformer", "--device", "cpu"]
    r = CliRunner().invoke(train_main, args)
    assert r.exit_code == 2 and "--positions: expected --positions sinusoidal" in r.output, r.output
    r = CliRunner().invoke(train_main, args + ["--positions", "sinusoidal", "--hidden", "9", "--n-heads", "3"])
    assert r.exit_code == 2 and "--hidden: expected an even --hidden" in r.output, r.output
    assert not (corpus / "out").exists()


def test_cli_module_imports_no_torch():
    """--help stays instant: the command's module (and its defaults' home) import no torch."""
    code = "import sys, rescore.cli.train_lm; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert r.returncode == 0, r.stderr
