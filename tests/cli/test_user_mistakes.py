"""Plausible user mistakes: each gives a clear error or a warning that names the cause, never a
silently wrong figure.

The bad-input suite (tests/cli/test_bad_input.py) breaks files; this one makes the mistakes a new
user makes with good files: the wrong words.txt, REF and HYP swapped, another set's data dir, a
model dir instead of model.pt, an acoustic scale given as --inv-acwt, ... Each case runs one
command in-process on a copy of the bad-input suite's world (its ``base`` fixture and mutation
helpers) and checks one of three outcomes:

* ``error``: the exit status (1 bad data, 2 bad option), an ``error: `` line naming the file or
  option and the cause (regexes, case-insensitive), no traceback, nothing written;
* ``warning``: a WARNING (or ERROR) log record or output line naming the cause, whatever the
  exit status: the mistake cannot be refused, because the same input is right for some user
  (each such case says why in its ``why``);
* ``same``: the input is one the tools may read as the user meant (a CRLF file, a BOM, archives
  in another order): the figure equals that of the clean input, or else a clear error that names
  the cause (``must``).

Sections: the wrong files, wrong values, damaged or disguised files, the same input written
another way, warnings, and cases nobody detects yet (none at present; such a case is a strict
xfail naming the change it needs, and moves up when that lands). Two subprocess tests at
the end: Ctrl-C in training, and a Kaldi step run outside a recipe dir.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Sequence, Tuple

import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from tests.cli.test_bad_input import (KDIM, NBEST_SMALL, T, WORDS, _commands, base, gz, line, mkdir, put,  # noqa: F401
                            remove, snapshot, sub)

N = ["{w}/nb", "{w}/out", "--data-dir", "{w}/nb/data"]
NM = N + ["--model", "{w}/model.pt", "--device", "cpu"]
U = ["{w}/nb", "--data-dir", "{w}/nb/data", "--weights", "0,0.5", "--inv-acwts", "8,10", "--wips", "0"]
W = ["{w}/ref.txt", "{w}/hyp.txt"]
P = ["{w}/model.pt", "{w}/text.txt", "--device", "cpu"]
K = ["{w}/kaldi.pt", "{w}/kvocab.txt", "{w}/imp", "--embedding-dim", str(KDIM), "--hidden-dim", str(KDIM),
     "--nlayers", "1"]
ARCHIVES = ("acwt", "lmwt.withlm", "lmwt.nolm", "words", "words_text")
ECO = REPO_ROOT / "tests" / "fixtures" / "ecosystems"


# ------------------------------------------------------------------------------------------
# mutations beyond the bad-input suite's (put, line, remove, mkdir, gz, sub)

def edit(rel: str, fn: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    """Rewrite a file's bytes with fn."""
    def op(w: Path):
        p = w / rel
        p.write_bytes(fn(p.read_bytes()))
    return op


def lines_of(fn: Callable[[List[bytes]], List[bytes]]) -> Callable[[bytes], bytes]:
    return lambda b: b"".join(x + b"\n" for x in fn(b.splitlines()))


def shuffled(lines: List[bytes]) -> List[bytes]:
    out = list(lines)
    random.Random(3).shuffle(out)
    return out


def copy(src: str, dst: str) -> Callable[[Path], None]:
    def op(w: Path):
        (w / dst).parent.mkdir(parents=True, exist_ok=True)
        if (w / src).is_dir():
            shutil.copytree(w / src, w / dst)
        else:
            shutil.copy(w / src, w / dst)
    return op


def other_set(dst: str) -> Callable[[Path], None]:
    """A copy of the world's N-best dir as another set: every utterance renamed (rec1 -> rec7,
    rec2 -> rec8), archives and data dir alike."""
    def op(w: Path):
        shutil.copytree(w / "nb", w / dst)
        for p in (w / dst).rglob("*"):
            if p.is_file() and p.name != "words.txt":
                p.write_text(p.read_text().replace("rec1", "rec7").replace("rec2", "rec8"))
    return op


def model_of(rel: str, words: Sequence[str]) -> Callable[[Path], None]:
    """A tiny checkpoint (random weights, as the world's model.pt) over other words."""
    def op(w: Path):
        import torch

        from rescore.models import ModelConfig, build_model, save_checkpoint
        from rescore.vocab import Vocabulary

        torch.manual_seed(0)
        save_checkpoint(build_model(ModelConfig(hidden=8, layers=1, dropout=0.0),
                                    Vocabulary(["<eos>", "<unk>"] + list(words))), w / rel)
    return op


def nbest_costs(rel: str, extra_tokens: int = 0) -> Callable[[Path], None]:
    """Per-token NN LM costs (lmwt.nn) for the world's hypotheses; extra_tokens > 0: costs of
    another decode (other hypotheses under the same keys, so other lengths)."""
    def op(w: Path):
        rows = [ln.split() for ln in (w / "nb" / "words_text").read_text().splitlines()]
        (w / rel).write_text("".join(f"{r[0]} {' '.join(['1.5'] * (len(r) + extra_tokens))}\n" for r in rows))
    return op


def permuted_words_txt(w: Path) -> None:
    """The N-best dir read through another recognizer's words.txt: same ids, other words."""
    lines = (w / "nb" / "words.txt").read_text().splitlines()
    syms = [ln.split()[0] for ln in lines]
    ids = [ln.split()[1] for ln in lines]
    plain = [i for i, s in enumerate(syms) if not s.startswith("<")]
    rot = plain[7:] + plain[:7]
    new = list(syms)
    for i, j in zip(plain, rot):
        new[i] = syms[j]
    (w / "nb" / "words.txt").write_text("".join(f"{s} {i}\n" for s, i in zip(new, ids)))
    (w / "nb" / "words_text").unlink()  # the ids are all the dir has: as Kaldi's nbest-to-linear writes


def accented(w: Path) -> None:
    """References with accented words (NFC) and a first pass spelling them decomposed (NFD)."""
    (w / "ref.txt").write_text("rec1-rms-000 the café is open\nrec1-rms-001 a naïve rôle\n")
    (w / "hyp.txt").write_text(unicodedata.normalize("NFD", (w / "ref.txt").read_text()))


def upper(rel: str) -> Callable[[Path], None]:
    def op(w: Path):
        p = w / rel
        out = []
        for ln in p.read_text().splitlines():
            key, _, rest = ln.partition(" ")
            out.append(f"{key} {rest.upper()}")
        p.write_text("\n".join(out) + "\n")
    return op


def one_best_ids(w: Path) -> None:
    """The 1-best as word ids (the 'words' archive's rank-1 rows), not as words."""
    rows = {}
    for ln in (w / "nb" / "words").read_text().splitlines():
        key, *ids = ln.split()
        rows.setdefault(key.rsplit("-", 1)[0], " ".join(ids))
    (w / "hyp.txt").write_text("".join(f"{u} {i}\n" for u, i in rows.items()))


def two_systems(w: Path) -> None:
    """A second 1-best (hyp2.txt: rank 2 where there is one) to compare with hyp.txt."""
    rows = {}
    for ln in (w / "nb" / "words_text").read_text().splitlines():
        key, _, words = ln.partition(" ")
        rows.setdefault(key.rsplit("-", 1)[0], []).append(words)
    (w / "hyp2.txt").write_text("".join(f"{u} {h[min(1, len(h) - 1)]}\n" for u, h in rows.items()))


def ten_hyps_in(names: Sequence[str] = ARCHIVES) -> Callable[[Path], None]:
    """rec1-rms-000 gets hypotheses 5..11 (copies of rank 4; ranks 10 and 11 sort before 2) in
    the archives named."""
    def op(w: Path):
        for name in names:
            p = w / "nb" / name
            lines = p.read_text().splitlines()
            four = next(ln for ln in lines if ln.startswith("rec1-rms-000-4 "))
            at = lines.index(four) + 1
            lines[at:at] = [four.replace("-000-4 ", f"-000-{k} ", 1) for k in range(5, 12)]
            p.write_text("\n".join(lines) + "\n")
    return op


ten_hyps = ten_hyps_in()


def symlink(target: str, link: str) -> Callable[[Path], None]:
    def op(w: Path):
        (w / link).parent.mkdir(parents=True, exist_ok=True)
        (w / link).symlink_to(w / target)
    return op


def hardlink(target: str, link: str) -> Callable[[Path], None]:
    def op(w: Path):
        (w / link).parent.mkdir(parents=True, exist_ok=True)
        (w / link).hardlink_to(w / target)
    return op


def shift_keys(nbest: str, names: Sequence[str]) -> Callable[[Path], None]:
    """Each utterance's N-best keyed as the next utterance's (the last as the first's): an
    off-by-one in a script that renamed the keys; the archives stay in blocks."""
    def op(w: Path):
        utts = [ln.split()[0] for ln in (w / nbest / "data" / "text").read_text().splitlines()]
        to = dict(zip(utts, utts[1:] + utts[:1]))
        for name in names:
            p = w / nbest / name
            if not p.exists():
                continue
            out = []
            for ln in p.read_text().splitlines():
                key, _, rest = ln.partition(" ")
                u, r = key.rsplit("-", 1)
                out.append(f"{to[u]}-{r} {rest}")
            p.write_text("\n".join(out) + "\n")
    return op


def _rotated_refs(text: str) -> str:
    """A Kaldi text whose references are each the next utterance's."""
    rows = [ln.partition(" ") for ln in text.splitlines()]
    words = [r[2] for r in rows]
    return "".join(f"{k} {v}\n" for (k, _, _), v in zip(rows, words[1:] + words[:1]))


def icefall_rotated_refs(dst: str) -> Callable[[Path], None]:
    """The icefall dump with each cut's reference moved to the next cut."""
    def op(w: Path):
        rows = [json.loads(ln) for ln in (ECO / "icefall" / "nbest-test-clean.jsonl").read_text().splitlines()]
        cuts = list(dict.fromkeys(r["cut_id"] for r in rows if "ref" in r))
        refs = {r["cut_id"]: r["ref"] for r in rows if "ref" in r}
        to = dict(zip(cuts, cuts[1:] + cuts[:1]))
        for r in rows:
            if "ref" in r:
                r["ref"] = refs[to[r["cut_id"]]]
        (w / dst).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return op


def raw_transcripts(rel: str) -> Callable[[Path], None]:
    """References as a raw transcript: sentence case, a comma after the second word, a full
    stop at the end."""
    def op(w: Path):
        out = []
        for ln in (w / rel).read_text().splitlines():
            key, *words = ln.split()
            if words:
                words[0] = words[0].capitalize()
                if len(words) > 2:
                    words[1] += ","
                words[-1] += "."
            out.append(" ".join([key, *words]))
        (w / rel).write_text("\n".join(out) + "\n")
    return op


def train_text_with_refs(dst: str) -> Callable[[Path], None]:
    """The world's training text with the test references appended (an LM trained on it has
    seen them)."""
    def op(w: Path):
        refs = [ln.split(maxsplit=1)[1] for ln in (w / "nb" / "data" / "text").read_text().splitlines()]
        (w / dst).write_text((w / "train.txt").read_text() + "".join(r + "\n" for r in refs))
    return op


def trained_on(text: str, out: str) -> Callable[[Path], None]:
    """A tiny LM trained (rescore-train-lm, one epoch) on ``text`` into ``out``."""
    def op(w: Path):
        args = [a.replace("{w}", str(w)) for a in T]
        args[args.index("--train") + 1] = str(w / text)
        args[args.index("--out-dir") + 1] = str(w / out)
        r = CliRunner().invoke(_commands()["train-lm"], args)
        assert r.exit_code == 0, r.output
    return op


def tsv_of(nbest: str, dst: str) -> Callable[[Path], None]:
    """The N-best dir as a TSV file (rescore-convert-nbest), at dst."""
    def op(w: Path):
        from rescore.nbest.tables import load_table
        from rescore.formats.tsv import write_nbest_table

        (w / dst).parent.mkdir(parents=True, exist_ok=True)
        write_nbest_table(w / dst, load_table(w / nbest, "kaldi"))
    return op


# ------------------------------------------------------------------------------------------
# cases

@dataclass
class Mistake:
    id: str
    cmd: str
    args: Sequence[str]
    expect: str  # error | warning | same
    must: Sequence[str] = ()  # regexes (case-insensitive) the message or warning must match
    codes: Tuple[int, ...] = (1,)
    setup: Sequence[Callable[[Path], None]] = ()
    why: str = ""  # warning: why it cannot be refused
    needs: str = ""  # nobody detects it yet: the change it needs (xfail, strict)
    figure: str = "out/report.json"  # same: the JSON file whose "wer" is compared
    pre: Sequence[Callable[[Path], None]] = ()  # same: applied to the clean world too
    marks: list = field(default_factory=list)


MISTAKES: List[Mistake] = []


def add(*args, **kw):
    MISTAKES.append(Mistake(*args, **kw))


# --- the wrong files -----------------------------------------------------------------------
add("nbest-data-dir-of-another-set", "nbest", N[:2] + ["--data-dir", "{w}/nb7/data"], "error",
    must=["nb7/data/(text|segments)", "rec1-rms-000|rec7"], setup=[other_set("nb7")])
add("nbest-segments-of-another-set", "nbest", N, "error", must=["segments", "rec1-rms-000"],
    setup=[other_set("nb7"), copy("nb7/data/segments", "nb/data/segments")])
add("nbest-utt2spk-of-another-set", "nbest", N, "error", must=["utt2spk", "rec1-rms-000"],
    setup=[other_set("nb7"), remove("nb/data/segments"), copy("nb7/data/utt2spk", "nb/data/utt2spk")])
add("nbest-words.txt-too-small", "nbest", N + ["--words-txt", "{w}/small.txt"], "error", must=["small.txt|words"],
    setup=[remove("nb/words_text"), put("small.txt", "<eps> 0\na 1\nalong 2\nblue 3\n")])
add("nbest-nn-costs-of-another-set", "nbest", N + ["--nn-costs", "{w}/nb7.nn"], "error",
    must=["nb7.nn", "rec7|rec1"], setup=[other_set("nb7"), nbest_costs("x.nn"), copy("x.nn", "nb7.nn"),
                                        sub("nb7.nn", "rec1", "rec7")])
add("nbest-nn-costs-of-another-decode", "nbest", N + ["--nn-costs", "{w}/other.nn"], "error",
    must=["other.nn", "per-token costs"], setup=[nbest_costs("other.nn", extra_tokens=2)])
add("tune-nn-costs-of-another-decode", "tune", U + ["--nn-costs", "{w}/other.nn"], "error",
    must=["other.nn", "per-token costs"], setup=[nbest_costs("other.nn", extra_tokens=1)])
add("nbest-params-of-two-models-for-one", "nbest", NM + ["--params", "{w}/p2.json"], "error",
    must=["--mix", "p2.json"], codes=(2,),
    setup=[put("p2.json", json.dumps({"weight": 0.5, "inv_acwt": 10.0, "wip": 0.0, "mix": [0.6, 0.4]}))])
add("nbest-params-is-a-tune-report", "nbest", N + ["--params", "{w}/r.json"], "error",
    must=["r.json", "weight"], setup=[put("r.json", json.dumps({"best": {"weight": 0.0, "inv_acwt": 10.0,
                                                                          "wip": 0.0}, "dev_wer": 9.5}))])
add("nbest-params-is-an-nbest-report", "nbest", N + ["--params", "{w}/nb-report.json"], "error",
    must=["nb-report.json", "weight"],
    setup=[put("nb-report.json", json.dumps({"wer": 9.5, "params": {"weight": 0.0, "inv_acwt": 10, "wip": 0}}))])
add("nbest-model-dir-not-model.pt", "nbest", N + ["--model", "{w}/mdir", "--device", "cpu"], "error",
    must=["--model", "mdir", "directory"], codes=(2,), setup=[mkdir("mdir"), copy("model.pt", "mdir/model.pt")])
add("ppl-model-dir-not-model.pt", "ppl", ["{w}/mdir", "{w}/text.txt", "--device", "cpu"], "error",
    must=["mdir", "directory"], codes=(2,), setup=[mkdir("mdir"), copy("model.pt", "mdir/model.pt")])
add("nbest-model-is-kaldi-state-dict", "nbest", N + ["--model", "{w}/kaldi.pt", "--device", "cpu"], "error",
    must=["kaldi.pt", "rescore-import-kaldi-lm|checkpoint"])
add("import-kaldi-lm-without-model-type", "import-kaldi-lm", K, "error", must=["--model-type"], codes=(2,))
add("import-kaldi-lm-wrong-model-type", "import-kaldi-lm", K + ["--model-type", "GRU"], "error",
    must=["kaldi.pt", "GRU|gru|weight"])
add("import-kaldi-lm-vocab-of-another-model", "import-kaldi-lm", K + ["--model-type", "LSTM"], "error",
    must=["kvocab.txt|kaldi.pt", "words|rows|size"], setup=[line("kvocab.txt", 99, "zebra 29")])
add("tune-eval-utts-of-another-set", "tune", U + ["--eval-utts", "{w}/nb7/data/text"], "error",
    must=["nb7/data/text", "none of the"], setup=[other_set("nb7")])
add("wer-hyp-of-another-set", "wer", ["{w}/ref.txt", "{w}/nb7/data/text"], "error", must=["nb7/data/text|ref.txt"],
    setup=[other_set("nb7")])
# (the message names the file as "segments", not its path: enough here, where only one is given)
add("wer-groups-of-another-set", "wer", W + ["{w}/hyp2.txt", "--groups", "{w}/nb7/data/segments"], "error",
    must=["segments", "a group for every utterance", "rec1-rms-000"], setup=[other_set("nb7"), two_systems])
add("wer-nbest-archive-as-hyp", "wer", ["{w}/ref.txt", "{w}/nb/words_text"], "error", must=["words_text"])

# --- wrong values --------------------------------------------------------------------------
add("nbest-negative-weight", "nbest", NM + ["--weight", "-0.5"], "error", must=["--weight"], codes=(2,))
add("nbest-lmwt-as-weight", "nbest", NM + ["--weight", "10"], "error", must=["--weight"], codes=(2,))
add("nbest-negative-inv-acwt", "nbest", N + ["--inv-acwt", "-10"], "error", must=["--inv-acwt"], codes=(2,))
add("tune-negative-weights", "tune", U[:3] + ["--nn-costs", "{w}/lmwt.nn", "--weights", "-0.5,0.5"], "error",
    must=["--weights"], codes=(2,))
add("nbest-weight-without-nn-costs", "nbest", N + ["--weight", "0.5"], "error", must=["--weight", "NN LM costs"],
    codes=(2,))
add("nbest-oov-penalty-without-model", "nbest", N + ["--nn-costs", "{w}/lmwt.nn", "--oov-penalty", "5"], "error",
    must=["--oov-penalty", "--model"], codes=(2,))
add("tune-refine-rounds-without-refine-model", "tune", U + ["--refine-rounds", "5"], "error",
    must=["--refine-rounds", "--refine-model"], codes=(2,))
add("tune-cross-validate-with-params-out", "tune", U + ["--cross-validate", "--params-out", "{w}/p.json"], "error",
    must=["--params-out", "two"], codes=(2,))
add("nbest-out-dir-is-the-data-dir", "nbest", ["{w}/nb", "{w}/nb/data", "--data-dir", "{w}/nb/data"], "error",
    must=["data"], codes=(1, 2))

# --- damaged or disguised files ------------------------------------------------------------
add("nbest-truncated-archive", "nbest", N, "error", must=["acwt|lmwt", "rec2-awb-001"],
    setup=[edit("nb/acwt", lines_of(lambda ls: ls[:-3]))])
add("nbest-truncated-gzip-archive", "nbest", N, "error", must=["acwt"], setup=[gz("nb/acwt", cut=40)])
add("nbest-empty-data-dir", "nbest", NM, "error", must=["data", "text|empty"],
    setup=[remove("nb/data"), mkdir("nb/data")])
add("nbest-archives-of-two-decodes", "nbest", N, "error", must=["acwt|lmwt|words", "rec1-rms-000"],
    setup=[ten_hyps_in(("acwt",))])

# --- the same input, written another way: the figure must not move ----------------------------
# (gzip data under a name without .gz: the readers know gzip by its first bytes)
add("nbest-gzip-named-without-gz", "nbest", N, "same", setup=[edit("nb/acwt", gzip.compress)])
add("wer-gzip-named-without-gz", "wer", W + ["--report", "{w}/out/w.json"], "same", figure="out/w.json",
    setup=[mkdir("out"), edit("ref.txt", gzip.compress)])
add("nbest-crlf-archives", "nbest", N, "same", setup=[edit(f"nb/{a}", lambda b: b.replace(b"\n", b"\r\n"))
                                                       for a in ("words_text", "acwt")])
add("nbest-crlf-references", "nbest", N, "same", setup=[edit("nb/data/text", lambda b: b.replace(b"\n", b"\r\n"))])
# (a UTF-8 byte order mark, as Windows editors write, first in a text file: dropped on reading)
add("nbest-bom-references", "nbest", N, "same", must=["byte order mark|BOM"],
    setup=[edit("nb/data/text", lambda b: b"\xef\xbb\xbf" + b)])
add("nbest-bom-words.txt", "nbest", N, "same",
    setup=[remove("nb/words_text"), edit("nb/words.txt", lambda b: b"\xef\xbb\xbf" + b)])
add("wer-crlf-reference", "wer", W + ["--report", "{w}/out/w.json"], "same", figure="out/w.json",
    setup=[mkdir("out"), edit("ref.txt", lambda b: b.replace(b"\n", b"\r\n"))])
add("wer-bom-reference", "wer", W + ["--report", "{w}/out/w.json"], "same", figure="out/w.json",
    must=["byte order mark|BOM"], setup=[mkdir("out"), edit("ref.txt", lambda b: b"\xef\xbb\xbf" + b)])
add("nbest-sorted-archives", "nbest", N, "same", pre=[ten_hyps], must=["words_text|acwt|words", "contiguous"],
    setup=[edit(f"nb/{a}", lines_of(sorted)) for a in ARCHIVES])
add("nbest-one-archive-shuffled", "nbest", N, "same", must=["acwt", "expected key"],
    setup=[edit("nb/acwt", lines_of(shuffled))])
add("nbest-utterances-in-another-order", "nbest", N + ["--model", "{w}/model.pt", "--device", "cpu"], "same",
    setup=[edit(f"nb/{a}", lines_of(lambda ls: sorted(ls, key=lambda x: (x.split()[0].rsplit(b"-", 1)[0][::-1],
                                                                          x.split()[0]))))
           for a in ARCHIVES])

# --- warnings: the input is right for someone ----------------------------------------------
add("tune-dev-and-eval-utts-overlap", "tune", U + ["--dev-utts", "{w}/utts.txt", "--eval-utts", "{w}/utts.txt"],
    "warning", must=["overlap"], why="tuning on a set and reporting on an overlapping one is legal (a quick check), "
                                      "only its held-out figure is not held out")
add("tune-grid-edge", "tune", U[:3] + ["--inv-acwts", "1,2", "--wips", "0"], "warning", must=["edge of its grid"],
    why="the best of a grid is a valid answer; a better one may lie outside it")
add("tune-costs-scored-with-carry", "tune", U + ["--nn-costs", "{w}/scored/lmwt.nn"], "log",
    must=["state-carry rescored", "--refine-model"],
    setup=[lambda w: CliRunner().invoke(_commands()["nbest"], [str(w / "nb"), str(w / "scored"), "--data-dir",
                                                                 str(w / "nb/data"), "--model", str(w / "model.pt"),
                                                                 "--device", "cpu", "--weight", "0.5"])],
    why="the costs are right at the setting they were scored at, and tuning near it may be what the user wants "
        "(on a small dev set the refining tune did worse on test: a note, not a warning)")
add("tune-refine-model-without-carry", "tune", U + ["--refine-model", "{w}/model.pt", "--device", "cpu",
                                                    "--state-carry", "none"], "warning",
    must=["do not depend on the setting"], why="refining without carry is harmless, only useless")

# --- the vocabulary and symbol-table checks, the bootstrap's sample, overflow, the OOV default -----
add("nbest-words.txt-of-another-recognizer", "nbest", N, "warning",
    must=["first pass \\(rank 1\\) has a WER of", "wrong words\\.txt", "nb/words\\.txt"], setup=[permuted_words_txt],
    why="a first pass that shares nothing with the references could in principle be a terrible decode")
add("nbest-lm-of-another-language", "nbest", N + ["--model", "{w}/fr.pt", "--device", "cpu"], "error",
    must=["fr.pt", "vocabulary covers the hypotheses", "100.0 % of 68 tokens", "--allow-oov-rate"],
    setup=[model_of("fr.pt", ["le", "homard", "est", "bleu", "la", "mer"])])
add("nbest-lm-of-another-language-allowed", "nbest", N + ["--model", "{w}/fr.pt", "--device", "cpu",
                                                          "--allow-oov-rate"], "warning",
    must=["100.0 % of the hypothesis tokens are outside the vocabulary of .*fr.pt", "scored as <unk>"],
    setup=[model_of("fr.pt", ["le", "homard", "est", "bleu", "la", "mer"])],
    why="--allow-oov-rate asks to score it anyway; the warning still names the rate")
add("nbest-lm-in-upper-case", "nbest", N + ["--model", "{w}/up.pt", "--device", "cpu", "--allow-oov-rate"],
    "warning", must=["hypotheses look lower-case while the LM vocabulary is upper-case"],
    setup=[lambda w: model_of("up.pt", list(dict.fromkeys(x.upper() for x in (w / "nb" / "words_text").read_text()
                                                           .split() if not x.startswith("rec"))))(w)],
    why="case may be meaningful; with --allow-oov-rate the LM scores anyway and the warning names the cause")
add("tune-refine-model-of-another-language", "tune", U + ["--refine-model", "{w}/fr.pt", "--device", "cpu"], "error",
    must=["fr.pt", "vocabulary covers the hypotheses", "--allow-oov-rate"],
    setup=[model_of("fr.pt", ["le", "homard", "est", "bleu", "la", "mer"])])
add("tune-refine-device-gpu", "tune", U + ["--refine-model", "{w}/model.pt", "--device", "gpu"], "error",
    must=["--device", "auto, cpu, cuda or cuda:N", "gpu"], codes=(2,))
add("wer-bootstrap-over-two-recordings", "wer", W + ["{w}/hyp2.txt", "--groups", "{w}/nb/data/segments"], "warning",
    must=["only 2 recordings \\(by segments\\)", "fewer than 10 are unreliable"], setup=[two_systems],
    why="the CI is still computed and printed; only its coverage is doubtful")
add("wer-bootstrap-over-one-recording", "wer", W + ["{w}/hyp2.txt", "--groups", "{w}/one.txt"], "warning",
    must=["one group \\(by one.txt\\) only", "no confidence interval, p-value or P\\(better\\)"],
    setup=[two_systems, lambda w: (w / "one.txt").write_text(
        "".join(f"{ln.split()[0]} rec1\n" for ln in (w / "ref.txt").read_text().splitlines()))],
    why="the WERs themselves are right; only the bootstrap has nothing to resample")
add("nbest-costs-that-overflow", "nbest", N + ["--inv-acwt", "0.001"], "error",
    must=["nb/acwt:2:", "fixed cost stays finite", "ac / inv_acwt overflows", "rec1-rms-000-2", "inv_acwt 0.001"],
    setup=[line("nb/acwt", 2, "rec1-rms-000-2 1e306")])
add("nbest-oov-penalty-defaults-to-auto", "nbest", NM + ["--train-text", "{w}/train.txt"], "log",
    must=["OOV penalty \\(auto\\): [0-9.]+ nats per out-of-vocabulary word"],
    why="a penalty of 0 is legal, so the default changes rather than refusing")
add("tune-refine-oov-penalty-defaults-to-auto", "tune", U + ["--refine-model", "{w}/model.pt", "--device", "cpu"],
    "log", must=["OOV penalty \\(auto\\): [0-9.]+ nats per out-of-vocabulary word"],
    why="as rescore-nbest's: the words.txt beside the N-best dir is known, so the default is auto")


# ==========================================================================================
# --- warned: legal but usually a mistake -------------------------------------------------------
add("tune-weights-without-nn-costs", "tune", U[:3] + ["--weights", "0:1:0.1"], "warning",
    must=["no NN LM costs.*weight 0"], why="tuning the n-gram alone (weight 0) is a baseline users run on purpose")
add("wer-ref-and-hyp-swapped", "wer", ["{w}/hyp.txt", "{w}/nb/data/text"], "warning",
    must=["swap|reference"],
    why="any text file may be scored against any other; a data dir's text as HYP is only suspicious")
add("wer-hyp-as-word-ids", "wer", W, "warning", must=["word ids|integer|words\\.txt"], setup=[one_best_ids],
    why="digits can be words (a digit-string task): warned, not refused")
add("nbest-acoustic-scale-as-inv-acwt", "nbest", N + ["--inv-acwt", "0.1"], "warning",
    must=["acoustic scale|acwt"],
    why="an inverse acoustic scale below 1 is legal (acoustics weighted above the LM), only unusual")
add("nbest-carry-without-conversations", "nbest", NM, "warning", must=["segments|utt2spk|conversation"],
    setup=[remove("nb/data/segments"), remove("nb/data/utt2spk"), remove("nb/data/spk2utt")],
    why="a set of unrelated utterances has no conversations to carry along; the figure is right for it")
add("train-lm-valid-is-the-train-text", "train-lm", T[:2] + ["--valid", "{w}/train.txt"] + T[4:], "warning",
    must=["valid.*train|train.*valid"],
    why="a tiny experiment may validate on its training text on purpose")
add("tune-applied-to-the-set-it-tuned-on", "tune", U + ["--apply-to", "{w}/nb", "{w}/applied", "--apply-data-dir",
                                                        "{w}/nb/data"], "warning", must=["tuned on|same"],
    why="applying a setting to the set it was tuned on is how Kaldi's score.sh reports; it must only say so")
add("wer-reference-in-upper-case", "wer", W, "warning", must=["case"], setup=[upper("ref.txt")],
    why="an upper-case reference is right for a recognizer that writes upper case")
add("nbest-references-in-upper-case", "nbest", N, "warning", must=["case"], setup=[upper("nb/data/text")],
    why="as for rescore-wer: case may be meaningful")
add("wer-nfd-against-nfc", "wer", W, "warning", must=["NFC|NFD|normali"], setup=[accented],
    why="decomposed and composed spellings are different strings: some users score them apart on purpose")
add("ppl-text-in-upper-case", "ppl", P, "warning", must=["case"], setup=[upper("text.txt")],
    why="a model may well have been trained on upper case")
add("ppl-lm-of-another-language", "ppl", ["{w}/fr.pt", "{w}/text.txt", "--device", "cpu"], "warning",
    must=["OOV|out-of-vocabulary"], setup=[model_of("fr.pt", ["le", "homard", "est", "bleu"])],
    why="a high OOV rate is worth a warning; perplexity over <unk> is still a figure")


# --- an output over an input: every command, however the input was named ---------------------
# (an archive read from an N-best dir, a symlink or a hard link to an input, a data dir's file:
# the outputs are checked against the inputs by identity, device and inode, before anything is
# written; the runner checks that nothing changed)
C = ["{w}/nb"]
add("convert-target-is-an-archive-of-the-dir", "convert-nbest", C + ["{w}/nb/acwt"], "error",
    must=["TARGET", "nb/acwt"], codes=(2,))
add("convert-target-is-a-symlink-to-an-archive", "convert-nbest", C + ["{w}/a.tsv"], "error",
    must=["TARGET", "a.tsv", "nb/words_text"], codes=(2,), setup=[symlink("nb/words_text", "a.tsv")])
add("convert-target-is-a-hard-link-to-an-archive", "convert-nbest", C + ["{w}/h.tsv"], "error",
    must=["TARGET", "h.tsv", "nb/lmwt.nolm"], codes=(2,), setup=[hardlink("nb/lmwt.nolm", "h.tsv")])
add("convert-target-is-a-hard-link-to-words.txt", "convert-nbest", C + ["{w}/h.tsv"], "error",
    must=["TARGET", "h.tsv", "words.txt"], codes=(2,), setup=[hardlink("nb/words.txt", "h.tsv")])
add("convert-to-kaldi-over-its-source", "convert-nbest", ["{w}/k/acwt", "{w}/k", "--to", "kaldi"], "error",
    must=["TARGET", "k/acwt"], codes=(2,), setup=[tsv_of("nb", "k/acwt")])
add("nbest-out-dir-is-a-symlink-to-the-data-dir", "nbest", ["{w}/nb", "{w}/dl", "--data-dir", "{w}/nb/data"],
    "error", must=["OUT_DIR", "text"], codes=(2,), setup=[symlink("nb/data", "dl")])
add("nbest-output-hard-linked-to-the-references", "nbest", N, "error", must=["OUT_DIR", "text"], codes=(2,),
    setup=[mkdir("out"), hardlink("nb/data/text", "out/text")])
add("nbest-output-hard-linked-to-nn-costs", "nbest", N + ["--nn-costs", "{w}/lmwt.nn", "--nn-costs",
                                                          "{w}/lmwt2.nn"], "error",
    must=["OUT_DIR", "lmwt.nn"], codes=(2,), setup=[mkdir("out"), hardlink("lmwt.nn", "out/lmwt.nn")])
add("nbest-tsv-output-over-its-input", "nbest", ["{w}/o/scores.tsv", "{w}/o"], "error",
    must=["OUT_DIR", "scores.tsv"], codes=(2,), setup=[tsv_of("nb", "o/scores.tsv")])
add("nbest-tsv-output-hard-linked-to-its-input", "nbest", ["{w}/nb.tsv", "{w}/o"], "error",
    must=["OUT_DIR", "text", "nb.tsv"], codes=(2,), setup=[tsv_of("nb", "nb.tsv"), mkdir("o"),
                                                           hardlink("nb.tsv", "o/text")])
add("tune-params-out-is-an-archive", "tune", U + ["--params-out", "{w}/nb/lmwt.withlm"], "error",
    must=["--params-out", "lmwt.withlm"], codes=(2,))
add("tune-report-is-a-hard-link-to-the-references", "tune", U + ["--report", "{w}/r.json"], "error",
    must=["--report", "r.json"], codes=(2,), setup=[hardlink("nb/data/text", "r.json")])
add("wer-report-is-a-symlink-to-the-hypotheses", "wer", W + ["--report", "{w}/r.json"], "error",
    must=["--report", "r.json"], codes=(2,), setup=[symlink("hyp.txt", "r.json")])
add("wer-report-is-a-hard-link-to-the-reference", "wer", W + ["--report", "{w}/r.json"], "error",
    must=["--report", "r.json"], codes=(2,), setup=[hardlink("ref.txt", "r.json")])
add("ppl-report-is-a-hard-link-to-the-text", "ppl", P + ["--report", "{w}/r.json"], "error",
    must=["--report", "r.json"], codes=(2,), setup=[hardlink("text.txt", "r.json")])
add("lattice-cover-output-is-a-hard-link-to-the-lattices", "lattice", ["cover", "--acoustic-scale", "0.1",
                                                                         "{w}/lat.txt", "{w}/c.txt"], "error",
    must=["NBEST_OUT", "c.txt"], codes=(2,), setup=[hardlink("lat.txt", "c.txt")])
add("lattice-apply-output-is-an-archive-of-the-dir", "lattice", ["apply", "--acoustic-scale", "0.1", "--weight",
                                                                  "0.5", "{w}/lat.txt", "{w}/cover",
                                                                  "{w}/cover/words"], "error",
    must=["LATS_OUT", "words"], codes=(2,))
add("import-kaldi-lm-model.pt-hard-linked-to-the-state-dict", "import-kaldi-lm",
    K[:2] + ["{w}/imp", "--model-type", "LSTM"] + K[3:], "error", must=["OUT_DIR", "model.pt"], codes=(2,),
    setup=[mkdir("imp"), hardlink("kaldi.pt", "imp/model.pt")])
add("train-lm-out-dir-train.json-hard-linked-to-the-text", "train-lm", T, "error", must=["--out-dir", "train"],
    codes=(1, 2), setup=[mkdir("out"), hardlink("train.txt", "out/train.json")])


# --- references that do not belong to the hypotheses, for every input format -----------------
add("nbest-keys-shifted-by-one", "nbest", N, "warning",
    must=["first pass \\(rank 1\\) of .*nb has a WER of", "do not belong together", "keys shifted"],
    setup=[shift_keys("nb", ARCHIVES)],
    why="a first pass that shares nothing with the references could in principle be a terrible decode")
add("nbest-tsv-keys-shifted-by-one", "nbest", ["{w}/nb.tsv", "{w}/out", "--data-dir", "{w}/nb/data"],
    "warning", must=["first pass \\(rank 1\\) of .*nb.tsv", "do not belong together", "keys shifted"],
    setup=[shift_keys("nb", ARCHIVES), tsv_of("nb", "nb.tsv")],
    why="as for a Kaldi dir: a terrible decode is possible")
add("nbest-nemo-manifest-in-another-order", "nbest", [str(ECO / "nemo" / "preds_out_width3_alpha0.5_beta1.0.tsv"),
                                                      "{w}/out", "--format", "nemo", "--manifest", "{w}/m.json"],
    "warning", must=["do not belong together", "manifest \\(--manifest\\) in another order"],
    setup=[lambda w: (w / "m.json").write_text("".join(reversed(
        (ECO / "nemo" / "test_manifest.json").read_text().splitlines(keepends=True))))],
    why="the beams and the manifest's lines are paired by order only: nothing else tells them apart")
add("nbest-espnet-references-of-another-order", "nbest", [str(ECO / "espnet" / "decode_asr_nbest3" / "test_clean"),
                                                          "{w}/out", "--format", "espnet", "--data-dir", "{w}/ed"],
    "warning", must=["do not belong together", "--data-dir"],
    setup=[lambda w: (w / "ed").mkdir() or (w / "ed" / "text").write_text(_rotated_refs(
        (ECO / "espnet" / "data" / "test_clean" / "text").read_text()))],
    why="the keys match; only the words tell that the references are another utterance's")
add("nbest-icefall-references-of-other-cuts", "nbest", ["{w}/ice.jsonl", "{w}/out", "--format", "icefall"],
    "warning", must=["do not belong together"], setup=[icefall_rotated_refs("ice.jsonl")],
    why="the dump pairs each cut with a reference; only the words tell it is another cut's")
# references written as raw transcripts: punctuation and sentence case
add("nbest-references-as-raw-transcripts", "nbest", N, "warning",
    must=["references carry punctuation", "upper case", "--normalize-refs"], setup=[raw_transcripts("nb/data/text")],
    why="punctuation can be scored on purpose (a recognizer that writes it)")
add("wer-references-as-raw-transcripts", "wer", W, "warning",
    must=["references carry punctuation", "--normalize-refs"], setup=[raw_transcripts("ref.txt")],
    why="as for rescore-nbest")
add("nbest-normalize-refs-gives-the-normalised-figure", "nbest", N + ["--normalize-refs"], "same",
    setup=[raw_transcripts("nb/data/text")])
add("wer-normalize-refs-gives-the-normalised-figure", "wer", W + ["--report", "{w}/out/w.json", "--normalize-refs"],
    "same", figure="out/w.json", setup=[raw_transcripts("ref.txt")], pre=[mkdir("out")])

# --- the test references inside the LM training text ---------------------------------------
add("nbest-train-text-holds-the-references", "nbest", N + ["--train-text", "{w}/tt.txt", "--no-plot"], "warning",
    must=["LM training text .*tt.txt holds 100.0 % of the reference sentences", "not a held-out figure"],
    setup=[train_text_with_refs("tt.txt")],
    why="the training text may hold a sentence of the test set by chance; the share tells")
add("nbest-model-trained-on-the-references", "nbest", N + ["--model", "{w}/lm/model.pt", "--device", "cpu",
                                                          "--allow-oov-rate"], "warning",
    must=["LM training text of .*lm/model.pt \\(by the fingerprint its checkpoint records\\) holds 100.0 % of the "
          "reference sentences", "not a held-out figure"],
    setup=[train_text_with_refs("tt.txt"), trained_on("tt.txt", "lm")],
    why="as with --train-text: the model.pt of rescore-train-lm records its training text's fingerprint")
add("nbest-nn-costs-train-text-holds-the-references", "nbest", N + ["--nn-costs", "{w}/lmwt.nn", "--train-text",
                                                                   "{w}/tt.txt", "--no-plot"], "warning",
    must=["LM training text .*tt.txt holds"], setup=[train_text_with_refs("tt.txt")],
    why="as with --model: the costs came from an LM trained on that text")

# --- options that would do nothing in the mode given: one rule ---------------------------------
for opt, val in (("--precision", "bf16"), ("--history-min-posterior", "0.1"), ("--device", "cpu"),
                 ("--state-carry", "none"), ("--max-tokens", "100"), ("--conv-batch", "4")):
    add(f"nbest-{opt[2:]}-with-nn-costs", "nbest", N + ["--nn-costs", "{w}/lmwt.nn", opt, val], "error",
        must=[opt, "expected --model", "would do nothing"], codes=(2,))
add("nbest-allow-oov-rate-with-nn-costs", "nbest", N + ["--nn-costs", "{w}/lmwt.nn", "--allow-oov-rate"], "error",
    must=["--allow-oov-rate", "expected --model", "would do nothing"], codes=(2,))
add("nbest-precision-without-nn-lm", "nbest", N + ["--precision", "bf16"], "error",
    must=["--precision", "expected --model"], codes=(2,))

# --- the TSV reader: file and line for every value; Windows line ends, a BOM -----------
add("nbest-tsv-costs-that-overflow", "nbest", ["{w}/nb.tsv", "{w}/out", "--inv-acwt", "0.001"], "error",
    must=["nb.tsv:4:", "ac / inv_acwt overflows", "column ac", "rec1-rms-000-2"],
    setup=[tsv_of("nb", "nb.tsv"), edit("nb.tsv", lambda b: b.replace(b"\t812\t", b"\t1e306\t", 1))])
add("nbest-tsv-costs-that-overflow-in-a-split-share", "nbest",
    ["{w}/nb.tsv", "{w}/out", "--inv-acwt", "0.001", "--split", "1/1"], "error",
    must=["nb.tsv:4:", "ac / inv_acwt overflows", "column ac", "rec1-rms-000-2"],
    setup=[tsv_of("nb", "nb.tsv"), edit("nb.tsv", lambda b: b.replace(b"\t812\t", b"\t1e306\t", 1))])
add("nbest-tsv-weighted-sum-overflows", "nbest", ["{w}/x.tsv", "{w}/out"], "error",
    must=["x.tsv:3:", "weighted sum stays finite", "am"], codes=(1,),
    setup=[put("x.tsv", "#nbest-interchange 1\nutt\trank\twords\tam\tlm\nu1\t1\ta b\t1e308\t1e308\n")])
add("nbest-tsv-crlf", "nbest", ["{w}/nb.tsv", "{w}/out", "--data-dir", "{w}/nb/data"], "same",
    pre=[tsv_of("nb", "nb.tsv")], setup=[edit("nb.tsv", lambda b: b.replace(b"\n", b"\r\n"))])
add("nbest-tsv-bom", "nbest", ["{w}/nb.tsv", "{w}/out", "--data-dir", "{w}/nb/data"], "same",
    pre=[tsv_of("nb", "nb.tsv")], setup=[edit("nb.tsv", lambda b: b"\xef\xbb\xbf" + b)])


# NOT YET DETECTED: none at present. A case nobody detects yet is added with needs= (the change it
# needs): it runs as a strict xfail until that change lands, and then moves up.
# ==========================================================================================


# ------------------------------------------------------------------------------------------
# the runner

def _all_commands():
    from rescore.cli import convert

    return {**_commands(), "convert-nbest": convert.convert}


def _world(src: Path, at: Path) -> Path:
    shutil.copytree(src, at)
    scp = at / "wavdata" / "wav.scp"
    scp.write_text(scp.read_text().replace(str(src), str(at)))
    return at


def _invoke(m: Mistake, world: Path, caplog):
    import logging

    args = [a.replace("{w}", str(world)) for a in m.args]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        result = CliRunner().invoke(_all_commands()[m.cmd], args, catch_exceptions=True)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-1500:]
        raise AssertionError(f"TRACEBACK: {m.id}: {type(exc).__name__}: {exc}\n{tb}")
    assert "Traceback" not in result.output, f"TRACEBACK: {m.id}: {result.output[-1500:]}"
    return result


def _matches(m: Mistake, text: str) -> List[str]:
    """The regexes of m.must that text does not match."""
    return [r for r in m.must if not re.search(r, text, re.IGNORECASE)]


def _check_error(m: Mistake, result, world: Path, before) -> None:
    out = result.output
    assert result.exit_code != 0, f"SILENT: {m.id} exited 0: {out[-800:]}"
    assert result.exit_code in m.codes, f"STATUS: {m.id}: exit {result.exit_code}, expected {m.codes}: {out[-800:]}"
    assert "error: " in out, f"MESSAGE: {m.id}: no 'error: ' line: {out[-800:]}"
    msg = out.replace(str(world) + "/", "")
    missing = _matches(m, msg)
    assert not missing, f"MESSAGE: {m.id}: {missing} not in: {msg[-800:]}"
    after = snapshot(world)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"WRITTEN: {m.id}: {changed[:10]}"


def _figure(m: Mistake, world: Path) -> dict:
    rep = json.loads((world / m.figure).read_text())
    return {k: rep.get(k) for k in ("wer", "errors", "ref_words", "num_utts", "num_hyps")}


def _case_param(m: Mistake):
    marks = list(m.marks)
    if m.needs:
        marks.append(pytest.mark.xfail(reason=f"not detected yet: {m.needs}", strict=True))
    return pytest.param(m, marks=marks, id=m.id)


@pytest.mark.parametrize("m", [_case_param(m) for m in MISTAKES])
def test_user_mistake(m: Mistake, base: Path, tmp_path: Path, caplog):  # noqa: F811 (base: the fixture)
    world = _world(base, tmp_path / "w")
    clean = None
    if m.expect == "same":
        clean = _world(base, tmp_path / "clean")
        for op in m.pre:
            op(clean)
        r = _invoke(m, clean, caplog)
        assert r.exit_code == 0, f"the clean run failed: {r.output[-800:]}"
    for op in (*m.pre, *m.setup):
        op(world)
    before = snapshot(world)
    result = _invoke(m, world, caplog)
    if m.expect == "error" or (m.expect == "same" and result.exit_code != 0):
        _check_error(m, result, world, before)
        return
    assert result.exit_code == 0, f"STATUS: {m.id}: exit {result.exit_code}: {result.output[-800:]}"
    if m.expect == "same":
        assert _figure(m, world) == _figure(m, clean), f"WRONG FIGURE: {m.id}"
        if m.cmd == "nbest":
            assert (world / "out" / "text").read_text() == (clean / "out" / "text").read_text(), f"WRONG 1-BEST: {m.id}"
        return
    import logging

    level = logging.INFO if m.expect == "log" else logging.WARNING
    said = "\n".join([r.getMessage() for r in caplog.records if r.levelno >= level]
                     + [ln for ln in result.output.splitlines() if "warning" in ln.lower()])
    missing = _matches(m, said)
    assert not missing, f"UNWARNED: {m.id}: {missing} not said; warnings: {said[-800:]}"


def test_every_warning_says_why_and_enough_cases():
    assert len(MISTAKES) >= 40, len(MISTAKES)
    assert len({m.id for m in MISTAKES}) == len(MISTAKES), "case names must be unique"
    for m in MISTAKES:
        assert m.expect in ("error", "warning", "same", "log"), m.id
        if m.expect in ("warning", "log"):
            assert m.why, f"{m.id}: a warning-only case must say why it cannot be refused"


# ==========================================================================================
# Ctrl-C and a step run outside a recipe dir: real processes, so not in the table above.
# ==========================================================================================
def test_ctrl_c_in_training_exits_130_and_says_interrupted(base, tmp_path):  # noqa: F811
    import os
    import time

    world = _world(base, tmp_path / "w")
    (world / "big.txt").write_text((world / "train.txt").read_text() * 200)
    args = [a.replace("{w}", str(world)) for a in T]
    args[1] = str(world / "big.txt")
    args[args.index("--epochs") + 1] = "50"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "rescore.cli.train_lm", *args], stderr=subprocess.PIPE, text=True,
                         env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not (world / "out" / "train.json").exists():
        time.sleep(0.5)
    assert (world / "out" / "train.json").exists(), "training never started"
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 130, (p.returncode, err[-800:])
    assert "interrupted" in err.lower()


# A Kaldi step run outside a recipe dir says so before its first stage.
def test_step_outside_a_recipe_dir_says_so(base, tmp_path):  # noqa: F811
    world = _world(base, tmp_path / "w")
    step = REPO_ROOT / "recipes" / "steps" / "lmrescore_nbest.sh"
    r = subprocess.run(["bash", str(step), "data/lang", str(world / "model.pt"), "data/dev", "exp/decode_dev",
                        "exp/decode_dev_nn"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    said = (r.stdout + r.stderr).replace(str(step), "STEP")
    assert re.search(r"recipe (dir|directory)", said, re.IGNORECASE), said[-800:]
    assert not (tmp_path / "exp").exists()  # nothing made before the check


# ==========================================================================================
# A --split job whose share is empty (more jobs than blocks of conversations): a warning and a
# valid empty set, for every input format, with --model and with --nn-costs; the shares merged
# (cat, in job order) give the whole set's 1-best and costs.
# ==========================================================================================
SPLIT_INPUTS = {
    "kaldi": lambda w: [str(w / "nb"), "--data-dir", str(w / "nb" / "data")],
    "tsv": lambda w: [str(w / "nb.tsv"), "--data-dir", str(w / "nb" / "data")],
    "espnet": lambda w: [str(ECO / "espnet" / "decode_asr_nbest3" / "test_clean"), "--format", "espnet",
                         "--data-dir", str(ECO / "espnet" / "data" / "test_clean")],
    "icefall": lambda w: [str(ECO / "icefall" / "nbest-test-clean.jsonl"), "--format", "icefall"],
    # NeMo's manifests hold raw transcripts: the references normalised as NeMo normalised its predictions
    "nemo": lambda w: [str(ECO / "nemo" / "preds_out_width3_alpha0.5_beta1.0.tsv"), "--format", "nemo",
                       "--manifest", str(ECO / "nemo" / "test_manifest.json"),
                       "--nemo-text-processing", "lowercase,rm_punctuation"],
}


@pytest.mark.parametrize("source", ["model", "nn-costs"])
@pytest.mark.parametrize("fmt", list(SPLIT_INPUTS))
def test_split_job_with_an_empty_share_writes_an_empty_set(fmt, source, base, tmp_path, caplog):  # noqa: F811
    import logging

    from rescore.cli.nbest import main as rescore_nbest

    w = _world(base, tmp_path / "w")
    tsv_of("nb", "nb.tsv")(w)
    src = SPLIT_INPUTS[fmt](w)
    model = ["--model", str(w / "model.pt"), "--device", "cpu", "--allow-oov-rate"]

    def run(out, *extra):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            r = CliRunner().invoke(rescore_nbest, [src[0], str(w / out), *src[1:], *extra])
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert r.exit_code == 0, r.output[-1500:]
        return w / out

    whole = run("whole", *model)
    costs = model if source == "model" else ["--nn-costs", str(whole / "lmwt.nn")]
    # every conversation is in one block of --conv-batch: job 1 has them all, job 2 none
    shares = [run(f"job{k}", *costs, "--split", f"{k}/2") for k in (1, 2)]
    said = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "job 2 of 2 has no conversations" in said
    assert (shares[1] / "text").read_text() == ""
    assert "".join((s / "text").read_text() for s in shares) == (whole / "text").read_text()
    costs_file = "lmwt.interp" if fmt == "kaldi" else "scores.tsv"
    if fmt == "kaldi":
        assert "".join((s / costs_file).read_text() for s in shares) == (whole / costs_file).read_text()
    else:
        from rescore.formats.tsv import read_nbest_table

        empty = read_nbest_table(shares[1] / costs_file)
        assert empty.num_hyps == 0 and empty.columns == read_nbest_table(whole / costs_file).columns
    manifest = json.loads((shares[1] / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["split"] == [2, 2]


# ==========================================================================================
# Correct input prints no warning: every input format of the world, the real dev set (with the
# full LM training text) and the archives written by Kaldi's binaries.
# ==========================================================================================
def _no_warning(args, caplog, command="nbest", tiny=False):
    """Run a command on correct input: no warning (tiny: but for the bootstrap's over a few
    utterances, right for them)."""
    import logging

    caplog.clear()
    with caplog.at_level(logging.INFO):
        r = CliRunner().invoke(_all_commands()[command], [str(a) for a in args])
    assert r.exit_code == 0, r.output[-1500:]
    said = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    said += [ln for ln in r.output.splitlines() if "warning" in ln.lower()]
    if tiny:
        said = [m for m in said if not re.match(r"only \d+ (recordings|utterances)\b.*bootstrap", m)]
    assert not said, said
    return r


CLEAN = {
    "kaldi-text": lambda w: [w / "nb", w / "out", "--data-dir", w / "nb" / "data", "--train-text", w / "train.txt",
                             "--no-plot"],
    "kaldi-integer": lambda w: (w / "nb" / "words_text").unlink() or [w / "nb", w / "out", "--data-dir",
                                                                    w / "nb" / "data"],
    "kaldi-model": lambda w: [w / "nb", w / "out", "--data-dir", w / "nb" / "data", "--model", w / "model.pt",
                              "--device", "cpu", "--train-text", w / "train.txt", "--no-plot"],
    "tsv": lambda w: tsv_of("nb", "nb.tsv")(w) or [w / "nb.tsv", w / "out", "--data-dir",
                                                                   w / "nb" / "data"],
    "espnet": lambda w: [SPLIT_INPUTS["espnet"](w)[0], w / "out", *SPLIT_INPUTS["espnet"](w)[1:]],
    "icefall": lambda w: [SPLIT_INPUTS["icefall"](w)[0], w / "out", *SPLIT_INPUTS["icefall"](w)[1:]],
    "nemo": lambda w: [SPLIT_INPUTS["nemo"](w)[0], w / "out", *SPLIT_INPUTS["nemo"](w)[1:]],
}


@pytest.mark.parametrize("case", list(CLEAN))
def test_correct_input_prints_no_warning(case, base, tmp_path, caplog):  # noqa: F811
    w = _world(base, tmp_path / "w")
    _no_warning(CLEAN[case](w), caplog, tiny=True)
    _no_warning([w / "ref.txt", w / "hyp.txt"], caplog, "wer")


@pytest.mark.shared_data
def test_the_dev_set_and_kaldi_written_archives_print_no_warning(tmp_path, caplog):
    from tests.conftest import shared_data_path

    dev = shared_data_path("tts-wikitext2-dev")
    train = shared_data_path("wikitext2-asr", "train.txt")
    r = _no_warning([dev / "nbest", tmp_path / "dev", "--data-dir", dev / "data", "--train-text", train,
                     "--no-plot"], caplog)
    assert "first pass" in r.output and "train text" in r.output  # (report.txt: the checks' lines)
    fixture = shared_data_path("kaldi-nbest-fixture")
    k = tmp_path / "kaldi"
    k.mkdir()
    for n in ("words", "acwt", "lmwt.withlm"):
        shutil.copy(fixture / n, k / n)
    shutil.copy(fixture / "lmwt.nolm.input-text", k / "lmwt.nolm")
    utts = {ln.split()[0].rsplit("-", 1)[0] for ln in (k / "acwt").read_text().splitlines()}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "text").write_text("".join(ln + "\n" for ln in (dev / "data" / "text").read_text()
                                                    .splitlines() if ln.split()[0] in utts))
    _no_warning([k, tmp_path / "fixture", "--data-dir", tmp_path / "data", "--words-txt",
                 dev / "lang" / "words.txt"], caplog, tiny=True)  # (8 utterances)


def test_references_in_the_training_text_are_in_the_log_report_txt_and_report_json(base, tmp_path):  # noqa: F811
    w = _world(base, tmp_path / "w")
    train_text_with_refs("tt.txt")(w)
    r = CliRunner().invoke(_all_commands()["nbest"], [str(w / "nb"), str(w / "out"), "--data-dir",
                                                      str(w / "nb" / "data"), "--train-text", str(w / "tt.txt")])
    assert r.exit_code == 0, r.output
    checks = json.loads((w / "out" / "report.json").read_text())["input_checks"]["references"]
    found = [c for c in checks if "sentence_share" in c]
    assert found and found[0]["sentence_share"] == 100.0 and found[0]["ngram"] == 8
    assert "not a held-out figure" in found[0]["warnings"][0]
    txt = (w / "out" / "report.txt").read_text()
    assert "holds 100.0 % of the reference sentences" in txt and "warning      the LM training text" in txt
