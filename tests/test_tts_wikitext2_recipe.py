"""recipes/tts_wikitext2: the text normalization (rules, and byte for byte the benchmark's LM
text), the selection, and the whole recipe on two articles, compared with the benchmark.

The recipe test needs flite and sox (Debian), PocketSphinx and num2words (pip extras mini and
benchrecipe) and WikiText-2 with the benchmark beside the checkout (../shared/data); it skips
naming what is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "tts_wikitext2"
WIKITEXT, ASR_TEXT, DEV = SHARED_DATA / "wikitext-2", SHARED_DATA / "wikitext2-asr", SHARED_DATA / "tts-wikitext2-dev"


def _normalize_module():
    pytest.importorskip("num2words", reason="num2words missing: pip install -e '.[benchrecipe]'")
    spec = importlib.util.spec_from_file_location("normalize", RECIPE / "local" / "normalize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# WikiText-2 lines (its tokenization) and what the benchmark's LM text has for them.
RULES = [
    (" It may grow to a length of 60 cm ( 24 in ) and a mass of 6 kilograms ( 13 lb ) . ",
     ["it may grow to a length of sixty cm twenty four in and a mass of six kilograms thirteen lb"]),
    (" In 1938 , 1 @,@ 500 men took 0 @.@ 7 – 2 @.@ 25 kg at 79 % . ",
     ["in nineteen thirty eight one thousand five hundred men took zero point seven two point two five kg "
      "at seventy nine percent"]),
    (" He served with No. 2 Squadron from 1908 – 09 in the 1920s . Dr. Smith didn 't . ",
     ["he served with number two squadron from nineteen oh eight zero nine in the nineteen twenties",
      "doctor smith didn't"]),
    (" It cost $ 2 @.@ 5 million , U.S. sources said ; the U2 's km2 grew . ",
     ["it cost two point five million dollars u s sources said the u two s km two grew"]),
    (" The <unk> 's 21st game of 2001 's season , e.g. Temple V. ... It was M @-@ 82 ! ",
     ["the <unk> twenty first game of two thousand and ones season for example temple versus",
      "it was m eighty two"]),
    (" CNN @-@ <unk> 's 1 @,@ 000th list of 16 @,@ <unk> men had a $ 25 @-@ a @-@ day habit … ok ",
     ["cnn <unk> s one thousand th list of sixteen unk men had a twenty five a day habit", "ok"]),
]


@pytest.mark.parametrize("line, expected", RULES)
def test_normalization_rules(tmp_path, line, expected):
    norm = _normalize_module()
    (tmp_path / "valid.txt").write_text(f" \n = Title = \n \n = = Section = = \n{line}\n", encoding="utf-8")
    sentences, docids, titles = norm.normalize(tmp_path / "valid.txt")
    assert sentences == expected and docids == ["0"] * len(expected) and titles == ["0\tTitle"]


@pytest.mark.shared_data
@pytest.mark.skipif(not WIKITEXT.is_dir() or not ASR_TEXT.is_dir(), reason="../shared/data/wikitext-2 absent")
@pytest.mark.parametrize("split", ["valid", "test", "train"])
def test_normalization_is_the_benchmarks_lm_text_byte_for_byte(tmp_path, split):
    norm = _normalize_module()
    sentences, docids, titles = norm.normalize(WIKITEXT / f"{split}.txt")
    for ext, rows in (("txt", sentences), ("docids", docids), ("titles", titles)):
        assert "".join(r + "\n" for r in rows) == (ASR_TEXT / f"{split}.{ext}").read_text(encoding="utf-8"), ext


def _run(*args, env=None):
    return subprocess.run(["bash", str(RECIPE / "run.sh"), *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=900)


def test_usage_and_input_checks(tmp_path):
    r = _run("--help")
    assert r.returncode == 0 and "Usage: recipes/tts_wikitext2/run.sh --wikitext DIR" in r.stdout
    assert "--snrs clean,30,35,25,clean,30" in r.stdout
    r = _run("--dir", str(tmp_path / "exp"))
    assert r.returncode == 1 and "--wikitext DIR is required" in r.stderr
    r = _run("--wikitext", str(tmp_path), "--articles", "two")
    assert r.returncode == 2 and "--articles: expected a whole number, got 'two'" in r.stderr
    r = _run("--wikitext", str(tmp_path), "--dir", str(tmp_path / "exp"))
    assert r.returncode == 1 and f"error: {tmp_path}/train.txt: expected WikiText-2's tokenized train text" in r.stderr
    assert not (tmp_path / "exp" / "text").exists()


def _skip_without_tools():
    for prog, pkg in (("flite", "flite"), ("sox", "sox")):
        if shutil.which(prog) is None:
            pytest.skip(f"{prog} missing: apt-get install -y {pkg}")
    for mod, extra in (("pocketsphinx", "mini"), ("num2words", "benchrecipe")):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} missing: pip install -e '.[{extra}]'")
    if not WIKITEXT.is_dir() or not DEV.is_dir():
        pytest.skip("../shared/data (WikiText-2 and the benchmark) absent")


@pytest.mark.slow
@pytest.mark.shared_data
def test_recipe_on_two_articles_rebuilds_the_benchmarks_utterances(tmp_path):
    """Three sentences of each of the first two articles, end to end: the same utterances,
    references, selection, durations and conditions as the benchmark, and a set that
    rescore-nbest reads (stage 6 checks that its first-pass WER is the rank-1 WER)."""
    _skip_without_tools()
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    r = _run("--wikitext", str(WIKITEXT), "--dir", str(tmp_path / "exp"), "--articles", "2", "--per-article", "3",
             "--nbest", "20", "--nj", "2", "--benchmark", str(DEV), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "exp" / "tts-wikitext2-dev"
    for name in ("data/text", "data/utt2spk", "data/spk2utt", "data/segments", "data/utt2sentidx", "data/utt2cond",
                 "data/reco2docid", "nbest/words_text", "nbest/words", "nbest/acwt", "nbest/lmwt.withlm",
                 "nbest/lmwt.nolm", "lang/words.txt", "extra/ps_1best.txt", "README.md"):
        assert (out / name).is_file(), name

    def rows(path):
        return dict(line.split(" ", 1) for line in path.read_text().splitlines())

    text = rows(out / "data" / "text")
    assert sorted(text) == [f"dev-a000-rms-00{k}" for k in range(3)] + [f"dev-a001-awb-00{k}" for k in range(3)]
    for name in ("text", "utt2sentidx", "utt2cond", "utt2spk"):
        bench = rows(DEV / "data" / name)
        assert {u: bench[u] for u in text} == rows(out / "data" / name), name
    bench_dur = rows(DEV / "data" / "utt2dur")
    assert all(abs(float(d) - float(bench_dur[u])) < 1e-3 for u, d in rows(out / "data" / "utt2dur").items())

    # nbest/words are words_text through lang/words.txt; every key's rank runs 1..n.
    ids = {i: w for w, i in (line.split() for line in (out / "lang" / "words.txt").read_text().splitlines())}
    words, words_text = rows(out / "nbest" / "words"), rows(out / "nbest" / "words_text")
    assert words.keys() == words_text.keys()
    assert all(" ".join(ids[i] for i in words[k].split()) == words_text[k] for k in words)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["utts"] == 6 and 0 <= stats["oracle_wer"] <= stats["first_pass_wer"]
    assert f"first-pass WER: {stats['first_pass_wer']:.2f}" in r.stdout
    assert "6 utterances in both" in r.stdout and "selection (utt2sentidx) 6; references (text) 6" in r.stdout
