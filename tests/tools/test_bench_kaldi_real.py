"""tools/kaldi/bench_kaldi_real.py: the export of our LSTM into Kaldi's format, the utterances where
Kaldi's carried state is ours, and the whole benchmark on the small N-best fixture.

Kaldi's scorer is tests/models/kaldi_scorer_standin.py (its arithmetic, written from its description);
with RESCORE_KALDI_STEPS (or KALDI_ROOT) pointing at Kaldi's steps/pytorchnn the same checks also
run against Kaldi's own model.py and compute_sentence_scores.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import tests.models.kaldi_scorer_standin as standin
from tests.conftest import NBEST_SMALL
from rescore.engine.score import UttInput, score_nbest
from rescore.models.kaldi_lm import import_kaldi_lm
from rescore.models import ModelConfig, build_model, load_checkpoint, save_checkpoint
from rescore.vocab import EOS, UNK, Vocabulary

from tools.kaldi import bench_kaldi_real as bench  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog"]
H, L = 8, 2


def random_lm(path: Path, words=WORDS, seed: int = 0, **config):
    """A small random LSTM checkpoint of ours, weights wide enough for costs that differ."""
    torch.manual_seed(seed)
    cfg = {"arch": "lstm", "head": "softmax", "hidden": H, "layers": L, "dropout": 0.0, **config}
    model = build_model(ModelConfig(**cfg), Vocabulary([EOS, UNK, *words]))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    save_checkpoint(model, path)
    return load_checkpoint(path)


def kaldi_steps():
    """Kaldi's steps/pytorchnn from the environment, or None."""
    steps = bench.default_kaldi_steps()
    return steps if steps and Path(steps, "compute_sentence_scores.py").is_file() else None


def test_export_imports_back_to_the_same_weights(tmp_path):
    ours = random_lm(tmp_path / "lm.pt")
    opts = bench.export_kaldi_lm(tmp_path / "lm.pt", tmp_path / "kaldi")
    assert opts == {"model_path": str(tmp_path / "kaldi/model.pt"), "vocabulary": str(tmp_path / "kaldi/words.txt"),
                    "model": "LSTM", "emsize": H, "nhid": H, "nlayers": L, "sent_boundary": EOS, "oov": UNK}
    assert (tmp_path / "kaldi/words.txt").read_text().splitlines()[:3] == [f"{EOS} 0", f"{UNK} 1", "the 2"]
    back = import_kaldi_lm(opts["model_path"], opts["vocabulary"], tmp_path / "back/model.pt", model_type="LSTM",
                           embedding_dim=H, hidden_dim=H, nlayers=L, tied=True, oov=UNK, sent_boundary=EOS)
    assert back.vocab.words == ours.vocab.words
    theirs, mine = back.state_dict(), ours.state_dict()
    assert set(theirs) == set(mine)
    for k in mine:
        assert torch.equal(theirs[k], mine[k]), k


# one conversation: rank 1 of u1 is its longest hypothesis (u2 starts clean), rank 1 of u2 is not
UTTS = {"c-u1": [["the", "cat", "sat"], ["the", "cat"], []],
        "c-u2": [["a", "dog"], ["a", "dog", "sat", "on", "the", "mat"], ["zebra", "sat"]],
        "c-u3": [["on", "the", "mat"], ["on", "a", "cat"]],
        "c-u4": [["the", "dog", "sat"]]}


def test_clean_utterances():
    lengths = {u: [len(h) + 1 for h in hyps] for u, hyps in UTTS.items()}
    order = list(UTTS)
    assert bench.clean_utterances(order, [order], lengths) == ["c-u1", "c-u2"]
    assert bench.clean_utterances(order, [order[:2], order[2:]], lengths) == ["c-u1", "c-u2"]  # u3 starts ours afresh
    lengths["c-u2"] = [3, 3, 3]
    assert bench.clean_utterances(order, [order], lengths) == order
    assert bench.clean_utterances(order, [order[:3], order[3:]], lengths) == order[:3]  # Kaldi crosses recordings
    assert bench.clean_utterances(order[1:], [order], lengths) == []  # ours carries from u1, Kaldi from nothing


@pytest.mark.parametrize("kaldi", ["stand-in", "kaldi"])
def test_our_costs_are_kaldis_rnnmodel_where_its_state_is_clean(tmp_path, kaldi):
    ours = random_lm(tmp_path / "lm.pt")
    opts = bench.export_kaldi_lm(tmp_path / "lm.pt", tmp_path / "kaldi")
    sd = torch.load(opts["model_path"], weights_only=True)
    vocab = standin.read_vocab(opts["vocabulary"])
    model = standin.RNNModel(len(vocab), H, L)
    if kaldi == "kaldi":  # Kaldi's own model.py holds the export
        steps = kaldi_steps() or pytest.skip("needs Kaldi's steps/pytorchnn: set RESCORE_KALDI_STEPS or KALDI_ROOT")
        km_spec = importlib.util.spec_from_file_location("kaldi_model", Path(steps) / "model.py")
        km = importlib.util.module_from_spec(km_spec)
        km_spec.loader.exec_module(km)
        model = km.RNNModel("LSTM", len(vocab), H, H, L, tie_weights=True)
    model.load_state_dict(sd)  # strict: Kaldi's names and shapes
    ref = standin.score(model.eval(), vocab, UTTS, EOS, UNK)
    conv = [UttInput(h, [0.0] * len(h)) for h in UTTS.values()]
    got = dict(zip(UTTS, score_nbest(ours, [conv], weight=0.5, state_carry="first-pass", device="cpu",
                                     progress=False)[0]))
    lengths = {u: [len(h) + 1 for h in hyps] for u, hyps in UTTS.items()}
    clean = bench.clean_utterances(list(UTTS), [list(UTTS)], lengths)
    assert clean == ["c-u1", "c-u2"]
    for u in UTTS:
        for r, g in zip(ref[u], got[u]):
            assert len(r) == len(g)
            if u in clean:
                assert g == pytest.approx(r, abs=1e-5), u
    diff = max(abs(sum(r) - sum(g)) for r, g in zip(ref["c-u3"], got["c-u3"]))
    assert diff > 1e-3  # u2's rank 1 was padded: Kaldi's state read padding


def test_other_models_are_refused(tmp_path):
    for cfg in (dict(head="pointer"), dict(arch="gru"), dict(output="class", classes=2)):
        random_lm(tmp_path / "lm.pt", **cfg)
        with pytest.raises(ValueError, match="LSTM with a softmax output layer only"):
            bench.export_kaldi_lm(tmp_path / "lm.pt", tmp_path / "kaldi")
    with pytest.raises(SystemExit, match=r"lm\.pt: Kaldi's RNNModel holds an LSTM .* output 'class'"):
        bench.main(["--model", str(tmp_path / "lm.pt"), "--runs", "exact-none", "--nbest-dir", str(NBEST_SMALL),
                    "--data-dir", str(NBEST_SMALL / "data")])


def test_run_names():
    assert bench.run_settings("none-first-pass") == ("none", "first-pass", "fp32")
    assert bench.run_settings("exact-rescored") == ("exact", "rescored", "fp32")
    assert bench.run_settings("none-first-pass-bf16") == ("none", "first-pass", "bf16")
    assert bench.run_settings("none-first-pass-int8-torch") == ("none", "first-pass", "int8")
    assert bench.run_settings("kaldi") is None and bench.run_settings("fast-none") is None
    with pytest.raises(SystemExit):
        bench.parse_args(["--model", "m.pt", "--runs", "none-first-pass,fast"])


@pytest.mark.slow
@pytest.mark.parametrize("kaldi", ["stand-in", "kaldi"])
def test_benchmark_on_the_small_fixture(tmp_path, kaldi, capsys):
    if kaldi == "kaldi":
        steps = kaldi_steps() or pytest.skip("needs Kaldi's steps/pytorchnn: set RESCORE_KALDI_STEPS or KALDI_ROOT")
    else:
        steps = tmp_path / "steps"
        steps.mkdir()
        shutil.copy(Path(standin.__file__), steps / "compute_sentence_scores.py")
    words = sorted({w for line in (NBEST_SMALL / "words_text").read_text().splitlines() for w in line.split()[1:]})
    random_lm(tmp_path / "lm.pt", words=words[:-3])  # a few words outside the vocabulary
    args = ["--model", str(tmp_path / "lm.pt"), "--nbest-dir", str(NBEST_SMALL), "--data-dir",
            str(NBEST_SMALL / "data"), "--kaldi-steps", str(steps), "--runs", "kaldi,exact-first-pass,none-rescored",
            "--utts", "4", "--work-dir", str(tmp_path / "work"), "--json", str(tmp_path / "r.json")]
    os.environ.pop("RESCORE_PROGRESS_SECONDS", None)
    report = bench.main(args)
    assert json.loads((tmp_path / "r.json").read_text())["summary"] == report["summary"]
    assert report["utterances"] == 4 and report["hyps"] == 14  # rec1's 3 utterances and rec2's first
    for name in ("kaldi", "exact-first-pass", "none-rescored"):
        r = report["runs"][name][0]
        assert r["cpu_s"] > 0 and r["user_s"] > 0 and r["peak_rss_mib"] > 10
    check = report["cost_check"]
    assert check["clean_utterances"] == 1 and check["clean_hyps"] == 4  # rec1-rms-000's rank 1 is short
    assert check["clean_max_abs"] < 1e-3  # Kaldi's 4 decimals
    assert check["all_max_abs"] > 1e-3  # padding read, a recording crossed
    out = capsys.readouterr().out
    assert "| kaldi |" in out and "| exact-first-pass |" in out and "load before:" in out
    nbest = (tmp_path / "work/nbest/words_text").read_text().splitlines()
    assert [line.rstrip() for line in nbest] == (NBEST_SMALL / "words_text").read_text().splitlines()[:14]
