"""rescore-tune: tune on one half, report on the other, write params rescore-nbest reads."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL, shared_data_path
from rescore.cli.nbest import main as nbest_main
from rescore.cli.tune import main


def test_split_half_params_out_and_apply(tmp_path):
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--split-half",
                                  "--inv-acwts", "8,10,12", "--wips", "0", "--params-out", str(tmp_path / "p.json"),
                                  "--report", str(tmp_path / "r.json"),
                                  "--apply-to", str(NBEST_SMALL), str(tmp_path / "applied"),
                                  "--apply-data-dir", str(NBEST_SMALL / "data")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["dev_utts"] == 3 and rep["held_out_utts"] == 2 and len(rep["grid"]) == 3
    assert "held out 2 utterances" in r.output
    p = json.loads((tmp_path / "p.json").read_text())
    applied = json.loads((tmp_path / "applied" / "report.json").read_text())
    assert applied["params"] == {k: p[k] for k in ("weight", "inv_acwt", "wip")}
    r = CliRunner().invoke(nbest_main, [str(NBEST_SMALL), str(tmp_path / "again"), "--data-dir",
                                        str(NBEST_SMALL / "data"), "--params", str(tmp_path / "p.json")])
    assert r.exit_code == 0
    assert (tmp_path / "again" / "text").read_text() == (tmp_path / "applied" / "text").read_text()


def test_utt_lists_and_bad_grid(tmp_path):
    (tmp_path / "dev").write_text("rec1-rms-000\nrec1-rms-001\nrec2-awb-000\n")
    (tmp_path / "eval").write_text("rec1-rms-002\nrec2-awb-001\n")
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--dev-utts", str(tmp_path / "dev"), "--eval-utts", str(tmp_path / "eval")])
    assert r.exit_code == 0, r.output
    assert "tuned on 3 utterances" in r.output and "held out 2 utterances" in r.output
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--wips", "a:b"])
    assert r.exit_code == 2 and "--wips" in r.output


@pytest.mark.shared_data
def test_shared_dev_tuned_on_first_half_reported_on_second(tmp_path):
    d = shared_data_path("tts-wikitext2-dev")
    r = CliRunner().invoke(main, [str(d / "nbest"), "--data-dir", str(d / "data"), "--split-half",
                                  "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["dev_conversations"] == 30 and rep["held_out_conversations"] == 30
    assert rep["dev_utts"] + rep["held_out_utts"] == 627
    # the default grid holds the decoder's own setting, so tuning cannot do worse on the tuned half
    own = next(g for g in rep["grid"] if g["inv_acwt"] == 9.5 and g["wip"] == 0.0)
    assert rep["dev_wer"] <= own["wer"]


def _conflicting_nn_costs(path):
    """lmwt.nn for nbest-small where the halves want different NN weights: on rec1 (half 1) the
    NN LM prefers the reference, on rec2 (half 2) it prefers a wrong hypothesis."""
    from rescore.io.kaldi import write_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    nb = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    costs = {}
    for u in nb.utterances():
        helps = u.id.startswith("rec1")
        for h in u.hyps:
            right = h.words == nb.refs[u.id]
            costs[h.key] = [0.0 if right == helps else 50.0]
    write_nn_costs(path, costs)
    return nb


def test_cross_validate_reports_each_half_under_the_other_halfs_setting(tmp_path):
    from rescore.nbest.combine import CostArrays, NnCosts, split_half, tune
    from rescore.nbest.interp import Params

    nb = _conflicting_nn_costs(tmp_path / "lmwt.nn")
    grid = dict(weights=[0.0, 0.5, 1.0], inv_acwts=[10.0, 12.0], wips=[0.0])
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--cross-validate",
                                  "--nn-costs", str(tmp_path / "lmwt.nn"), "--weights", "0,0.5,1",
                                  "--inv-acwts", "10,12", "--wips", "0", "--report", str(tmp_path / "r.json"),
                                  "--hyp-out", str(tmp_path / "hyp.txt")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    f1, f2 = rep["folds"]
    assert (f1["tuned_on"], f1["reported_on"], f2["tuned_on"], f2["reported_on"]) == (1, 2, 2, 1)
    # half 1 wants the NN LM, half 2 does not: each half is reported under the other's setting,
    # which is worse there than the setting it would pick for itself (tuning on it would hide that)
    assert f1["best"]["weight"] > 0 and f2["best"]["weight"] == 0
    costs = NnCosts.read(nb, [tmp_path / "lmwt.nn"])
    half1, half2 = split_half(nb)
    for fold, tuned, reported in ((f1, half1, half2), (f2, half2, half1)):
        own = tune(tuned, nn_costs=costs, **grid)
        assert fold["best"] == own["best"] and fold["dev_wer"] == own["dev_wer"]
        assert fold["held_out_wer"] == CostArrays(reported, costs).wer(Params(**fold["best"]))
        assert fold["held_out_wer"] > tune(reported, nn_costs=costs, **grid)["dev_wer"]
    assert "dev_choice" not in f1 and "pooled_choice" not in rep  # the report is a summary
    assert rep["pooled_utts"] == 5 and rep["pooled_wer"] == pytest.approx(
        100.0 * (f1["held_out_errors"] + f2["held_out_errors"]) / 21)
    assert f"WER {rep['pooled_wer']:.2f} %" in r.output
    # the pooled 1-best text scores the same WER through rescore-wer (jiwer's alignment)
    from rescore.cli.wer import main as wer_main

    w = CliRunner().invoke(wer_main, [str(NBEST_SMALL / "data" / "text"), str(tmp_path / "hyp.txt"),
                                      "--report", str(tmp_path / "w.json")])
    assert w.exit_code == 0, w.output
    assert json.loads((tmp_path / "w.json").read_text())["wer"] == pytest.approx(rep["pooled_wer"])
    lines = (tmp_path / "hyp.txt").read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == [u.id for u in nb.utterances()]


def test_hyp_out_is_the_reported_set(tmp_path):
    from rescore.cli.wer import main as wer_main

    base = [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--inv-acwts", "8,10,12", "--wips", "0,0.5"]
    r = CliRunner().invoke(main, base + ["--split-half", "--hyp-out", str(tmp_path / "h.txt"),
                                         "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [ln.split()[0] for ln in (tmp_path / "h.txt").read_text().splitlines()] == ["rec2-awb-000", "rec2-awb-001"]
    w = CliRunner().invoke(wer_main, [str(NBEST_SMALL / "data" / "text"), str(tmp_path / "h.txt"),
                                      "--allow-missing", "--report", str(tmp_path / "w.json")])
    assert w.exit_code == 0, w.output
    # --allow-missing scores the absent half as deletions: count only what the held-out half has
    rw = json.loads((tmp_path / "w.json").read_text())
    half1_words = sum(len(ln.split()) - 1 for ln in (NBEST_SMALL / "data" / "text").read_text().splitlines()
                      if ln.startswith("rec1"))
    assert rw["errors"] - half1_words == round(rep["held_out_wer"] * rep["held_out_ref_words"] / 100)
    r = CliRunner().invoke(main, base + ["--hyp-out", str(tmp_path / "all.txt"), "--report", str(tmp_path / "r2.json")])
    assert r.exit_code == 0, r.output
    w = CliRunner().invoke(wer_main, [str(NBEST_SMALL / "data" / "text"), str(tmp_path / "all.txt"),
                                      "--report", str(tmp_path / "w2.json")])
    assert w.exit_code == 0, w.output
    assert json.loads((tmp_path / "w2.json").read_text())["wer"] == pytest.approx(
        json.loads((tmp_path / "r2.json").read_text())["dev_wer"])


@pytest.mark.parametrize("extra, needle", [
    (["--params-out", "p.json"], "--params-out"),
    (["--split-half"], "--split-half"),
    (["--hyp-out", "same.json", "--report", "same.json"], "different files"),
])
def test_cross_validate_bad_combinations(tmp_path, extra, needle):
    extra = [str(tmp_path / x) if x.endswith(".json") else x for x in extra]
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--cross-validate",
                                  *extra])
    assert r.exit_code == 2 and needle in r.output, r.output
    assert not list(tmp_path.iterdir())


def test_cross_validate_needs_two_conversations(nbest_small, tmp_path):
    seg = nbest_small / "data" / "segments"
    seg.write_text(seg.read_text().replace("rec2 0.00 1.80", "rec1 6.00 7.80").replace("rec2 1.80 3.90",
                                                                                      "rec1 7.80 9.90"))
    r = CliRunner().invoke(main, [str(nbest_small), "--data-dir", str(nbest_small / "data"), "--cross-validate",
                                  "--hyp-out", str(tmp_path / "h.txt")])
    assert r.exit_code == 1 and "at least 2 conversations" in r.output, r.output
    assert not (tmp_path / "h.txt").exists()


@pytest.mark.shared_data
def test_shared_dev_cross_validated_pooled_wer_is_rescore_wers(tmp_path):
    from rescore.metrics import wer_report

    d = shared_data_path("tts-wikitext2-dev")
    grid = ["--inv-acwts", "7:10:0.5", "--wips", "0:2:0.5"]
    r = CliRunner().invoke(main, [str(d / "nbest"), "--data-dir", str(d / "data"), "--cross-validate", *grid,
                                  "--report", str(tmp_path / "cv.json"), "--hyp-out", str(tmp_path / "hyp.txt")])
    assert r.exit_code == 0, r.output
    cv = json.loads((tmp_path / "cv.json").read_text())
    assert [f["dev_conversations"] for f in cv["folds"]] == [30, 30] and cv["pooled_utts"] == 627
    assert wer_report(d / "data" / "text", tmp_path / "hyp.txt")["wer"] == pytest.approx(cv["pooled_wer"])
    # fold 1 is --split-half's tuning and its held-out figure
    r = CliRunner().invoke(main, [str(d / "nbest"), "--data-dir", str(d / "data"), "--split-half", *grid,
                                  "--report", str(tmp_path / "sh.json")])
    assert r.exit_code == 0, r.output
    sh = json.loads((tmp_path / "sh.json").read_text())
    assert sh["best"] == cv["folds"][0]["best"] and sh["held_out_wer"] == cv["folds"][0]["held_out_wer"]


def _knows(s, conv):
    """Costs of an NN LM that knows the references of conversation conv and is flat elsewhere."""
    return {h.key: [0.0 if (h.words == s.refs[u.id] or not u.id.startswith(conv)) else 50.0]
            for u in s.utterances() for h in u.hyps}


def test_two_cost_files_tune_a_mix_that_rescore_nbest_reads_back(tmp_path):
    from rescore.io.kaldi import write_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    files = []
    for name, conv in (("a.nn", "rec1"), ("b.nn", "rec2")):
        write_nn_costs(tmp_path / name, _knows(s, conv))
        files += ["--nn-costs", str(tmp_path / name)]
    grid = ["--weights", "0.5,1", "--inv-acwts", "10", "--wips", "0"]
    run = CliRunner().invoke
    alone = []
    for f in (files[:2], files[2:]):
        r = run(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), *f, *grid,
                       "--report", str(tmp_path / "one.json")])
        assert r.exit_code == 0, r.output
        alone.append(json.loads((tmp_path / "one.json").read_text())["dev_wer"])
    r = run(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), *files, *grid,
                   "--mixes", "0:1:0.25", "--params-out", str(tmp_path / "p.json"),
                   "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert len(rep["grid"]) == 5 * 2 and rep["dev_wer"] <= min(alone) and rep["dev_wer"] < max(alone)
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["mix"] == rep["best"]["mix"] and 0 < p["mix"][0] < 1 and "mix" in r.output
    # --params-out into rescore-nbest: the same WER, and lmwt.nn holds the mixed costs
    r = run(nbest_main, [str(NBEST_SMALL), str(tmp_path / "o"), "--data-dir", str(NBEST_SMALL / "data"),
                         *files, "--params", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    out = json.loads((tmp_path / "o" / "report.json").read_text())
    assert out["wer"] == pytest.approx(rep["dev_wer"]) and out["params"]["mix"] == p["mix"]
    assert out["models"] == [str(tmp_path / "a.nn"), str(tmp_path / "b.nn")]
    from rescore.io.kaldi import read_nn_costs

    mixed, a, b = (read_nn_costs(f) for f in (tmp_path / "o" / "lmwt.nn", tmp_path / "a.nn", tmp_path / "b.nn"))
    m0, m1 = p["mix"]
    assert all(mixed[k] == pytest.approx([m0 * a[k][0] + m1 * b[k][0]]) for k in a)
    # --apply-to with one cost file per model: the same 1-best as that rescore-nbest run
    r = run(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), *files, *grid,
                   "--mixes", "0:1:0.25", "--apply-to", str(NBEST_SMALL), str(tmp_path / "ap"),
                   "--apply-data-dir", str(NBEST_SMALL / "data"),
                   *[x.replace("--nn-costs", "--apply-nn-costs") for x in files]])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ap" / "text").read_text() == (tmp_path / "o" / "text").read_text()
    # cross-validated: each fold tunes its own mix
    r = run(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), *files, *grid,
                   "--mixes", "0:1:0.25", "--cross-validate", "--report", str(tmp_path / "cv.json")])
    assert r.exit_code == 0, r.output
    cv = json.loads((tmp_path / "cv.json").read_text())
    assert all(len(f["best"]["mix"]) == 2 for f in cv["folds"]) and "mix " in r.output
