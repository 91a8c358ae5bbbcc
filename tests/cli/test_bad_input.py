"""The bad-input suite: every command refuses bad input cleanly.

Each case builds a small world in a temporary dir (the nbest-small fixture, a tiny checkpoint,
tiny texts and a WAV data dir), breaks one thing, runs one command in-process (click's
CliRunner) and asserts:

* the exit status (1: bad data, 2: bad option or combination of options);
* the message starts with ``error: `` and names the file (and ``file:line`` where there is a
  line) or the option, and says what was expected;
* no traceback: no exception other than SystemExit escapes the command;
* nothing written: every file and dir under the world is as it was before the run.

A case that exits 0 is a silent acceptance. Failures say which of the three it was (the first
word of the assertion message: SILENT, TRACEBACK, STATUS, MESSAGE, WRITTEN), so a run's counts
come from ``pytest tests/cli/test_bad_input.py | grep -c '^E *AssertionError: SILENT'``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import shutil
import struct
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False

# words of the fixture: the tiny checkpoint's vocabulary covers them
WORDS = [line.split()[0] for line in (NBEST_SMALL / "words.txt").read_text().splitlines()
         if not line.startswith("<")]
TRAIN = "".join(f"{WORDS[i % len(WORDS)]} {WORDS[(3 * i) % len(WORDS)]} "
                f"{WORDS[(7 * i + 1) % len(WORDS)]}\n" for i in range(40))
EXPECT_WORDS = re.compile(r"expected|must|range|invalid|needs|only with|exclude|no such|"
                          r"not |at least|at most|does not exist|is a directory|missing",
                          re.IGNORECASE)


def _commands():
    from rescore.cli import import_kaldi_lm, lattice, make_nbest, nbest, ppl, train_lm, tts_data, tune, wer

    return {"nbest": nbest.main, "tune": tune.main, "wer": wer.main, "train-lm": train_lm.main,
            "ppl": ppl.main, "make-nbest": make_nbest.main, "tts-data": tts_data.main,
            "lattice": lattice.main, "import-kaldi-lm": import_kaldi_lm.main}


# Two CompactLattices in Kaldi's text form (lattice-copy ark:in ark,t:-), word ids of the
# fixture's words.txt; the line numbers below count from here.
LAT = ("rec1-rms-000 \n"                # 1
       "0\t1\t21\t1.5,10.25,1_2_2\n"    # 2
       "0\t2\t0\n"                      # 3  (an epsilon arc, weight One)
       "2\t1\t14\t2,3,\n"               # 4
       "1\t3\t3\t0.5,1,3\n"             # 5
       "3\t0.25,0.5,4_4\n"               # 6  (a final state)
       "\n"                              # 7
       "rec1-rms-001 \n"                # 8
       "0\t1\t19\t1,2,\n"               # 9
       "1\t2\t7\t1,1,\n"                # 10
       "2\t0.5,1,\n"                     # 11
       "\n")                             # 12
# The first bytes of a binary lattice archive as Kaldi's lattice-copy writes it (the fixture's
# lat.1.gz through lattice-copy ark:- ark:-): the key, then OpenFst's magic number, not \0B.
KALDI_BINARY_LAT = (b"dev-a000-rms-000 \xd6\xfd\xb2~\x06\x00\x00\x00vector\x10\x00\x00\x00"
                    b"compactlattice44\x02\x00\x00\x00\x00")
KDIM = 4  # the Kaldi LSTM's embedding and hidden size


def _kaldi_lstm(vocab_size: int):
    """The state_dict Kaldi's steps/pytorchnn/train.py saves for a tied 1-layer LSTM
    (model.py's RNNModel: encoder, rnn, decoder)."""
    import torch

    enc, rnn = torch.nn.Embedding(vocab_size, KDIM), torch.nn.LSTM(KDIM, KDIM, 1)
    dec = torch.nn.Linear(KDIM, vocab_size)
    sd = {"encoder.weight": enc.weight, **{f"rnn.{k}": v for k, v in rnn.state_dict().items()},
          "decoder.weight": enc.weight, "decoder.bias": dec.bias}
    return {k: v.detach().clone() for k, v in sd.items()}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The world every case starts from (copied per case)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    b = tmp_path_factory.mktemp("world")
    shutil.copytree(NBEST_SMALL, b / "nb")
    (b / "train.txt").write_text(TRAIN)
    (b / "valid.txt").write_text(TRAIN[: len(TRAIN) // 3])
    (b / "text.txt").write_text(TRAIN[: len(TRAIN) // 4])
    shutil.copy(NBEST_SMALL / "data" / "text", b / "ref.txt")
    first = {}
    for line in (NBEST_SMALL / "words_text").read_text().splitlines():
        key, *words = line.split()
        first.setdefault(key.rsplit("-", 1)[0], " ".join(words))
    (b / "hyp.txt").write_text("".join(f"{u} {w}\n" for u, w in first.items()))
    keys = [line.split()[0] for line in (NBEST_SMALL / "acwt").read_text().splitlines()]
    (b / "lmwt.nn").write_text("".join(f"{k} {5.0 + i * 0.1:.1f}\n" for i, k in enumerate(keys)))
    (b / "lmwt2.nn").write_text("".join(f"{k} {9.0 - i * 0.1:.1f}\n" for i, k in enumerate(keys)))
    (b / "params.json").write_text(json.dumps({"weight": 0.5, "inv_acwt": 10.0, "wip": 0.0}))
    (b / "utts.txt").write_text("rec1-rms-000\nrec1-rms-001\n")
    (b / "afile").write_text("a regular file\n")
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=8, layers=1, dropout=0.0),
                        Vocabulary(["<eos>", "<unk>"] + sorted(set(WORDS))))
    save_checkpoint(model, b / "model.pt")
    # rescore-lattice: the lattices and the archive dir of their path cover after rescore-nbest
    # (words, per-token lmwt.nn), as recipes/steps/lmrescore_lattice.sh leaves them for `apply`
    from rescore.nbest.lattice import path_cover, read_lattices

    (b / "lat.txt").write_text(LAT)
    rows = [(f"{lat.key}-{k}", p.words(lat)) for lat in read_lattices(b / "lat.txt")
            for k, p in enumerate(path_cover(lat, 0.1), 1)]
    (b / "cover").mkdir()
    (b / "cover" / "words").write_text("".join(f"{k} {' '.join(map(str, w))} \n" for k, w in rows))
    (b / "cover" / "lmwt.nn").write_text("".join(
        f"{k} {' '.join(f'{1 + 0.5 * i:.1f}' for i in range(len(w) + 1))} \n" for k, w in rows))
    # rescore-import-kaldi-lm: a Kaldi steps/pytorchnn LSTM and its vocabulary
    (b / "kvocab.txt").write_text((NBEST_SMALL / "words.txt").read_text() + "<unk> 28\n")
    torch.save(_kaldi_lstm(len((b / "kvocab.txt").read_text().splitlines())), b / "kaldi.pt")
    # a data dir of one 16 kHz mono WAV with two segments (for rescore-make-nbest)
    wd = b / "wavdata"
    wd.mkdir()
    _write_wav(wd / "a.wav", 16000, 1, 0.6)
    (wd / "wav.scp").write_text(f"reca {wd / 'a.wav'}\n")
    (wd / "segments").write_text("reca-0 reca 0.0 0.3\nreca-1 reca 0.3 0.6\n")
    (wd / "text").write_text("reca-0 the river\nreca-1 flows north\n")
    return b


def _write_wav(path: Path, rate: int, channels: int, seconds: float) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * channels * int(rate * seconds))


# ------------------------------------------------------------------------------------------
# mutations of the world (applied before the run)

def put(rel: str, content) -> Callable[[Path], None]:
    def op(w: Path):
        p = w / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return op


def line(rel: str, n: int, text) -> Callable[[Path], None]:
    """Replace line n (1-based) of a file by text (str, or bytes: written as they are); None
    deletes it; n past the end appends."""
    def op(w: Path):
        p = w / rel
        lines = p.read_bytes().splitlines()
        new = text.encode("utf-8") if isinstance(text, str) else text
        if n > len(lines):
            lines.append(new)
        elif text is None:
            del lines[n - 1]
        else:
            lines[n - 1] = new
        p.write_bytes(b"\n".join(lines) + b"\n")
    return op


def swap(rel: str, a: int, b: int) -> Callable[[Path], None]:
    def op(w: Path):
        p = w / rel
        lines = p.read_text().splitlines()
        lines[a - 1], lines[b - 1] = lines[b - 1], lines[a - 1]
        p.write_text("\n".join(lines) + "\n")
    return op


def remove(rel: str) -> Callable[[Path], None]:
    def op(w: Path):
        p = w / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return op


def mkdir(rel: str) -> Callable[[Path], None]:
    def op(w: Path):
        p = w / rel
        if p.exists():
            p.unlink()
        p.mkdir(parents=True)
    return op


def gz(rel: str, cut: Optional[int] = None) -> Callable[[Path], None]:
    """Replace rel by rel.gz (cut: keep only that many bytes of the gzip stream)."""
    def op(w: Path):
        p = w / rel
        data = gzip.compress(p.read_bytes())
        p.unlink()
        (w / (rel + ".gz")).write_bytes(data if cut is None else data[:cut])
    return op


def checkpoint(rel: str, how: str) -> Callable[[Path], None]:
    """A broken checkpoint: nan weights, another format, a pickle with code, truncated."""
    def op(w: Path):
        import torch

        p = w / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if how == "nan":
            ck = torch.load(w / "model.pt", weights_only=True)
            k = next(iter(ck["state_dict"]))
            ck["state_dict"][k] = ck["state_dict"][k].clone().fill_(float("nan"))
            if p.name == "last.pt":  # a diverged run's last.pt
                ck["train_state"] = {"step": 3}
            torch.save(ck, p)
        elif how == "foreign":
            torch.save({"a": torch.zeros(2)}, p)
        elif how == "code":
            torch.save({"f": os.getcwd, "format": "rescore-lm"}, p)  # a global: refused unpickled
        elif how == "truncated":
            p.write_bytes((w / "model.pt").read_bytes()[:300])
        elif how == "badconfig":
            ck = torch.load(w / "model.pt", weights_only=True)
            ck["config"]["hidden"] = "eight"
            ck["config"]["nonsense"] = 1
            torch.save(ck, p)
    return op


def sub(rel: str, old: str, new: str) -> Callable[[Path], None]:
    """Replace every ``old`` by ``new`` in a text file."""
    def op(w: Path):
        p = w / rel
        p.write_text(p.read_text().replace(old, new))
    return op


class _Mkdir:
    """Unpickled, this runs os.mkdir(path): code in a checkpoint. Were it run, the new dir
    would fail the WRITTEN check."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def kaldi_model(rel: str, how: str) -> Callable[[Path], None]:
    """A broken Kaldi steps/pytorchnn model, made from the world's kaldi.pt."""
    def op(w: Path):
        import pickle

        import torch

        p = w / rel
        sd = torch.load(w / "kaldi.pt", weights_only=True)
        if how == "pickle-code":  # a plain pickle whose loading runs code
            p.write_bytes(pickle.dumps({"encoder.weight": _Mkdir(w / "pwned")}))
        elif how == "torch-code":  # a torch.save file with code beside the tensors
            torch.save({**sd, "hook": _Mkdir(w / "pwned")}, p)
        elif how == "nested":  # a training checkpoint, not the bare state_dict
            torch.save({"model": sd, "epoch": 3}, p)
        elif how == "renamed":  # another model class's names
            torch.save({k.replace("rnn.", "lstm."): v for k, v in sd.items()}, p)
        elif how == "nan":
            sd["rnn.weight_hh_l0"][0, 0] = float("nan")
            torch.save(sd, p)
        elif how == "untied":
            sd["decoder.weight"] = sd["decoder.weight"] + 1.0
            torch.save(sd, p)
        elif how == "truncated":
            p.write_bytes((w / "kaldi.pt").read_bytes()[:300])
    return op


def chmod(rel: str, mode: int) -> Callable[[Path], None]:
    def op(w: Path):
        os.chmod(w / rel, mode)
    return op


# ------------------------------------------------------------------------------------------
# cases

@dataclass
class Case:
    cmd: str
    id: str
    args: Sequence[str]  # with {w} = the world dir
    must: Sequence[str] = ()  # substrings of the message ({w} allowed)
    codes: Tuple[int, ...] = (1,)
    setup: Sequence[Callable[[Path], None]] = ()
    skip: Optional[str] = None

    @property
    def name(self) -> str:
        return f"{self.cmd}:{self.id}"


CASES: List[Case] = []


def add(cmd, id, args, must=(), codes=(1,), setup=(), skip=None):
    CASES.append(Case(cmd, id, list(args), list(must), tuple(codes), list(setup), skip))


USAGE = (2,)
NOT_ROOT = "runs as root: every path is writable" if ROOT else None
NO_FLITE = None if shutil.which("flite") else "needs flite (Debian: apt-get install flite)"

# --- rescore-train-lm ----------------------------------------------------------------------
T = ["--train", "{w}/train.txt", "--valid", "{w}/valid.txt", "--out-dir", "{w}/out",
     "--hidden", "8", "--layers", "1", "--bptt", "4", "--batch-size", "2", "--epochs", "1",
     "--device", "cpu", "--threads", "1"]


def t_opt(opt, value, extra=(), id=None):
    add("train-lm", id or f"{opt}={value}", T + list(extra) + [opt, value], must=[opt],
        codes=USAGE)


for opt, value in [("--bptt", "0"), ("--bptt", "-3"), ("--batch-size", "0"),
                   ("--eval-batch-size", "0"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "-1"),
                   ("--lr", "inf"), ("--clip", "nan"), ("--clip", "-1"), ("--anneal", "0"),
                   ("--anneal", "nan"), ("--anneal", "0.5"), ("--epochs", "0"),
                   ("--max-anneals", "0"), ("--warmup", "-1"), ("--hidden", "0"),
                   ("--layers", "0"), ("--dropout", "1"), ("--dropout", "-0.1"),
                   ("--dropout", "nan"), ("--max-vocab", "2"), ("--epoch-batches", "0"),
                   ("--threads", "-1"), ("--seed", "-1"), ("--save-every", "x"),
                   ("--save-every", "-5"), ("--save-every", "nanm"), ("--device", "gpu"),
                   ("--self-norm", "nan"), ("--lr", "abc"), ("--bptt", "1.5")]:
    t_opt(opt, value)
t_opt("--n-heads", "3", ["--arch", "transformer", "--hidden", "8"], id="--n-heads=3-of-8")
t_opt("--n-heads", "0", ["--arch", "transformer"])
t_opt("--context", "0", ["--arch", "transformer"])
t_opt("--history", "0", ["--head", "pointer"])
t_opt("--coverage", "nan", ["--head", "pointer-generator"])
t_opt("--coverage", "-1", ["--head", "pointer-generator"])
t_opt("--memory-aug", "--head=softmax", [], id="--memory-aug-with-softmax")
CASES[-1].args = T + ["--memory-aug"]
t_opt("--coverage", "0.5", ["--head", "pointer"], id="--coverage-with-pointer")
t_opt("--n-heads", "2", ["--arch", "lstm"], id="--n-heads-with-lstm")
t_opt("--head", "nonsense")
t_opt("--classes", "0", ["--output", "class"], id="--classes=0-with-class")
t_opt("--classes", "100000", ["--output", "class"], id="--classes-above-vocab")
t_opt("--classes", "5", [], id="--classes-with-softmax")
t_opt("--output", "class", ["--self-norm", "0.1", "--classes", "5", "--head", "pointer"],
      id="--output-class-self-norm-pointer")
CASES[-1].must = ["--self-norm"]
add("train-lm", "--words-txt-and-max-vocab", T + ["--words-txt", "{w}/nb/words.txt", "--max-vocab", "10"],
    must=["--words-txt"], codes=USAGE)
add("train-lm", "words-txt-not-utf8", T + ["--words-txt", "{w}/nb/words.txt"], must=["words.txt:2"],
    setup=[line("nb/words.txt", 2, b"\xe9 1")])
add("train-lm", "words-txt-bad-line", T + ["--words-txt", "{w}/nb/words.txt"], must=["words.txt:3"],
    setup=[line("nb/words.txt", 3, "along")])
add("train-lm", "device-cuda-absent", T[:-4] + ["--device", "cuda:0"], must=["--device"],
    codes=USAGE, skip=None)
for which in ("train", "valid"):
    f = f"{which}.txt"
    add("train-lm", f"{which}-empty", T, must=[f], setup=[put(f, "")])
    add("train-lm", f"{which}-blank-lines", T, must=[f], setup=[put(f, "\n  \n\t\n")])
    add("train-lm", f"{which}-not-utf8", T, must=[f"{f}:3", "UTF-8"],
        setup=[line(f, 3, b"caf\xe9 au lait")])
    add("train-lm", f"{which}-binary", T, must=[f"{f}:1"], setup=[put(f, b"\x89PNG\r\n\x1a\n\xff\xd8")])
    # a whole gzipped text is read (Kaldi recipes keep train.txt.gz); a truncated one is refused
    add("train-lm", f"{which}-truncated-gzip", T, must=[f], setup=[put(f, gzip.compress(TRAIN.encode())[:20])])
    add("train-lm", f"{which}-missing", T, must=[f], codes=USAGE, setup=[remove(f)])
    add("train-lm", f"{which}-directory", T, must=[f], codes=USAGE, setup=[mkdir(f)])
add("train-lm", "train-too-short-for-streams", T + ["--batch-size", "50"], must=["train.txt"],
    setup=[put("train.txt", "lobster\n")])
add("train-lm", "out-dir-is-file", T[:5] + ["{w}/afile"] + T[6:], must=["afile"], codes=(1, 2))
add("train-lm", "out-dir-under-file", T[:5] + ["{w}/afile/out"] + T[6:], must=["afile"],
    codes=(1, 2))
add("train-lm", "out-dir-unwritable", T, must=["ro"], codes=(1, 2),
    setup=[mkdir("ro"), chmod("ro", 0o555)], skip=NOT_ROOT)
CASES[-1].args = T[:5] + ["{w}/ro/out"] + T[6:]
add("train-lm", "earlier-run-without-resume", T, must=["last.pt", "--resume"],
    setup=[put("out/last.pt", b"x"), put("out/train.json", "{}")], codes=(1, 2))
add("train-lm", "resume-garbage-last", T + ["--resume"], must=["last.pt"],
    setup=[put("out/last.pt", b"garbage")])
add("train-lm", "resume-nan-last", T + ["--resume"], must=["last.pt", "finite"],
    setup=[checkpoint("out/last.pt", "nan")])
add("train-lm", "resume-last-without-train-state", T + ["--resume"], must=["last.pt"],
    setup=[lambda w: shutil.copy(w / "model.pt", (w / "out").mkdir() or w / "out" / "last.pt")])
add("train-lm", "train-is-out-model", T[:1] + ["{w}/out/model.pt"] + T[2:] + ["--resume"],
    must=["model.pt"], codes=(1, 2), setup=[put("out/model.pt", TRAIN)])

# --- rescore-ppl ---------------------------------------------------------------------------
P = ["{w}/model.pt", "{w}/text.txt", "--device", "cpu"]
for opt, value in [("--batch-size", "0"), ("--bptt", "0"), ("--bptt", "-1"),
                   ("--cache-theta", "nan"), ("--cache-theta", "0"), ("--cache-theta", "inf"),
                   ("--cache-lambda", "nan"), ("--cache-lambda", "1"),
                   ("--cache-window", "-1"), ("--device", "gpu"), ("--batch-size", "x")]:
    add("ppl", f"{opt}={value}", P + [opt, value] + (["--cache-window", "5"]
                                                      if opt.startswith("--cache-t") or opt == "--cache-lambda" else []),
        must=[opt], codes=USAGE)
add("ppl", "--buckets=0", P + ["--train-text", "{w}/train.txt", "--buckets", "0"],
    must=["--buckets"], codes=USAGE)
add("ppl", "--plot-without-train-text", P + ["--plot", "{w}/p.png"], must=["--plot"],
    codes=USAGE)
add("ppl", "text-empty", P, must=["text.txt"], setup=[put("text.txt", "")])
add("ppl", "text-blank", P, must=["text.txt"], setup=[put("text.txt", "\n \n")])
add("ppl", "text-not-utf8", P, must=["text.txt:2", "UTF-8"],
    setup=[line("text.txt", 2, b"\xff")])
add("ppl", "text-binary", P, must=["text.txt:1"], setup=[put("text.txt", b"\xff\xfe\x00\x01")])
add("ppl", "text-missing", P, must=["text.txt"], codes=USAGE, setup=[remove("text.txt")])
add("ppl", "text-directory", P, must=["text.txt"], codes=USAGE, setup=[mkdir("text.txt")])
add("ppl", "train-text-not-utf8", P + ["--train-text", "{w}/train.txt"], must=["train.txt:1"],
    setup=[put("train.txt", b"\xc3\x28 x\n")])
for how in ("nan", "foreign", "code", "truncated", "badconfig"):
    add("ppl", f"ckpt-{how}", P, must=["model.pt"], setup=[checkpoint("model.pt", how)])
    add("ppl", f"compare-{how}", P + ["--compare", "{w}/other.pt"], must=["other.pt"],
        setup=[checkpoint("other.pt", how)])
add("ppl", "ckpt-empty", P, must=["model.pt"], setup=[put("model.pt", b"")])
add("ppl", "ckpt-text", P, must=["model.pt"], setup=[put("model.pt", "hello\n")])
add("ppl", "report-under-file", P + ["--report", "{w}/afile/r.json"], must=["afile"],
    codes=(1, 2))
add("ppl", "report-is-directory", P + ["--report", "{w}/nb"], must=["nb"], codes=(1, 2))
add("ppl", "report-is-input", P + ["--report", "{w}/text.txt"], must=["text.txt"], codes=(1, 2))
add("ppl", "plot-under-file", P + ["--train-text", "{w}/train.txt", "--plot", "{w}/afile/p.png"],
    must=["afile"], codes=(1, 2))
add("ppl", "report-unwritable", P + ["--report", "{w}/ro/r.json"], must=["ro"], codes=(1, 2),
    setup=[mkdir("ro"), chmod("ro", 0o555)], skip=NOT_ROOT)

# --- rescore-nbest -------------------------------------------------------------------------
N = ["{w}/nb", "{w}/out", "--data-dir", "{w}/nb/data"]
NM = N + ["--model", "{w}/model.pt", "--device", "cpu"]
for arch in ("acwt", "lmwt.withlm", "lmwt.nolm"):
    add("nbest", f"{arch}-nan", N, must=[f"{arch}:2"], setup=[line(f"nb/{arch}", 2, "rec1-rms-000-2 nan")])
    add("nbest", f"{arch}-inf", N, must=[f"{arch}:3"], setup=[line(f"nb/{arch}", 3, "rec1-rms-000-3 inf")])
    add("nbest", f"{arch}-word", N, must=[f"{arch}:1"], setup=[line(f"nb/{arch}", 1, "rec1-rms-000-1 abc")])
    add("nbest", f"{arch}-two-values", N, must=[f"{arch}:4"], setup=[line(f"nb/{arch}", 4, "rec1-rms-000-4 1 2")])
    add("nbest", f"{arch}-missing-line", N, must=[arch], setup=[line(f"nb/{arch}", 5, None)])
    add("nbest", f"{arch}-extra-key", N, must=[arch], setup=[line(f"nb/{arch}", 99, "rec9-x-000-1 1.0")])
    add("nbest", f"{arch}-key-order", N, must=[arch], setup=[swap(f"nb/{arch}", 1, 2)])
    add("nbest", f"{arch}-duplicate-key", N, must=[f"{arch}:2"], setup=[line(f"nb/{arch}", 2, "rec1-rms-000-1 3.0")])
    add("nbest", f"{arch}-empty-line", N, must=[f"{arch}:3"], setup=[line(f"nb/{arch}", 3, "")])
    add("nbest", f"{arch}-truncated-gz", N, must=[arch], setup=[gz(f"nb/{arch}", cut=30)])
    add("nbest", f"{arch}-gz-not-gzip", N, must=[arch], setup=[remove(f"nb/{arch}"), put(f"nb/{arch}.gz", b"\x1f\x8b\x08garbage")])
    add("nbest", f"{arch}-binary-garbage", N, must=[arch], setup=[put(f"nb/{arch}", b"\x00\x01\xff\xfe" * 20)])
    add("nbest", f"{arch}-missing", N, must=[arch], setup=[remove(f"nb/{arch}")])
    add("nbest", f"{arch}-directory", N, must=[arch], setup=[mkdir(f"nb/{arch}")])
add("nbest", "acwt-binary-truncated", N, must=["acwt"], setup=[put("nb/acwt", b"rec1-rms-000-1 \x00B\x04\x00\x00")])
add("nbest", "acwt-binary-nan", N, must=["acwt"],
    setup=[put("nb/acwt", b"rec1-rms-000-1 \x00B\x04" + struct.pack("<f", math.nan))])
add("nbest", "words_text-not-utf8", N, must=["words_text:2", "UTF-8"],
    setup=[put("nb/words_text", (NBEST_SMALL / "words_text").read_bytes().replace(b"lobster is blue", b"lobster \xff blue", 1))])
add("nbest", "words_text-missing-key", N, must=["words_text"], setup=[line("nb/words_text", 7, None)])
add("nbest", "words-id-not-in-words.txt", N + ["--words-txt", "{w}/nb/words.txt"], must=["words"],
    setup=[remove("nb/words_text"), line("nb/words", 1, "rec1-rms-000-1 21 15 999")])
add("nbest", "words-not-int", N, must=["words"], setup=[remove("nb/words_text"), line("nb/words", 2, "rec1-rms-000-2 21 x 3")])
add("nbest", "words-disagree-words_text", N, must=["words_text"], setup=[line("nb/words_text", 1, "rec1-rms-000-1 the lobster blue")])
add("nbest", "words.txt-not-utf8", N, must=["words.txt:3"], setup=[line("nb/words.txt", 3, b"\xe9 2")])
add("nbest", "words.txt-duplicate-id", N, must=["words.txt:4"], setup=[line("nb/words.txt", 4, "zzz 2")])
add("nbest", "words.txt-bad-line", N, must=["words.txt:2"], setup=[line("nb/words.txt", 2, "a b c")])
add("nbest", "words.txt-missing-word", N, must=["words"],
    setup=[remove("nb/words_text"), line("nb/words.txt", 16, None)])
add("nbest", "words_text-word-not-in-words.txt", N, must=["words.txt"],
    setup=[remove("nb/words"), line("nb/words_text", 1, "rec1-rms-000-1 the lobsterz blue")])
add("nbest", "no-words-archives", N, must=["words"], setup=[remove("nb/words"), remove("nb/words_text")])
add("nbest", "nbest-dir-missing", ["{w}/nope", "{w}/out"], must=["nope"], codes=(1, 2))
add("nbest", "nbest-dir-is-file", ["{w}/afile", "{w}/out"], must=["afile"], codes=(1, 2))
add("nbest", "data-dir-missing", N[:2] + ["--data-dir", "{w}/nodata"], must=["nodata"], codes=(1, 2))
for name, bad, ln in [("text", b"rec1-rms-001 caf\xe9", 2), ("utt2spk", "rec1-rms-000 a b", 1),
                      ("spk2utt", "rec1-rms", 1), ("segments", "rec1-rms-000 rec1 nan 2.1", 1),
                      ("segments", "rec1-rms-001 rec1 3.0 2.1", 2)]:
    add("nbest", f"data-{name}-line{ln}", N, must=[f"{name}:{ln}"],
        setup=[line(f"nb/data/{name}", ln, bad)])
add("nbest", "data-text-duplicate", N, must=["text:3"], setup=[line("nb/data/text", 3, "rec1-rms-000 again")])
add("nbest", "data-text-missing-utt", N, must=["text"], setup=[line("nb/data/text", 2, None)])
add("nbest", "data-text-empty", N, must=["text"], setup=[put("nb/data/text", "")])
add("nbest", "out-is-data-dir", ["{w}/nb", "{w}/nb/data", "--data-dir", "{w}/nb/data"],
    must=["data"], codes=(1, 2))
add("nbest", "out-text-is-train-text", ["{w}/nb", "{w}/d", "--data-dir", "{w}/nb/data",
                                        "--train-text", "{w}/d/text"],
    must=["text"], codes=(1, 2), setup=[put("d/text", TRAIN)])
add("nbest", "out-is-file", N[:1] + ["{w}/afile"] + N[2:], must=["afile"], codes=(1, 2))
add("nbest", "out-under-file", N[:1] + ["{w}/afile/out"] + N[2:], must=["afile"], codes=(1, 2))
add("nbest", "out-unwritable", N[:1] + ["{w}/ro/out"] + N[2:], must=["ro"], codes=(1, 2),
    setup=[mkdir("ro"), chmod("ro", 0o555)], skip=NOT_ROOT)
for opt, value in [("--weight", "nan"), ("--weight", "-1"), ("--weight", "1.5"), ("--inv-acwt", "0"),
                   ("--inv-acwt", "nan"), ("--inv-acwt", "-2"), ("--wip", "nan"), ("--wip", "inf"),
                   ("--buckets", "0")]:
    add("nbest", f"{opt}={value}", N + ["--nn-costs", "{w}/lmwt.nn", opt, value]
        + (["--train-text", "{w}/train.txt"] if opt == "--buckets" else []), must=[opt], codes=USAGE)
for opt, value in [("--oov-penalty", "nan"), ("--oov-penalty", "-1"), ("--cache-theta", "nan"),
                   ("--cache-lambda", "nan"), ("--max-tokens", "0"), ("--conv-batch", "0"),
                   ("--split", "3/2"), ("--split", "0/2"), ("--split", "x"), ("--device", "gpu")]:
    add("nbest", f"{opt}={value}", NM + [opt, value] + (["--cache-window", "4"] if "cache" in opt else []),
        must=[opt], codes=USAGE)
add("nbest", "nn-costs-nan", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn:2"],
    setup=[line("lmwt.nn", 2, "rec1-rms-000-2 nan")])
add("nbest", "nn-costs-missing-key", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn"],
    setup=[line("lmwt.nn", 4, None)])
add("nbest", "nn-costs-extra-key", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn"],
    setup=[line("lmwt.nn", 99, "rec9-x-000-1 1.0")])
add("nbest", "nn-costs-wrong-count", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn"],
    setup=[line("lmwt.nn", 1, "rec1-rms-000-1 1.0 2.0")])
add("nbest", "nn-costs-binary", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn"],
    setup=[put("lmwt.nn", b"\xff\x00\x01")])
add("nbest", "nn-costs-missing", N + ["--nn-costs", "{w}/nope.nn"], must=["nope.nn"], codes=(1, 2))
add("nbest", "nn-costs-empty", N + ["--nn-costs", "{w}/lmwt.nn"], must=["lmwt.nn"],
    setup=[put("lmwt.nn", "")])
for id, content, must in [("not-utf8", b'{"weight": 0.5, "inv_acwt": 10, "wip": "\xff"}', []),
                          ("bad-json", b'{"weight": 0.5,', []), ("missing-field", b'{"weight": 0.5}', []),
                          ("nan", b'{"weight": NaN, "inv_acwt": 10, "wip": 0}', []),
                          ("infinity", b'{"weight": 0.5, "inv_acwt": Infinity, "wip": 0}', []),
                          ("list", b'[1, 2, 3]', []), ("string", b'{"weight": "x", "inv_acwt": 10, "wip": 0}', []),
                          ("out-of-range", b'{"weight": 7, "inv_acwt": 10, "wip": 0}', []),
                          ("empty", b"", [])]:
    add("nbest", f"params-{id}", N + ["--nn-costs", "{w}/lmwt.nn", "--params", "{w}/params.json"],
        must=["params.json"] + must, setup=[put("params.json", content)], codes=(1, 2))
for how in ("nan", "foreign", "code", "truncated", "badconfig"):
    add("nbest", f"model-{how}", NM, must=["model.pt"], setup=[checkpoint("model.pt", how)])
add("nbest", "model-missing", N + ["--model", "{w}/none.pt"], must=["none.pt"], codes=(1, 2))
add("nbest", "train-text-not-utf8", N + ["--train-text", "{w}/train.txt"], must=["train.txt:1"],
    setup=[put("train.txt", b"\xe9t\xe9\n")])
add("nbest", "model-and-nn-costs", NM + ["--nn-costs", "{w}/lmwt.nn"], must=["--nn-costs"], codes=USAGE)
# several NN LMs: --mix, one cost file per model, a params file's mix
N2 = N + ["--nn-costs", "{w}/lmwt.nn", "--nn-costs", "{w}/lmwt2.nn"]
for id, value in [("sum", "0.5,0.6"), ("negative", "-0.5,1.5"), ("three-for-two", "0.2,0.3,0.5"),
                  ("words", "a,b"), ("nan", "nan,1"), ("empty", "")]:
    add("nbest", f"--mix-{id}", N2 + ["--mix", value], must=["--mix"], codes=USAGE)
add("nbest", "--mix-one-for-two", N2 + ["--mix", "1"], must=["--mix"], codes=USAGE)
add("nbest", "--mix-two-for-one-model", NM + ["--mix", "0.5,0.5"], must=["--mix"], codes=USAGE)
add("nbest", "--mix-without-nn-costs", N + ["--mix", "0.5,0.5"], must=["--mix"], codes=USAGE)
add("nbest", "--mix-carry=sometimes", NM + ["--model", "{w}/model.pt", "--mix-carry", "sometimes"],
    must=["--mix-carry"], codes=USAGE)
add("nbest", "two-models-three-shares", NM + ["--model", "{w}/model.pt", "--mix", "0.2,0.3,0.5"],
    must=["--mix"], codes=USAGE)
add("nbest", "second-nn-costs-shorter", N2, must=["lmwt2.nn"], setup=[line("lmwt2.nn", 3, None)])
add("nbest", "second-nn-costs-other-hyps", N2, must=["lmwt2.nn"],
    setup=[line("lmwt2.nn", 2, "rec9-x-000-1 1.0")])
add("nbest", "second-nn-costs-nan", N2, must=["lmwt2.nn:4"], setup=[line("lmwt2.nn", 4, "rec1-rms-000-4 nan")])
add("nbest", "second-model-broken", NM + ["--model", "{w}/other.pt"], must=["other.pt"],
    setup=[checkpoint("other.pt", "truncated")])
for id, mix in [("sum", "[0.7, 0.7]"), ("negative", "[-1, 2]"), ("string", '"0.5,0.5"'),
                ("words", '["a", "b"]'), ("empty", "[]")]:
    add("nbest", f"params-mix-{id}", N2 + ["--params", "{w}/params.json"], must=["params.json", "mix"],
        setup=[put("params.json", f'{{"weight": 0.5, "inv_acwt": 10, "wip": 0, "mix": {mix}}}')], codes=(1, 2))
add("nbest", "params-mix-three-for-two", N2 + ["--params", "{w}/params.json"], must=["--mix", "params.json"],
    setup=[put("params.json", '{"weight": 0.5, "inv_acwt": 10, "wip": 0, "mix": [0.2, 0.3, 0.5]}')], codes=USAGE)

# --- rescore-tune --------------------------------------------------------------------------
U = ["{w}/nb", "--data-dir", "{w}/nb/data", "--nn-costs", "{w}/lmwt.nn", "--weights", "0,0.5",
     "--inv-acwts", "8,10", "--wips", "0"]
for opt, value in [("--weights", "a"), ("--weights", "0:1:0"), ("--weights", "nan,1"),
                   ("--weights", "1:0:0.1"), ("--inv-acwts", "0,inf"), ("--wips", ""),
                   ("--weights", "0:1000000:0.0001"), ("--weights", "-1,0.5"),
                   ("--inv-acwts", "-5,10")]:
    add("tune", f"{opt}={value}", U + [opt, value], must=[opt], codes=USAGE)
try:
    from rescore.cli.common import MAX_GRID_POINTS  # noqa: F401  (the grid bound of 12a)
    GRID_HANGS = None
except ImportError:
    GRID_HANGS = "a grid of 10^8 settings runs without end until parse_grid bounds it"
for c in CASES:
    if c.cmd == "tune" and c.id == "--weights=0:1000000:0.0001":
        c.skip = GRID_HANGS
add("tune", "grid-too-big", U + ["--weights", "0:1:0.001", "--inv-acwts", "1:100:0.01", "--wips", "-5:5:0.01"],
    must=["grid"], codes=USAGE, skip=GRID_HANGS)
add("tune", "dev-utts-select-nothing", U + ["--dev-utts", "{w}/utts.txt"], must=["utts.txt"],
    setup=[put("utts.txt", "nobody-000\n")], codes=(1, 2))
add("tune", "eval-utts-select-nothing", U + ["--eval-utts", "{w}/utts.txt"], must=["utts.txt"],
    setup=[put("utts.txt", "nobody-000\n")], codes=(1, 2))
add("tune", "dev-utts-empty", U + ["--dev-utts", "{w}/utts.txt"], must=["utts.txt"],
    setup=[put("utts.txt", "")], codes=(1, 2))
add("tune", "dev-utts-not-utf8", U + ["--dev-utts", "{w}/utts.txt"], must=["utts.txt:2"],
    setup=[put("utts.txt", b"rec1-rms-000\n\xff\n")], codes=(1, 2))
add("tune", "split-half-and-dev-utts", U + ["--split-half", "--dev-utts", "{w}/utts.txt"],
    must=["--split-half"], codes=USAGE)
add("tune", "params-out-under-file", U + ["--params-out", "{w}/afile/p.json"], must=["afile"], codes=(1, 2))
add("tune", "params-out-is-input", U + ["--params-out", "{w}/lmwt.nn"], must=["lmwt.nn"], codes=(1, 2))
add("tune", "report-under-file", U + ["--report", "{w}/afile/r.json"], must=["afile"], codes=(1, 2))
add("tune", "report-is-directory", U + ["--report", "{w}/nb"], must=["nb"], codes=(1, 2))
add("tune", "apply-to-data-dir", U + ["--apply-to", "{w}/nb", "{w}/nb/data", "--apply-data-dir",
                                      "{w}/nb/data", "--apply-nn-costs", "{w}/lmwt.nn"],
    must=["data"], codes=(1, 2))
add("tune", "apply-to-under-file", U + ["--apply-to", "{w}/nb", "{w}/afile/out", "--apply-data-dir",
                                        "{w}/nb/data", "--apply-nn-costs", "{w}/lmwt.nn"],
    must=["afile"], codes=(1, 2))
add("tune", "nn-costs-nan", U, must=["lmwt.nn:3"], setup=[line("lmwt.nn", 3, "rec1-rms-000-3 nan")])
add("tune", "nn-costs-missing-key", U, must=["lmwt.nn"], setup=[line("lmwt.nn", 1, None)])
add("tune", "acwt-nan", U, must=["acwt:1"], setup=[line("nb/acwt", 1, "rec1-rms-000-1 nan")])
add("tune", "acwt-truncated-gz", U, must=["acwt"], setup=[gz("nb/acwt", cut=25)])
add("tune", "data-text-not-utf8", U, must=["text:1"], setup=[put("nb/data/text", b"rec1-rms-000 \xff\n")])
add("tune", "data-text-missing", U, must=["text"], setup=[remove("nb/data/text")])
add("tune", "nbest-dir-missing", ["{w}/nope"] + U[1:], must=["nope"], codes=(1, 2))
add("tune", "cross-validate-and-params-out", U + ["--cross-validate", "--params-out", "{w}/p.json"],
    must=["--params-out"], codes=USAGE)
add("tune", "cross-validate-and-split-half", U + ["--cross-validate", "--split-half"], must=["--split-half"],
    codes=USAGE)
add("tune", "hyp-out-is-input", U + ["--hyp-out", "{w}/nb/data/text"], must=["text"], codes=(1, 2))
add("tune", "hyp-out-under-file", U + ["--cross-validate", "--hyp-out", "{w}/afile/h.txt"], must=["afile"],
    codes=(1, 2))
add("tune", "nn-costs-of-other-hyps", U + ["--cross-validate"], must=["lmwt.nn"],
    setup=[line("lmwt.nn", 1, "other-utt-000-1 1.5")])
U2 = U + ["--nn-costs", "{w}/lmwt2.nn"]
add("tune", "second-nn-costs-shorter", U2, must=["lmwt2.nn"], setup=[line("lmwt2.nn", 5, None)])
add("tune", "second-nn-costs-other-hyps", U2, must=["lmwt2.nn"],
    setup=[line("lmwt2.nn", 1, "rec9-x-000-1 1.0")])
add("tune", "second-nn-costs-extra-line", U2, must=["lmwt2.nn"],
    setup=[line("lmwt2.nn", 99, "rec9-x-000-1 1.0")])
add("tune", "--mixes-with-one-file", U + ["--mixes", "0:1:0.5"], must=["--mixes"], codes=USAGE)
for value in ("1.5", "-0.5,0.5", "a", "0:1:0"):
    add("tune", f"--mixes={value}", U2 + ["--mixes", value], must=["--mixes"], codes=USAGE)
add("tune", "--mixes-three-models-no-sum", U2 + ["--nn-costs", "{w}/lmwt.nn", "--mixes", "0.6,0.7"],
    must=["--mixes"], codes=USAGE)
add("tune", "apply-nn-costs-one-for-two", U2 + ["--apply-to", "{w}/nb", "{w}/out", "--apply-data-dir",
                                               "{w}/nb/data", "--apply-nn-costs", "{w}/lmwt.nn"],
    must=["--apply-nn-costs"], codes=USAGE)

# --- rescore-wer ---------------------------------------------------------------------------
W = ["{w}/ref.txt", "{w}/hyp.txt"]
add("wer", "both-empty", W, must=["ref.txt"], setup=[put("ref.txt", ""), put("hyp.txt", "")])
add("wer", "ref-empty", W, must=["ref.txt"], setup=[put("ref.txt", "")])
add("wer", "ref-without-words", W, must=["ref.txt"],
    setup=[put("ref.txt", "".join(f"rec1-rms-00{i}\n" for i in range(3))),
           put("hyp.txt", "".join(f"rec1-rms-00{i} a\n" for i in range(3)))])
add("wer", "ref-not-utf8", W, must=["ref.txt:2", "UTF-8"], setup=[line("ref.txt", 2, b"rec1-rms-001 caf\xe9")])
add("wer", "hyp-not-utf8", W, must=["hyp.txt:1"], setup=[put("hyp.txt", b"rec1-rms-000 \xff\xfe\n")])
add("wer", "hyp-missing-utt", W, must=["hyp.txt"], setup=[line("hyp.txt", 2, None)])
add("wer", "hyp-extra-utt", W, must=["hyp.txt"], setup=[line("hyp.txt", 99, "nobody-000 a b")])
add("wer", "ref-duplicate-key", W, must=["ref.txt:2"], setup=[line("ref.txt", 2, "rec1-rms-000 a")])
add("wer", "hyp-empty-line", W, must=["hyp.txt:2"], setup=[line("hyp.txt", 2, "")])
add("wer", "ref-missing", W, must=["ref.txt"], codes=(1, 2), setup=[remove("ref.txt")])
add("wer", "ref-directory", W, must=["ref.txt"], codes=(1, 2), setup=[mkdir("ref.txt")])
add("wer", "ref-truncated-gz", W, must=["ref.txt"], setup=[
    lambda w: (w / "ref.txt").write_bytes(gzip.compress((w / "ref.txt").read_bytes())[:20])])
add("wer", "ref-binary", W, must=["ref.txt"], setup=[put("ref.txt", b"\x00\x9f\x92\x96" * 8)])
add("wer", "--buckets=0", W + ["--train-text", "{w}/train.txt", "--buckets", "0"], must=["--buckets"], codes=USAGE)
add("wer", "--buckets=-2", W + ["--train-text", "{w}/train.txt", "--buckets", "-2"], must=["--buckets"], codes=USAGE)
add("wer", "--plot-without-train-text", W + ["--plot", "{w}/p.png"], must=["--plot"], codes=USAGE)
add("wer", "report-under-file", W + ["--report", "{w}/afile/r.json"], must=["afile"], codes=(1, 2))
add("wer", "report-is-directory", W + ["--report", "{w}/nb"], must=["nb"], codes=(1, 2))
add("wer", "report-is-ref", W + ["--report", "{w}/ref.txt"], must=["ref.txt"], codes=(1, 2))
add("wer", "plot-is-hyp", W + ["--train-text", "{w}/train.txt", "--plot", "{w}/hyp.txt"],
    must=["hyp.txt"], codes=(1, 2))
add("wer", "train-text-not-utf8", W + ["--train-text", "{w}/train.txt"], must=["train.txt:1"],
    setup=[put("train.txt", b"\xff\n")])
add("wer", "train-text-empty", W + ["--train-text", "{w}/train.txt"], must=["train.txt"],
    setup=[put("train.txt", "")])

# --- rescore-make-nbest --------------------------------------------------------------------
M = ["{w}/wavdata", "{w}/out", "--nj", "1"]
for opt, value in [("--lw", "nan"), ("--lw", "0"), ("--fwdflatlw", "-1"), ("--bestpathlw", "nan"),
                   ("--bestpathlw", "inf"), ("--wip", "0"), ("--wip", "2"), ("--wip", "nan"),
                   ("--nbest", "0"), ("--nj", "0"), ("--maxhmmpf", "0")]:
    add("make-nbest", f"{opt}={value}", M + [opt, value], must=[opt], codes=USAGE)
add("make-nbest", "no-wav.scp", M, must=["wav.scp"], setup=[remove("wavdata/wav.scp")])
add("make-nbest", "wav.scp-not-utf8", M, must=["wav.scp:1"], setup=[put("wavdata/wav.scp", b"reca \xff.wav\n")])
add("make-nbest", "wav.scp-empty", M, must=["wav.scp"], setup=[put("wavdata/wav.scp", "")])
add("make-nbest", "wav.scp-one-field", M, must=["wav.scp:1"], setup=[put("wavdata/wav.scp", "reca\n")])
add("make-nbest", "wav.scp-duplicate", M, must=["wav.scp:2"],
    setup=[lambda w: (w / "wavdata/wav.scp").write_text(2 * (w / "wavdata/wav.scp").read_text())])
add("make-nbest", "wav-missing", M, must=["a.wav"], setup=[remove("wavdata/a.wav")])
add("make-nbest", "wav-garbage", M, must=["a.wav"], setup=[put("wavdata/a.wav", b"RIFF\x00garbage")])
add("make-nbest", "wav-8khz", M, must=["a.wav", "16 kHz"], setup=[lambda w: _write_wav(w / "wavdata/a.wav", 8000, 1, 0.6)])
add("make-nbest", "wav-stereo", M, must=["a.wav"], setup=[lambda w: _write_wav(w / "wavdata/a.wav", 16000, 2, 0.6)])
add("make-nbest", "wav-is-directory", M, must=["a.wav"], setup=[mkdir("wavdata/a.wav")])
add("make-nbest", "segments-nan", M, must=["segments:1"], setup=[line("wavdata/segments", 1, "reca-0 reca nan 0.3")])
add("make-nbest", "segments-end-before-start", M, must=["segments:2"], setup=[line("wavdata/segments", 2, "reca-1 reca 0.5 0.3")])
add("make-nbest", "segments-unknown-recording", M, must=["segments:1"], setup=[line("wavdata/segments", 1, "reca-0 recz 0.0 0.3")])
add("make-nbest", "segments-not-utf8", M, must=["segments:2"], setup=[put("wavdata/segments", b"reca-0 reca 0.0 0.3\n\xff\n")])
add("make-nbest", "segments-word-time", M, must=["segments:1"], setup=[line("wavdata/segments", 1, "reca-0 reca zero 0.3")])
add("make-nbest", "text-not-utf8", M, must=["text:2"], setup=[put("wavdata/text", b"reca-0 a\nreca-1 \xff\n")])
add("make-nbest", "data-dir-missing", ["{w}/nowav", "{w}/out"], must=["nowav"], codes=(1, 2))
add("make-nbest", "data-dir-is-file", ["{w}/afile", "{w}/out"], must=["afile"], codes=(1, 2))
add("make-nbest", "out-is-file", M[:1] + ["{w}/afile"] + M[2:], must=["afile"], codes=(1, 2))
add("make-nbest", "out-under-file", M[:1] + ["{w}/afile/out"] + M[2:], must=["afile"], codes=(1, 2))
add("make-nbest", "dict-missing", M + ["--dict", "{w}/none.dict"], must=["none.dict"], codes=(1, 2))
add("make-nbest", "hmm-missing", M + ["--hmm", "{w}/nohmm"], must=["nohmm"], codes=(1, 2))

# --- rescore-tts-data ----------------------------------------------------------------------
S = ["{w}/text.txt", "{w}/out", "--nj", "1"]
for opt, value in [("--gap", "nan"), ("--gap", "-1"), ("--gap", "inf"), ("--nj", "0"),
                   ("--voices", "nosuchvoice"), ("--voices", ","), ("--voices", "rms,bogus"),
                   ("--prefix", "a b"), ("--prefix", "x/y")]:
    add("tts-data", f"{opt}={value}", S + [opt, value], must=[opt], codes=USAGE,
        skip=NO_FLITE if opt == "--voices" and value != "," else None)  # checked against flite's list
add("tts-data", "text-empty", S, must=["text.txt"], setup=[put("text.txt", "")])
add("tts-data", "text-blank", S, must=["text.txt"], setup=[put("text.txt", "\n\n  \n")])
add("tts-data", "text-not-utf8", S, must=["text.txt:3", "UTF-8"], setup=[line("text.txt", 3, b"\xffx")])
add("tts-data", "text-binary", S, must=["text.txt"], setup=[put("text.txt", b"\x00\xff" * 30)])
add("tts-data", "text-missing", S, must=["text.txt"], codes=USAGE, setup=[remove("text.txt")])
add("tts-data", "text-directory", S, must=["text.txt"], codes=USAGE, setup=[mkdir("text.txt")])
add("tts-data", "docids-count", S + ["--docids", "{w}/ids"], must=["ids"], setup=[put("ids", "d1\nd2\n")])
add("tts-data", "docids-not-utf8", S + ["--docids", "{w}/ids"], must=["ids:1"], setup=[put("ids", b"\xff\n")])
add("tts-data", "docids-slash", S + ["--docids", "{w}/ids"], must=["ids"],
    setup=[lambda w: (w / "ids").write_text("a/b\n" * len((w / "text.txt").read_text().splitlines()))])
add("tts-data", "out-is-file", S[:1] + ["{w}/afile"] + S[2:], must=["afile"], codes=(1, 2))
add("tts-data", "out-under-file", S[:1] + ["{w}/afile/out"] + S[2:], must=["afile"], codes=(1, 2))
add("tts-data", "out-text-is-input", ["{w}/d/text", "{w}/d", "--nj", "1"], must=["text"], codes=(1, 2),
    setup=[put("d/text", "the river flows\n")])
add("tts-data", "out-unwritable", S[:1] + ["{w}/ro/out"] + S[2:], must=["ro"], codes=(1, 2),
    setup=[mkdir("ro"), chmod("ro", 0o555)], skip=NOT_ROOT)


# --- rescore-lattice -----------------------------------------------------------------------
LC = ["cover", "--acoustic-scale", "0.1", "{w}/lat.txt", "{w}/c.txt"]
LCZ = LC[:3] + ["{w}/lat.txt.gz", "{w}/c.txt"]
add("lattice", "cover-lats-missing", LC, must=["lat.txt"], codes=(1, 2), setup=[remove("lat.txt")])
add("lattice", "cover-lats-empty", LC, must=["lat.txt", "at least one lattice"], setup=[put("lat.txt", "")])
add("lattice", "cover-lats-blank-lines", LC, must=["lat.txt", "at least one lattice"], setup=[put("lat.txt", "\n \n\n")])
add("lattice", "cover-lats-cut-short", LC, must=["lat.txt:12", "empty line"], setup=[put("lat.txt", LAT[:-1])])
add("lattice", "cover-lats-truncated-gz", LCZ, must=["lat.txt.gz", "gzip"], setup=[gz("lat.txt", cut=40)])
add("lattice", "cover-lats-gz-not-gzip", LCZ, must=["lat.txt.gz", "gzip"],
    setup=[put("lat.txt.gz", b"\x1f\x8b\x08garbage")])
add("lattice", "cover-lats-binary", LC, must=["lat.txt:1", "binary", "ark,t"], setup=[put("lat.txt", KALDI_BINARY_LAT)])
add("lattice", "cover-lats-binary-gz", LCZ, must=["lat.txt.gz:1", "binary"],
    setup=[put("lat.txt.gz", gzip.compress(KALDI_BINARY_LAT))])
add("lattice", "cover-lats-binary-int-vectors", LC, must=["lat.txt:1", "binary"],
    setup=[put("lat.txt", b"rec1-rms-000-1 \x00B\x04\x03\x00\x00\x00\x04\x15\x00\x00\x00")])
add("lattice", "cover-lats-not-utf8", LC, must=["lat.txt:8", "UTF-8"], setup=[line("lat.txt", 8, b"rec1-rms-\xff01 ")])
add("lattice", "cover-lats-duplicate-key", LC, must=["lat.txt:13", "once"],
    setup=[put("lat.txt", LAT + LAT[:LAT.index("rec1-rms-001")])])
add("lattice", "cover-lats-non-compact", LC, must=["lat.txt:2", "CompactLattice"],
    setup=[line("lat.txt", 2, "0\t1\t21\t1.5,10.25")])
add("lattice", "cover-lats-cycle", LC, must=["lat.txt:1", "acyclic"], setup=[line("lat.txt", 6, "3\t0\t22\t1,1,")])
add("lattice", "cover-lats-second-bad", LC, must=["lat.txt:10", "word id"], setup=[line("lat.txt", 10, "1\t2\tseven\t1,1,")])
add("lattice", "cover-gz-out-second-bad", LC[:-1] + ["{w}/c.txt.gz"], must=["lat.txt:9"],
    setup=[line("lat.txt", 9, "0\t1\t19\t1,nan,")])
add("lattice", "cover-out-is-input", LC[:-1] + ["{w}/lat.txt"], must=["lat.txt"], codes=(1, 2))
add("lattice", "cover-out-under-file", LC[:-1] + ["{w}/afile/c.txt"], must=["afile"], codes=(1, 2))
add("lattice", "cover-out-is-directory", LC[:-1] + ["{w}/cover"], must=["cover"], codes=(1, 2))
for opt, value in [("--acoustic-scale", "nan"), ("--acoustic-scale", "0"), ("--acoustic-scale", "-0.1"),
                   ("--acoustic-scale", "inf"), ("--lm-scale", "nan"), ("--lm-scale", "-1")]:
    add("lattice", f"cover{opt}={value}", LC + [opt, value], must=[opt], codes=USAGE)
LA = ["apply", "--acoustic-scale", "0.1", "--weight", "0.5", "{w}/lat.txt", "{w}/cover", "{w}/r.txt"]
add("lattice", "apply-words-missing", LA, must=["cover/words"], setup=[remove("cover/words")])
add("lattice", "apply-words-empty", LA, must=["cover/words", "at least one"], setup=[put("cover/words", "")])
add("lattice", "apply-words-not-int", LA, must=["cover/words:2"], setup=[line("cover/words", 2, "rec1-rms-000-2 21 x")])
add("lattice", "apply-nn-missing", LA, must=["cover/lmwt.nn"], setup=[remove("cover/lmwt.nn")])
add("lattice", "apply-nn-missing-key", LA, must=["lmwt.nn", "rec1-rms-000-2"], setup=[line("cover/lmwt.nn", 2, None)])
add("lattice", "apply-nn-extra-key", LA, must=["lmwt.nn", "rec1-rms-009-1"],
    setup=[line("cover/lmwt.nn", 99, "rec1-rms-009-1 1.0 2.0")])
add("lattice", "apply-nn-totals", LA, must=["lmwt.nn", "per-token"],
    setup=[put("cover/lmwt.nn", "rec1-rms-000-1 4.5 \nrec1-rms-000-2 4.0 \nrec1-rms-001-1 3.0 \n")])
add("lattice", "apply-nn-nan", LA, must=["lmwt.nn:2"], setup=[line("cover/lmwt.nn", 2, "rec1-rms-000-2 1.0 nan 2.0")])
add("lattice", "apply-archives-of-other-lattices", LA, must=["cover/words", "no lattice", "rec2-rms-001"],
    setup=[sub("cover/words", "rec1-rms-001", "rec2-rms-001"), sub("cover/lmwt.nn", "rec1-rms-001", "rec2-rms-001")])
add("lattice", "apply-words-no-cover-path", LA, must=["cover/words", "path cover", "rec1-rms-000"],
    setup=[line("cover/words", 2, "rec1-rms-000-2 21 14 3 "), line("cover/lmwt.nn", 2, "rec1-rms-000-2 1 1 1 1")])
add("lattice", "apply-lats-empty", LA, must=["lat.txt", "at least one lattice"], setup=[put("lat.txt", "")])
add("lattice", "apply-lats-binary-gz", LA[:5] + ["{w}/lat.txt.gz"] + LA[6:], must=["lat.txt.gz:1", "binary"],
    setup=[put("lat.txt.gz", gzip.compress(KALDI_BINARY_LAT))])
add("lattice", "apply-lats-second-bad", LA, must=["lat.txt:11"], setup=[line("lat.txt", 11, "2\t0.5")])
add("lattice", "apply-archives-missing", LA[:6] + ["{w}/nope"] + LA[7:], must=["nope"], codes=USAGE)
add("lattice", "apply-out-is-input", LA[:-1] + ["{w}/lat.txt"], must=["lat.txt"], codes=(1, 2))
add("lattice", "apply-out-is-archive", LA[:-1] + ["{w}/cover/lmwt.nn"], must=["lmwt.nn"], codes=(1, 2))
add("lattice", "apply-out-under-file", LA[:-1] + ["{w}/afile/r.txt"], must=["afile"], codes=(1, 2))
for opt, value in [("--weight", "nan"), ("--weight", "1.5"), ("--weight", "-0.5"), ("--acoustic-scale", "0")]:
    add("lattice", f"apply{opt}={value}", LA + [opt, value], must=[opt], codes=USAGE)

# the N-best step on the cover paths (lmrescore_lattice.sh stage 3): utterances of the paths
# and of the data dir must match
add("nbest", "data-segments-missing-utt", N, must=["segments", "rec1-rms-001"], setup=[line("nb/data/segments", 2, None)])
add("nbest", "data-text-utt-without-nbest", N, must=["text", "rec9-x-000"],
    setup=[line("nb/data/text", 99, "rec9-x-000 a b"), line("nb/data/utt2spk", 99, "rec9-x-000 rec9-x"),
           line("nb/data/segments", 99, "rec9-x-000 rec9 0.0 1.0")])

# --- rescore-import-kaldi-lm ---------------------------------------------------------------
K = ["{w}/kaldi.pt", "{w}/kvocab.txt", "{w}/imp", "--model-type", "LSTM", "--embedding-dim",
     str(KDIM), "--hidden-dim", str(KDIM), "--nlayers", "1"]
add("import-kaldi-lm", "model-missing", K, must=["kaldi.pt"], codes=(1, 2), setup=[remove("kaldi.pt")])
add("import-kaldi-lm", "model-directory", K, must=["kaldi.pt"], codes=(1, 2), setup=[mkdir("kaldi.pt")])
add("import-kaldi-lm", "model-empty", K, must=["kaldi.pt"], setup=[put("kaldi.pt", b"")])
add("import-kaldi-lm", "model-text", K, must=["kaldi.pt", "state_dict"], setup=[put("kaldi.pt", "hello\n")])
for how in ("truncated", "pickle-code", "torch-code"):
    add("import-kaldi-lm", f"model-{how}", K, must=["kaldi.pt", "state_dict"], setup=[kaldi_model("kaldi.pt", how)])
add("import-kaldi-lm", "model-nested", K, must=["kaldi.pt", "state_dict", "'model'"],
    setup=[kaldi_model("kaldi.pt", "nested")])
add("import-kaldi-lm", "model-is-rescore-checkpoint", ["{w}/model.pt"] + K[1:], must=["model.pt", "rescore checkpoint"])
add("import-kaldi-lm", "model-wrong-names", K, must=["kaldi.pt", "missing rnn.weight_ih_l0", "unexpected lstm."],
    setup=[kaldi_model("kaldi.pt", "renamed")])
add("import-kaldi-lm", "model-wrong-shapes", K[:6] + ["8", "--hidden-dim", "8"] + K[9:], must=["kaldi.pt", "shape"])
add("import-kaldi-lm", "model-wrong-type", K[:4] + ["GRU"] + K[5:], must=["kaldi.pt", "rnn.weight_ih_l0"])
add("import-kaldi-lm", "model-wrong-nlayers", K[:-1] + ["2"], must=["kaldi.pt", "missing rnn.weight_ih_l1"])
add("import-kaldi-lm", "model-nan", K, must=["kaldi.pt", "finite"], setup=[kaldi_model("kaldi.pt", "nan")])
add("import-kaldi-lm", "model-untied-with-tied", K + ["--tied"], must=["kaldi.pt", "tied"],
    setup=[kaldi_model("kaldi.pt", "untied")])
add("import-kaldi-lm", "vocab-one-word-short", K, must=["kvocab.txt", "rows", "28 words"],
    setup=[line("kvocab.txt", 2, None)])
add("import-kaldi-lm", "vocab-one-word-more", K, must=["kvocab.txt", "rows", "30 words"],
    setup=[line("kvocab.txt", 30, "zebra 29")])
add("import-kaldi-lm", "vocab-not-utf8", K, must=["kvocab.txt:3", "UTF-8"], setup=[line("kvocab.txt", 3, b"\xe9t\xe9 2")])
add("import-kaldi-lm", "vocab-bad-line", K, must=["kvocab.txt:2", "word id"], setup=[line("kvocab.txt", 2, "a")])
add("import-kaldi-lm", "vocab-empty", K, must=["kvocab.txt"], setup=[put("kvocab.txt", "")])
add("import-kaldi-lm", "vocab-missing", K, must=["kvocab.txt"], codes=(1, 2), setup=[remove("kvocab.txt")])
add("import-kaldi-lm", "vocab-is-lattice", ["{w}/kaldi.pt", "{w}/lat.txt"] + K[2:], must=["lat.txt:1", "word id"])
add("import-kaldi-lm", "vocab-without-oov", K + ["--oov", "<UNK>"], must=["kvocab.txt", "--oov"])
add("import-kaldi-lm", "vocab-without-boundary", K + ["--sent-boundary", "<bos>"], must=["kvocab.txt", "--sent-boundary"])
for opt, value in [("--embedding-dim", "0"), ("--hidden-dim", "-4"), ("--nlayers", "0"), ("--context", "0"),
                   ("--model-type", "RNN"), ("--embedding-dim", "x")]:
    add("import-kaldi-lm", f"{opt}={value}", K + [opt, value], must=[opt], codes=USAGE)
add("import-kaldi-lm", "--nhead=0-transformer", K[:4] + ["Transformer"] + K[5:] + ["--nhead", "0"], must=["--nhead"],
    codes=USAGE)
add("import-kaldi-lm", "--nhead-not-dividing", K[:4] + ["Transformer"] + K[5:] + ["--nhead", "3"], must=["--nhead"],
    codes=USAGE)
add("import-kaldi-lm", "embedding-not-hidden", K[:8] + ["8"] + K[9:], must=["--hidden-dim"], codes=USAGE)
add("import-kaldi-lm", "out-dir-is-file", K[:2] + ["{w}/afile"] + K[3:], must=["afile"], codes=(1, 2))
add("import-kaldi-lm", "out-dir-under-file", K[:2] + ["{w}/afile/imp"] + K[3:], must=["afile"], codes=(1, 2))
add("import-kaldi-lm", "out-dir-holds-trained-model", K, must=["imp/model.pt", "earlier"],
    setup=[lambda w: shutil.copytree(w / "nb", w / "imp") and shutil.copy(w / "model.pt", w / "imp" / "model.pt")])
add("import-kaldi-lm", "out-dir-holds-other-model.pt", K, must=["imp/model.pt", "earlier"],
    setup=[put("imp/model.pt", b"not a checkpoint")])
add("import-kaldi-lm", "out-model-is-input", ["{w}/k/model.pt"] + K[1:2] + ["{w}/k"] + K[3:], must=["model.pt"],
    codes=(1, 2), setup=[lambda w: (w / "k").mkdir() or shutil.copy(w / "kaldi.pt", w / "k" / "model.pt")])
add("import-kaldi-lm", "out-dir-unwritable", K[:2] + ["{w}/ro/imp"] + K[3:], must=["ro"], codes=(1, 2),
    setup=[mkdir("ro"), chmod("ro", 0o555)], skip=NOT_ROOT)

# ------------------------------------------------------------------------------------------

def snapshot(root: Path) -> Dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha1(Path(p).read_bytes()).hexdigest()
    return out


def run_case(case: Case, world: Path):
    for op in case.setup:
        op(world)
    before = snapshot(world)
    args = [a.replace("{w}", str(world)) for a in case.args]
    result = CliRunner().invoke(_commands()[case.cmd], args, catch_exceptions=True)
    return result, before


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, base: Path, tmp_path: Path):
    if case.skip:
        pytest.skip(case.skip)
    world = tmp_path / "w"
    shutil.copytree(base, world)
    scp = world / "wavdata" / "wav.scp"  # the copy's own WAV, not the base world's
    scp.write_text(scp.read_text().replace(str(base), str(world)))
    try:
        result, before = run_case(case, world)
    finally:
        for p in (world / "ro",):
            if p.exists():
                os.chmod(p, 0o755)
    out = result.output
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-1500:]
        raise AssertionError(f"TRACEBACK: {case.name}: {type(exc).__name__}: {exc}\n{tb}")
    assert "Traceback" not in out, f"TRACEBACK: {case.name}: {out[-1500:]}"
    assert result.exit_code != 0, f"SILENT: {case.name} exited 0: {out[-800:]}"
    assert result.exit_code in case.codes, \
        f"STATUS: {case.name}: exit {result.exit_code}, expected {case.codes}: {out[-800:]}"
    msg = out.replace(str(world) + "/", "").replace(str(world), "")
    assert "error: " in out, f"MESSAGE: {case.name}: no 'error: ' line: {out[-800:]}"
    missing = [m.replace("{w}/", "") for m in case.must if m.replace("{w}/", "") not in msg]
    assert not missing, f"MESSAGE: {case.name}: {missing} not in: {msg[-800:]}"
    assert EXPECT_WORDS.search(msg), f"MESSAGE: {case.name}: says nothing of what was expected: {msg[-800:]}"
    after = snapshot(world)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"WRITTEN: {case.name}: {changed[:10]}"


def test_enough_cases_over_every_command():
    by_cmd: Dict[str, int] = {}
    for c in CASES:
        by_cmd[c.cmd] = by_cmd.get(c.cmd, 0) + 1
    assert len(CASES) >= 150, len(CASES)
    assert set(by_cmd) == set(_commands()), by_cmd
    assert len({c.name for c in CASES}) == len(CASES), "case names must be unique"
