"""The refining tune (rescore.jobs.refine, rescore-tune --refine-model): with state carry the costs
depend on the setting they were scored at; the refined setting's WER is the one rescore-nbest
gives at it, on the tuned set and, cross-validated, on each held-out half."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL
from rescore.cli.nbest import main as nbest_main
from rescore.cli.tune import main as tune_main

DATA = NBEST_SMALL / "data"
GRID = ["--weights", "0:1:0.25", "--inv-acwts", "8,10,12", "--wips", "0"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny LSTM trained in-process for a few steps on the fixture's references and its
    hypotheses' words (so that its costs, and what the carry brings, are not random weights')."""
    from rescore.models import ModelConfig
    from rescore.nbest.sets import load_nbest_dir
    from rescore.train.loop import TrainOptions, train_lm

    d = tmp_path_factory.mktemp("refine")
    nb = load_nbest_dir(NBEST_SMALL, DATA)
    refs = [" ".join(nb.refs[u.id]) for u in nb.utterances()]
    hyps = [" ".join(h.words) for u in nb.utterances() for h in u.hyps[1:2]]
    (d / "train.txt").write_text("\n".join(refs * 6 + hyps) + "\n")
    (d / "valid.txt").write_text("\n".join(refs) + "\n")
    opts = TrainOptions(train=d / "train.txt", valid=d / "valid.txt", out_dir=d / "lm", epochs=2, batch_size=2,
                        bptt=8, lr=1.0, device="cpu", threads=1)
    train_lm(ModelConfig(hidden=16, layers=1, dropout=0.0), opts)
    return d / "lm" / "model.pt"


def _settings(carry="rescored"):
    from rescore.settings import EngineSettings

    return EngineSettings(state_carry=carry, device="cpu", oov_penalty=0.0)


def _score(model, nbest, params, carry="rescored"):
    """NN costs of nbest scored afresh (scoring.load_model + score_nbest_set, as rescore-nbest)."""
    from rescore.nbest.combine import NnCosts
    from rescore.jobs.scoring import load_model, score_nbest_set

    lm, device, penalty = load_model(str(model), _settings(carry))
    costs = score_nbest_set(lm, nbest, params, _settings(carry), device=device, oov_penalty=penalty)
    return NnCosts.check(nbest, [costs], [None])


def test_refined_setting_gives_its_wer_in_rescore_nbest(model, tmp_path):
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), "--refine-model", str(model),
                                       "--device", "cpu", *GRID, "--params-out", str(tmp_path / "p.json"),
                                       "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["rounds"][0]["scored_at"] == {"weight": 0.8, "inv_acwt": 10.0, "wip": 0.0}
    assert f"round 1: scored at weight 0.8  inv_acwt 10  wip 0: WER {rep['rounds'][0]['scored_wer']:.2f} %" in r.output
    p = json.loads((tmp_path / "p.json").read_text())
    assert {k: p[k] for k in ("weight", "inv_acwt", "wip")} == rep["best"]
    n = CliRunner().invoke(nbest_main, [str(NBEST_SMALL), str(tmp_path / "o"), "--data-dir", str(DATA),
                                        "--model", str(model), "--device", "cpu", "--params", str(tmp_path / "p.json")])
    assert n.exit_code == 0, n.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["wer"] == pytest.approx(rep["dev_wer"])
    # every round's scored WER is rescore-nbest's at that round's setting
    first = rep["rounds"][0]
    n = CliRunner().invoke(nbest_main, [str(NBEST_SMALL), str(tmp_path / "o1"), "--data-dir", str(DATA),
                                        "--model", str(model), "--device", "cpu", "--weight", "0.8",
                                        "--inv-acwt", "10", "--wip", "0"])
    assert n.exit_code == 0, n.output
    assert json.loads((tmp_path / "o1" / "report.json").read_text())["wer"] == pytest.approx(first["scored_wer"])
    if rep["converged"]:
        assert rep["rounds"][-1]["tuned"] == rep["rounds"][-1]["scored_at"] == rep["best"]


def _flipping_scorer(nbest):
    """NN costs that favour the reference when scored at weight 0 and a wrong hypothesis when
    scored at any other weight: the tuned setting can never be stable."""
    calls = []

    def score(part, params):
        from rescore.nbest.combine import NnCosts

        calls.append(params)
        helps = params.weight == 0.0
        return NnCosts.check(part, [{h.key: [0.0 if (h.words == nbest.refs[u.id]) == helps else 50.0]
                                     for u in part.utterances() for h in u.hyps}], [None])

    return score, calls


def test_a_cycle_stops_and_keeps_the_best_scored_setting():
    from rescore.nbest.combine import CostArrays
    from rescore.nbest.interp import Params
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.refine import refine

    nb = load_nbest_dir(NBEST_SMALL, DATA)
    score, calls = _flipping_scorer(nb)
    start = Params(0.0, 10.0, 0.0)
    first_pass = CostArrays(nb).wer(start)
    good = CostArrays(nb, score(nb, start)).wer(Params(1.0, 10.0, 0.0))
    assert good < first_pass  # the precondition: the reference-favouring costs help at weight 1
    calls.clear()
    res = refine(nb, score, weights=[0.0, 1.0], inv_acwts=[10.0], wips=[0.0], start=start, rounds=5)
    assert res["stop"] == "cycle" and not res["converged"]
    assert [r["tuned"]["weight"] for r in res["rounds"]] == [1.0, 0.0]
    # round 1 predicted the weight-1 setting at `good`; scored there it is worse than the start
    assert res["rounds"][0]["predicted_wer"] == pytest.approx(good)
    assert res["rounds"][1]["scored_wer"] > first_pass
    assert res["best"] == start.as_dict() and res["dev_wer"] == pytest.approx(first_pass)
    assert len(calls) == 2


def test_one_round_keeps_the_start_and_warns(model, caplog):
    from rescore.nbest.interp import Params
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.refine import DEFAULT_START, ModelScorer, refine

    nb = load_nbest_dir(NBEST_SMALL, DATA)
    scorer = ModelScorer(str(model), _settings())
    res = refine(nb, scorer, weights=[0.0, 0.5], inv_acwts=[8.0, 10.0, 12.0], wips=[0.0], rounds=1)
    assert Params(**res["rounds"][0]["tuned"]) != DEFAULT_START  # the start (weight 0.8) is not in the grid
    assert res["stop"] == "rounds" and res["best"] == DEFAULT_START.as_dict()
    assert "not stable after 1 rounds" in caplog.text
    assert scorer.scorings == 1


def test_cross_validated_halves_are_scored_at_their_fold_setting(model):
    from rescore.nbest.combine import CostArrays, cross_validate, split_half
    from rescore.nbest.interp import Params
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.refine import DEFAULT_START, ModelScorer, refine_cross_validate

    nb = load_nbest_dir(NBEST_SMALL, DATA)
    grid = dict(weights=[0.0, 0.25, 0.5, 0.75, 1.0], inv_acwts=[8.0, 10.0, 12.0], wips=[0.0])
    res = refine_cross_validate(nb, ModelScorer(str(model), _settings()), bootstrap=100, **grid)
    halves = split_half(nb)
    errors = 0
    for fold, reported in zip(res["folds"], (halves[1], halves[0])):
        setting = Params(**fold["best"])
        own = CostArrays(reported, _score(model, reported, setting))  # scored afresh
        assert fold["held_out_wer"] == pytest.approx(own.wer(setting))
        errors += own.errors_of(setting)
        plain = Params(**fold["plain"]["best"])
        own = CostArrays(reported, _score(model, reported, plain))
        assert fold["plain"]["held_out_wer"] == pytest.approx(own.wer(plain))
    assert res["pooled_errors"] == errors
    # the plain figure as tuned is rescore-tune --cross-validate's on costs scored at the start
    fixed = cross_validate(nb, nn_costs=_score(model, nb, DEFAULT_START), **grid)
    assert res["plain_predicted_wer"] == pytest.approx(fixed["pooled_wer"])
    d = res["comparison"]["differences"][0]
    assert d["wer_diff"] == pytest.approx(res["pooled_wer"] - res["plain_wer"])
    assert res["comparison"]["bootstrap"]["units"] == 2  # resampled by recording


def test_without_rescored_carry_one_scoring_serves_every_round(model):
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.refine import ModelScorer, refine

    nb = load_nbest_dir(NBEST_SMALL, DATA)
    scorer = ModelScorer(str(model), _settings("none"))
    res = refine(nb, scorer, weights=[0.0, 0.5, 1.0], inv_acwts=[8.0, 10.0, 12.0], wips=[0.0])
    assert scorer.scorings == 1
    assert res["stop"] in ("stable", "rounds") and len(res["rounds"]) <= 2
    if len(res["rounds"]) == 2:  # the costs did not move, so the tuned setting cannot either
        assert res["converged"] and res["rounds"][0]["tuned"] == res["rounds"][1]["tuned"]


@pytest.mark.parametrize("args, option", [
    (["--refine-rounds", "2"], "--refine-rounds"),
    (["--state-carry", "none"], "--state-carry"),
    (["--refine-model", "{m}", "--nn-costs", "{m}"], "--nn-costs"),
    (["--refine-model", "{m}", "--split-half"], "--split-half"),
    (["--refine-model", "{m}", "--device", "gpu"], "--device"),
    (["--refine-model", "{m}", "--refine-rounds", "0"], "--refine-rounds"),
    (["--refine-model", "{m}", "--cross-validate", "--params-out", "{t}/p.json"], "--params-out"),
])
def test_bad_refine_options_exit_2_before_any_work(model, tmp_path, args, option):
    args = [a.replace("{m}", str(model)).replace("{t}", str(tmp_path)) for a in args]
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), *args])
    assert r.exit_code == 2, r.output
    assert option in r.output
    assert list(tmp_path.iterdir()) == []


def test_oov_penalty_defaults_as_rescore_nbest(model, tmp_path):
    """auto where a words.txt (or a training text) is known, else 0; auto without either: exit 2."""
    import shutil

    from rescore.jobs.refine import refine_job
    from rescore.jobs.tune import TuneJob

    bare = tmp_path / "nb"
    shutil.copytree(NBEST_SMALL, bare)
    (bare / "words.txt").unlink()  # words_text holds the words: no symbol table is needed

    def job(nbest_dir, **kw):
        tune = TuneJob(nbest_dir=str(nbest_dir), data_dir=str(DATA), weights=[0.0], inv_acwts=[10.0], wips=[0.0])
        return refine_job(tune, refine_model=str(model), oov_penalty=None, **kw)

    assert job(NBEST_SMALL).scoring.oov_penalty == "auto"
    assert job(bare).scoring.oov_penalty == 0.0
    assert job(bare, train_text=str(tmp_path / "t.txt")).scoring.oov_penalty == "auto"
    r = CliRunner().invoke(tune_main, [str(bare), "--data-dir", str(DATA), "--refine-model", str(model),
                                       "--oov-penalty", "auto"])
    assert r.exit_code == 2 and "--oov-penalty" in r.output and "words.txt" in r.output, r.output


def test_tuning_costs_scored_with_carry_notes_refine_model(model, tmp_path, caplog):
    """A note, not a warning: plain tuning on carried costs is sound (and did better on the mini
    recipe's small dev set than refining)."""
    caplog.set_level(logging.INFO)
    base = [str(NBEST_SMALL), "--data-dir", str(DATA), "--device", "cpu", "--model", str(model),
            "--weight", "0.5", "--inv-acwt", "10"]
    for carry in ("rescored", "none"):
        r = CliRunner().invoke(nbest_main, [base[0], str(tmp_path / carry), *base[1:], "--state-carry", carry])
        assert r.exit_code == 0, r.output
    caplog.clear()
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), *GRID,
                                       "--nn-costs", str(tmp_path / "rescored" / "lmwt.nn")])
    assert r.exit_code == 0, r.output
    noted = [rec.getMessage() for rec in caplog.records if rec.levelname == "INFO"]
    assert any("--state-carry rescored at weight 0.5" in m and "--refine-model" in m for m in noted), noted
    assert not [rec for rec in caplog.records if rec.levelname == "WARNING"]
    caplog.clear()
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), *GRID,
                                       "--nn-costs", str(tmp_path / "none" / "lmwt.nn")])
    assert r.exit_code == 0, r.output
    assert "--refine-model" not in caplog.text  # costs without carry hold at every setting
