"""rescore.nbest.checks: the LM vocabulary against the hypotheses (letter case, Unicode normalisation),
the symbol table of integer archives, as functions and through rescore-nbest."""

from __future__ import annotations

import json
import random
import shutil
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import FIXTURES, shared_data_path
from rescore.cli.nbest import main
from rescore.nbest.checks import (OOV_ERROR_RATE, OOV_WARN_RATE, check_nbest_input, spelling_hint, symbol_table_check,
                            vocabulary_check)

NBEST_SMALL = FIXTURES / "nbest-small"


def _save_model(path: Path, words, **extra) -> Path:
    """An (untrained) LSTM checkpoint whose vocabulary is ``words``: what the checks read
    (``extra``: more of what a checkpoint records, e.g. the fingerprint of its training text)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    words = [w for w in dict.fromkeys(words) if w not in ("<eos>", "<unk>")]
    save_checkpoint(build_model(ModelConfig(hidden=8, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>", *words])),
                    path, **extra)
    return path


def _small_words():
    return sorted({w for line in (NBEST_SMALL / "words_text").read_text().splitlines() for w in line.split()[1:]})


def _respelled_small(tmp_path: Path, spell) -> Path:
    """nbest-small with every word of the hypotheses and references passed through spell (its
    integer archive and words.txt left out: words_text alone gives the words)."""
    d = tmp_path / "nb"
    shutil.copytree(NBEST_SMALL, d)
    (d / "words").unlink()
    (d / "words.txt").unlink()
    for f in (d / "words_text", d / "data" / "text"):
        f.write_text("".join(" ".join([ln.split()[0], *map(spell, ln.split()[1:])]) + "\n"
                             for ln in f.read_text().splitlines()))
    return d


def _run(args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


# ---------------------------------------------------------------------------------------------
# the functions


def test_upper_case_hypotheses_against_a_lower_case_vocabulary():
    vocab = ["the", "lobster", "is", "blue", "<eos>", "<unk>"]
    c = vocabulary_check("lm.pt", vocab, "THE LOBSTER IS BLUE THE SEA".split(), "the lobster is red".split())
    assert c.hyp_oov_rate == 100.0 and c.ref_oov_rate == 25.0
    assert c.hint.startswith("the hypotheses look upper-case while the LM vocabulary is lower-case")
    assert len(c.warnings) == 1 and "lm.pt" in c.warnings[0] and c.hint in c.warnings[0]


def test_nfd_hypotheses_against_an_nfc_vocabulary():
    nfc = ["café", "naïve", "über", "the"]
    nfd = [unicodedata.normalize("NFD", w) for w in nfc]
    assert nfd[:3] != nfc[:3]
    c = vocabulary_check("lm.pt", nfc, nfd * 3)
    assert c.hyp_oov_rate == 75.0
    assert "only by Unicode normalisation (hypotheses NFD, vocabulary NFC)" in c.hint and c.warnings
    # a few words in another spelling are not a pattern: no hint
    assert spelling_hint(nfc, {"zebra": 5, nfd[0]: 1}) is None


def test_words_of_another_vocabulary_warn_without_a_hint():
    c = vocabulary_check("lm.pt", ["a", "b"], ["a"] * 70 + ["z"] * 30)
    assert c.hyp_oov_rate == 30.0 and OOV_WARN_RATE < 30.0 < OOV_ERROR_RATE
    assert c.hint is None and len(c.warnings) == 1
    assert not vocabulary_check("lm.pt", ["a", "b"], ["a"] * 90 + ["z"] * 10).warnings


def test_words_txt_words_outside_the_vocabulary_are_counted():
    c = vocabulary_check("lm.pt", ["a", "b"], ["a"], lexicon=["a", "b", "c", "d"], words_txt="lang/words.txt")
    assert (c.words_txt, c.words_txt_words, c.words_txt_oov) == ("lang/words.txt", 4, 2)
    assert list(c.as_dict())[:5] == ["model", "vocab_size", "hyp_tokens", "hyp_oov_tokens", "hyp_oov_rate"]


def test_symbol_table_check_on_made_up_words():
    refs = {f"u{i}": "the lobster is blue".split() for i in range(5)}
    right = symbol_table_check({u: list(r) for u, r in refs.items()}, refs, "words.txt")
    assert right.first_pass_wer == 0.0 and right.token_overlap == 100.0 and not right.warnings
    wrong = symbol_table_check({u: "kite chimera ass cot".split() for u in refs}, refs, "exp/graph/words.txt")
    assert wrong.token_overlap == 0.0 and "exp/graph/words.txt" in wrong.warnings[0]
    empty = symbol_table_check({"u0": ["a"]}, {"u0": []}, "words.txt")  # no reference words: no figure to judge
    assert empty.first_pass_wer == 0.0 and not empty.warnings


@pytest.mark.shared_data
def test_a_model_of_the_training_text_does_not_warn_on_the_dev_set(tmp_path, caplog):
    from rescore.nbest.refs import FINGERPRINT_KEY, text_fingerprint
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import Vocabulary, read_sentences

    dev = shared_data_path("tts-wikitext2-dev")
    train = shared_data_path("wikitext2-asr", "train.txt")
    nbest = load_nbest_dir(dev / "nbest", dev / "data")
    checks = {}
    # (with the fingerprint of its training text that rescore-train-lm records: without one the
    # references could not be checked against it, which is a warning of its own)
    fingerprint = {FINGERPRINT_KEY: text_fingerprint(read_sentences(train))}
    for size in (None, 10_000):  # every training word; the 10k most frequent
        model = _save_model(tmp_path / f"lm{size}.pt", Vocabulary.from_text(train, size).words, **fingerprint)
        checks[size] = check_nbest_input(nbest, [model])
    for c in checks.values():
        v = c.vocabulary[0]
        assert v.hyp_oov_rate < OOV_WARN_RATE and v.ref_oov_rate < OOV_WARN_RATE and v.hint is None
        assert not c.warnings and v.words_txt_oov is not None and c.symbol_table is None  # words_text given
    assert checks[None].vocabulary[0].hyp_oov_rate < checks[10_000].vocabulary[0].hyp_oov_rate
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


# ---------------------------------------------------------------------------------------------
# through rescore-nbest


def test_rescore_nbest_refuses_upper_case_hypotheses_for_a_lower_case_lm(tmp_path):
    nb = _respelled_small(tmp_path, str.upper)
    model = _save_model(tmp_path / "lm.pt", _small_words())
    args = [nb, tmp_path / "out", "--data-dir", nb / "data", "--model", model, "--device", "cpu"]
    r = _run(args)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert str(model) in r.output and "100.0 % of" in r.output
    assert "the hypotheses look upper-case while the LM vocabulary is lower-case" in r.output
    assert not (tmp_path / "out" / "report.json").exists()
    r = _run(args + ["--allow-oov-rate"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    v = rep["input_checks"]["vocabulary"][0]
    assert v["model"] == str(model) and v["hyp_oov_rate"] == 100.0 and v["ref_oov_rate"] == 100.0
    assert "upper-case" in v["hint"] and v["warnings"]
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "vocabulary   " in text and "warning      100.0 % of the hypothesis tokens" in text


def test_rescore_nbest_names_a_unicode_normalisation_mismatch(tmp_path):
    accented = {"blue": "bleu\u0301", "red": "rouge\u0301", "sea": "mer\u0301"}  # NFD: e + combining acute
    nb = _respelled_small(tmp_path, lambda w: accented.get(w, w))
    words = [unicodedata.normalize("NFC", accented.get(w, w)) for w in _small_words()]
    model = _save_model(tmp_path / "lm.pt", words)
    r = _run([nb, tmp_path / "out", "--data-dir", nb / "data", "--model", model, "--device", "cpu"])
    assert r.exit_code == 0, r.output
    v = json.loads((tmp_path / "out" / "report.json").read_text())["input_checks"]["vocabulary"][0]
    assert 0 < v["hyp_oov_rate"] <= OOV_ERROR_RATE
    assert "only by Unicode normalisation (hypotheses NFD, vocabulary NFC)" in v["hint"]
    assert "Unicode normalisation" in r.output


def test_rescore_nbest_with_the_fixtures_own_vocabulary_reports_without_warning(tmp_path, caplog):
    model = _save_model(tmp_path / "lm.pt", _small_words())
    r = _run([NBEST_SMALL, tmp_path / "out", "--data-dir", NBEST_SMALL / "data", "--model", model,
              "--device", "cpu"])
    assert r.exit_code == 0, r.output
    v = json.loads((tmp_path / "out" / "report.json").read_text())["input_checks"]["vocabulary"][0]
    assert v["hyp_oov_rate"] == 0.0 and v["words_txt_oov"] == 0 and not v["warnings"]
    assert not [m for m in caplog.messages if "vocabulary" in m or "words.txt" in m]


def _kaldi_nbest(tmp_path: Path) -> tuple:
    """The kaldi-nbest-fixture's integer archives as an N-best dir (no words_text), a data dir
    of its utterances' references from the dev set, and the dev set's words.txt."""
    fx = shared_data_path("kaldi-nbest-fixture")
    dev = shared_data_path("tts-wikitext2-dev")
    nb = tmp_path / "nb"
    nb.mkdir()
    for name in ("words", "acwt", "lmwt.withlm"):
        shutil.copy(fx / name, nb / name)
    shutil.copy(fx / "lmwt.withlm", nb / "lmwt.nolm")  # the checks look at the words alone
    keys = [ln.split()[0] for ln in (nb / "words").read_text().splitlines()]
    utts = {k.rsplit("-", 1)[0] for k in keys}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "text").write_text("".join(ln + "\n" for ln in (dev / "data" / "text").read_text().splitlines()
                                                    if ln.split()[0] in utts))
    (tmp_path / "lmwt.nn").write_text("".join(f"{k} 0\n" for k in keys))
    return nb, tmp_path / "data", dev / "lang" / "words.txt"


@pytest.mark.shared_data
def test_the_right_words_txt_on_real_kaldi_archives_does_not_warn(tmp_path, caplog):
    nb, data, words_txt = _kaldi_nbest(tmp_path)
    r = _run([nb, tmp_path / "out", "--data-dir", data, "--words-txt", words_txt, "--nn-costs", tmp_path / "lmwt.nn",
              "--weight", "0.5"])
    assert r.exit_code == 0, r.output
    st = json.loads((tmp_path / "out" / "report.json").read_text())["input_checks"]["symbol_table"]
    assert st["words_txt"] == str(words_txt) and st["first_pass_wer"] < 50 and st["token_overlap"] > 50
    assert not st["warnings"] and "symbol table " in (tmp_path / "out" / "report.txt").read_text()
    # the one warning: its 8 utterances are too few for a bootstrap to trust
    assert [r.getMessage()[:18] for r in caplog.records if r.levelname == "WARNING"] == ["only 8 utterances:"]


@pytest.mark.shared_data
def test_a_shuffled_words_txt_of_the_same_size_is_named(tmp_path, caplog):
    nb, data, words_txt = _kaldi_nbest(tmp_path)
    lines = words_txt.read_text().splitlines()
    ids = [ln.split()[1] for ln in lines]
    random.Random(3).shuffle(ids)
    wrong = tmp_path / "words.txt"
    wrong.write_text("".join(f"{ln.split()[0]} {i}\n" for ln, i in zip(lines, ids)))
    r = _run([nb, tmp_path / "out", "--data-dir", data, "--words-txt", wrong, "--nn-costs", tmp_path / "lmwt.nn",
              "--weight", "0.5"])
    assert r.exit_code == 0, r.output
    st = json.loads((tmp_path / "out" / "report.json").read_text())["input_checks"]["symbol_table"]
    assert st["token_overlap"] < 20 and len(st["warnings"]) == 1 and str(wrong) in st["warnings"][0]
    assert any("wrong words.txt" in m and str(wrong) in m for m in caplog.messages)
    assert "warning      the first pass" in (tmp_path / "out" / "report.txt").read_text()


@pytest.mark.shared_data
def test_the_dev_set_through_its_words_txt_does_not_warn(tmp_path, caplog):
    dev = shared_data_path("tts-wikitext2-dev")
    nb = tmp_path / "nb"
    nb.mkdir()
    for name in ("words", "acwt", "lmwt.withlm", "lmwt.nolm"):  # no words_text: the ids through words.txt
        (nb / name).symlink_to(dev / "nbest" / name)
    r = _run([nb, tmp_path / "out", "--data-dir", dev / "data", "--words-txt", dev / "lang" / "words.txt"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    st = rep["input_checks"]["symbol_table"]
    assert st["first_pass_wer"] == pytest.approx(rep["first_rank_wer"]) and 15 < st["first_pass_wer"] < 30
    assert not st["warnings"] and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_one_recording_in_rescore_nbest_gives_no_interval(tmp_path, nbest_small, caplog):
    seg = nbest_small / "data" / "segments"
    seg.write_text("".join(f"{ln.split()[0]} rec 0 1\n" for ln in seg.read_text().splitlines()))
    (nbest_small / "data" / "utt2spk").unlink()
    (nbest_small / "data" / "spk2utt").unlink()
    r = _run([nbest_small, tmp_path / "out", "--data-dir", nbest_small / "data", "--wip", "0.5"])
    assert r.exit_code == 0, r.output
    cmp = json.loads((tmp_path / "out" / "report.json").read_text())["comparison"]
    assert cmp["bootstrap"]["units"] == 1 and cmp["bootstrap"]["reliable"] is False
    assert cmp["differences"][0]["ci"] is None and cmp["differences"][0]["p_value"] is None
    assert "note: one recording (by segments) only" in (tmp_path / "out" / "report.txt").read_text()


def test_reference_spelling_hint_names_case_and_form_not_ordinary_errors():
    from rescore.nbest.checks import reference_spelling_hint

    hyps = {"the", "cat", "sat", "on", "a", "mat", "cafe\u0301"}
    refs = "the cat sat on the mat".split() * 5 + ["hat"]  # ordinary errors: words the hypotheses lack
    assert reference_spelling_hint(refs, hyps) is None
    assert reference_spelling_hint(refs + ["Mat"], hyps) is None  # one odd spelling in 32 tokens: under the share
    hint = reference_spelling_hint([w.upper() for w in refs], hyps)
    assert hint and "upper-case" in hint and "lower-case" in hint
    hint = reference_spelling_hint(["caf\u00e9"] * 3 + ["the"], hyps)
    assert hint and "NFC" in hint and "NFD" in hint
