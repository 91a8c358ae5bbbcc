"""The cascade of two NN LMs (rescore.nbest.cascade): rescore-nbest --cascade-top/--cascade-margin
against the full two-model runs and against the rule recomputed from its own cost files, and
rescore-tune sweeping the cascade's limits from one scoring."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.cli.test_cli_nbest import two_models  # noqa: F401  (the fixture: an LSTM and a Transformer)
from tests.conftest import NBEST_SMALL
from rescore.cli.convert import convert as convert_main
from rescore.cli.nbest import main
from rescore.cli.tune import main as tune_main
from rescore.errors import OptionError, RescoreError
from rescore.io.kaldi import read_nn_costs, read_table
from rescore.nbest.cascade import OUT_OF_CASCADE, Cascade, CascadeRanks, rank_and_gap, survivors
from rescore.nbest.combine import CostArrays
from rescore.nbest.interp import Params
from rescore.nbest.sets import load_nbest_dir

DATA = NBEST_SMALL / "data"
SETTING = ["--weight", "0.7", "--inv-acwt", "10", "--wip", "0.5"]


def _run(out, models, *extra):
    args = [str(NBEST_SMALL), str(out), "--data-dir", str(DATA), "--device", "cpu", "--oov-penalty", "0",
            *SETTING, *extra]
    for m in models:
        args += ["--model", str(m)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r


def _max_diff(x, y, keys=None):
    keys = list(x) if keys is None else keys
    return max((abs(p - q) for k in keys for p, q in zip(x[k], y[k])), default=0.0)


def test_rank_gap_and_survivors():
    totals = np.array([3.0, 1.0, 1.0, 7.0, 5.0, 2.0])  # two utterances: [3, 1, 1] and [7, 5, 2]
    rank, gap = rank_and_gap(totals, np.array([0, 3]))
    assert rank.tolist() == [3, 1, 2, 3, 2, 1]  # a tie goes to the better first-pass rank
    assert gap.tolist() == [2.0, 0.0, 0.0, 5.0, 3.0, 0.0]
    assert survivors(rank, gap, Cascade(top=1)).tolist() == [False, True, False, False, False, True]
    assert survivors(rank, gap, Cascade(margin=3.0)).tolist() == [True, True, True, False, True, True]
    assert survivors(rank, gap, Cascade(top=2, margin=2.5)).tolist() == [False, True, True, False, False, True]
    for bad in (dict(top=-1), dict(top=True), dict(margin=-1.0), dict(margin=float("inf")), dict(margin=float("nan"))):
        with pytest.raises(OptionError):
            Cascade(**bad)


def test_cascade_follows_its_rule(two_models, tmp_path):  # noqa: F811
    # Without carry every model's cost of a hypothesis is that of a one-model run, so the cascade's
    # files can be checked against the rule recomputed from them: the survivors are the top K by
    # the cheap model's total, they have the expensive model's costs, the others the cheap one's;
    # the 1-best is the best survivor by the mixed total; lmwt.interp puts the others out of reach.
    a, b = two_models
    for name, m in (("a", a), ("b", b)):
        _run(tmp_path / name, [m], "--state-carry", "none")
    one = {n: read_nn_costs(tmp_path / n / "lmwt.nn") for n in "ab"}
    out = tmp_path / "cascade"
    _run(out, [a, b], "--state-carry", "none", "--cascade-top", "2", "--mix", "0.4,0.6")
    s = load_nbest_dir(NBEST_SMALL, DATA)
    keys = [h.key for u in s.utterances() for h in u.hyps]
    arrays = CostArrays(s)
    fixed = arrays.fixed(Params(0.7, 10, 0.5))
    cheap = np.array([sum(one["a"][k]) for k in keys])
    rank, _ = rank_and_gap(fixed + 0.7 * cheap, arrays.starts)
    keep = rank <= 2
    assert keep.sum() < len(keys)  # the test means something: some hypotheses are left out
    nn1, nn2 = read_nn_costs(out / "lmwt.nn.1"), read_nn_costs(out / "lmwt.nn.2")
    assert _max_diff(nn1, one["a"]) < 1e-5
    assert _max_diff(nn2, one["b"], [k for k, s_ in zip(keys, keep) if s_]) < 1e-5
    assert all(nn2[k] == nn1[k] for k, s_ in zip(keys, keep) if not s_)
    ranks = CascadeRanks.read(out / "lmwt.cascade")
    assert ranks.rank.tolist() == rank.tolist() and ranks.scored.tolist() == keep.tolist()
    total = fixed + 0.7 * (0.4 * cheap + 0.6 * np.array([sum(nn2[k]) for k in keys]))
    text = dict(line.split(" ", 1) for line in (out / "text").read_text().splitlines())
    for u, start in zip(s.utterances(), arrays.starts):
        block = np.where(keep[start:start + len(u.hyps)], total[start:start + len(u.hyps)], np.inf)
        assert text[u.id] == " ".join(u.hyps[int(np.argmin(block))].words)
    interp = read_table(out / "lmwt.interp", "float")
    off = {k: v for k, v in zip(interp.keys, interp.values)}
    rep = json.loads((out / "report.json").read_text())
    assert rep["cascade"] == {"top": 2, "margin": None, "hypotheses": len(keys), "scored_by_model_2": int(keep.sum())}
    # lmwt.interp: a survivor's graph cost is the interpolation's, a non-survivor's OUT_OF_CASCADE more
    mixed = read_nn_costs(out / "lmwt.nn")
    for k, h, s_ in zip(keys, [h for u in s.utterances() for h in u.hyps], keep):
        want = h.nolm + 0.3 * (h.withlm - h.nolm) + 0.7 * sum(mixed[k]) + (0.0 if s_ else OUT_OF_CASCADE)
        assert abs(float(off[k]) - want) < 1e-3


def test_a_cascade_that_keeps_everything_is_the_full_interpolation(two_models, tmp_path):  # noqa: F811
    # K at least the list length: the expensive model scores every hypothesis. With --mix-carry own
    # that is the two-model run with own carry; with mixed carry at mix (1, 0) the expensive model
    # carries from the cheap model's best, as the lockstep run at (1, 0) does.
    a, b = two_models
    _run(tmp_path / "own", [a, b], "--mix-carry", "own")
    _run(tmp_path / "c-own", [a, b], "--mix-carry", "own", "--cascade-top", "100")
    for f in ("lmwt.nn.1", "lmwt.nn.2", "lmwt.nn"):
        assert _max_diff(read_nn_costs(tmp_path / "own" / f), read_nn_costs(tmp_path / "c-own" / f)) < 1e-5
    assert (tmp_path / "own" / "text").read_text() == (tmp_path / "c-own" / "text").read_text()
    assert read_table(tmp_path / "c-own" / "lmwt.cascade", "tokens").values[0][2] == "1"
    _run(tmp_path / "lock", [a, b], "--mix", "1,0")
    _run(tmp_path / "c-mixed", [a, b], "--mix", "1,0", "--cascade-top", "100")
    for f in ("lmwt.nn.1", "lmwt.nn.2"):
        assert _max_diff(read_nn_costs(tmp_path / "lock" / f), read_nn_costs(tmp_path / "c-mixed" / f)) < 1e-5


def test_the_expensive_model_carries_from_the_cascades_choice(two_models, tmp_path):  # noqa: F811
    # Carry rescored: the fast and naive engines agree on the cascade (each carries the same
    # choices), and at mix (0, 1) the expensive model's carried choice is its own best among the
    # survivors, which a margin of 0 makes the cheap model's best: it then carries what model A
    # picks, as the lockstep run at mix (1, 0) does.
    a, b = two_models
    runs = {}
    for engine in ("fast", "naive"):
        _run(tmp_path / engine, [a, b], "--cascade-top", "2", "--engine", engine)
        runs[engine] = [read_nn_costs(tmp_path / engine / f"lmwt.nn.{k}") for k in (1, 2)]
    assert all(_max_diff(f, n) < 1e-4 for f, n in zip(runs["fast"], runs["naive"]))
    assert (tmp_path / "fast" / "text").read_text() == (tmp_path / "naive" / "text").read_text()
    _run(tmp_path / "m0", [a, b], "--mix", "0,1", "--cascade-margin", "0")
    _run(tmp_path / "lock", [a, b], "--mix", "1,0")
    scored = CascadeRanks.read(tmp_path / "m0" / "lmwt.cascade")
    keys = list(read_nn_costs(tmp_path / "m0" / "lmwt.nn.2"))
    chosen = [k for k, s in zip(keys, scored.scored) if s]
    assert _max_diff(read_nn_costs(tmp_path / "m0" / "lmwt.nn.2"), read_nn_costs(tmp_path / "lock" / "lmwt.nn.2"),
                     chosen) < 1e-5


def test_tune_sweeps_k_from_one_scoring(two_models, tmp_path):  # noqa: F811
    # One scoring at K = 3; rescore-tune at each smaller K (one setting, no carry) gives the WER
    # and the 1-best that rescore-nbest --cascade-top K gives.
    a, b = two_models
    big = tmp_path / "k3"
    _run(big, [a, b], "--state-carry", "none", "--cascade-top", "3")
    for k in (1, 2, 3):
        _run(tmp_path / f"k{k}", [a, b], "--state-carry", "none", "--cascade-top", str(k))
        want = json.loads((tmp_path / f"k{k}" / "report.json").read_text())["wer"]
        r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), "--nn-costs",
                                           str(big / "lmwt.nn.1"), "--nn-costs", str(big / "lmwt.nn.2"),
                                           "--cascade", str(big / "lmwt.cascade"), "--cascade-tops", str(k),
                                           "--weights", "0.7", "--inv-acwts", "10", "--wips", "0.5", "--mixes", "0.5",
                                           "--report", str(tmp_path / f"t{k}.json"),
                                           "--hyp-out", str(tmp_path / f"t{k}.txt")])
        assert r.exit_code == 0, r.output
        rep = json.loads((tmp_path / f"t{k}.json").read_text())
        assert rep["cascade"] == {"top": k, "margin": None} and f"cascade-top {k}" in r.output
        assert rep["dev_wer"] == pytest.approx(want)
        assert (tmp_path / f"t{k}.txt").read_text() == (tmp_path / f"k{k}" / "text").read_text()
    # the sweep of several K: the best row is among them, each row names its K
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), "--nn-costs",
                                       str(big / "lmwt.nn.1"), "--nn-costs", str(big / "lmwt.nn.2"),
                                       "--cascade", str(big / "lmwt.cascade"), "--cascade-tops", "1:3:1",
                                       "--cascade-margins", "0,5", "--weights", "0.5,0.7", "--inv-acwts", "10",
                                       "--wips", "0,0.5", "--mixes", "0.5", "--report", str(tmp_path / "all.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "all.json").read_text())
    assert {(row["cascade"]["top"], row["cascade"]["margin"]) for row in rep["grid"]} == \
        {(k, m) for k in (1, 2, 3) for m in (0.0, 5.0)}


def test_params_out_records_the_tuned_cascade_and_params_applies_it(two_models, tmp_path, caplog):  # noqa: F811
    # rescore-tune --params-out records the best K; rescore-nbest --params with the two models
    # runs that cascade (the same files as --cascade-top K); given options win; one model: not applied.
    a, b = two_models
    big = tmp_path / "k3"
    _run(big, [a, b], "--state-carry", "none", "--cascade-top", "3")
    params = tmp_path / "params.json"
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(DATA), "--nn-costs",
                                       str(big / "lmwt.nn.1"), "--nn-costs", str(big / "lmwt.nn.2"),
                                       "--cascade", str(big / "lmwt.cascade"), "--cascade-tops", "2",
                                       "--weights", "0.7", "--inv-acwts", "10", "--wips", "0.5", "--mixes", "0.5",
                                       "--params-out", str(params)])
    assert r.exit_code == 0, r.output
    assert json.loads(params.read_text())["cascade"] == {"top": 2, "margin": None}
    assert Cascade.from_params(params) == Cascade(top=2)
    k2 = tmp_path / "k2"
    _run(k2, [a, b], "--state-carry", "none", "--cascade-top", "2")
    args = [str(NBEST_SMALL), None, "--data-dir", str(DATA), "--device", "cpu", "--oov-penalty", "0",
            "--state-carry", "none", "--params", str(params), "--model", str(a), "--model", str(b)]
    for name, extra, want in (("p", [], k2), ("given", ["--cascade-top", "3"], big)):
        args[1] = str(tmp_path / name)
        r = CliRunner().invoke(main, args + extra)
        assert r.exit_code == 0, r.output
        for f in ("lmwt.cascade", "lmwt.interp", "text"):
            assert (tmp_path / name / f).read_text() == (want / f).read_text(), (name, f)
    # an input of another format: a cascade cannot run there, the error names --params
    tsv = tmp_path / "nbest.tsv"
    assert CliRunner().invoke(convert_main, [str(NBEST_SMALL), str(tsv)]).exit_code == 0
    r = CliRunner().invoke(main, [str(tsv), str(tmp_path / "tsv"), "--data-dir", str(DATA), "--params", str(params),
                                  "--model", str(a), "--model", str(b)])
    assert r.exit_code == 2 and "--params" in r.output and "Kaldi N-best dir for a cascade" in r.output, r.output
    assert not (tmp_path / "tsv").exists()
    # a file's cascade with one model: a warning, the run goes on without it
    one = json.loads(params.read_text())
    del one["mix"]
    (tmp_path / "one.json").write_text(json.dumps(one))
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "one"), "--data-dir", str(DATA), "--device",
                                  "cpu", "--oov-penalty", "0", "--params", str(tmp_path / "one.json"), "--model",
                                  str(a)])
    assert r.exit_code == 0, r.output
    assert any("records a cascade" in m and "not applied" in m for m in caplog.messages), caplog.messages
    assert not (tmp_path / "one" / "lmwt.cascade").exists()


@pytest.mark.parametrize("cascade", [{"top": 0}, {"top": -1}, {"top": 1.5}, {"top": None, "margin": None},
                                     {"margin": -2}, {"top": 2, "k": 1}, [2], "2"])
def test_a_bad_cascade_in_params_is_refused(tmp_path, cascade):
    p = tmp_path / "params.json"
    p.write_text(json.dumps({"weight": 0.5, "inv_acwt": 10, "wip": 0, "cascade": cascade}))
    with pytest.raises(RescoreError, match="'cascade'") as e:
        Cascade.from_params(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("extra, option", [
    (["--cascade-top", "2"], "--cascade-top"),          # one model
    (["--cascade-margin", "-1"], "--cascade-margin"),
    (["--cascade-margin", "nan"], "--cascade-margin"),
    (["--cascade-top", "-3"], "--cascade-top"),
])
def test_bad_cascade_options_exit_2(two_models, tmp_path, extra, option):  # noqa: F811
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "o"), "--data-dir", str(DATA),
                                  "--model", str(two_models[0]), *extra])
    assert r.exit_code == 2 and option in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_tune_cascade_options_are_checked(tmp_path):
    base = [str(NBEST_SMALL), "--data-dir", str(DATA)]
    for extra, needle in ((["--cascade-tops", "2"], "--cascade"), (["--cascade-margins", "2"], "--cascade"),
                          (["--cascade", str(tmp_path / "x"), "--cascade-tops", "1.5"], "--cascade-tops"),
                          (["--cascade", str(tmp_path / "x")], "--nn-costs"),
                          (["--cascade", str(tmp_path / "x"), "--nn-costs", str(tmp_path / "n1"), "--nn-costs",
                            str(tmp_path / "n2"), "--apply-to", str(NBEST_SMALL), str(tmp_path / "t"),
                            "--apply-nn-costs", str(tmp_path / "n1"), "--apply-nn-costs", str(tmp_path / "n2")],
                           "--apply-to")):
        r = CliRunner().invoke(tune_main, base + extra)
        assert r.exit_code == 2 and needle in r.output, (extra, r.output)
