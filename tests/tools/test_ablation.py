"""tools/experiments/ablation.py: cross-validated tuning per system, the table, its CIs, bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL

from tools.experiments import ablation  # noqa: E402

GRID = ["--weights", "0,0.5,1", "--inv-acwts", "8,10,12", "--wips", "0,0.5"]


def _nn_costs(tmp_path):
    """Two lmwt.nn of nbest-small: one that prefers the references, one of random costs."""
    import random

    from rescore.io.kaldi import write_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    nb = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    rnd = random.Random(0)
    write_nn_costs(tmp_path / "good.nn", {h.key: [0.0 if h.words == nb.refs[u.id] else 5.0 + rnd.random()]
                                          for u in nb.utterances() for h in u.hyps})
    write_nn_costs(tmp_path / "rnd.nn", {h.key: [5.0 * rnd.random()] for u in nb.utterances() for h in u.hyps})
    (tmp_path / "train.txt").write_text("the lobster is blue\nlobsters live in the sea\nthe river flows north\n")


def _run(tmp_path, systems, extra=()):
    args = ["--nbest-dir", str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--out-dir",
            str(tmp_path / "out"), *GRID, *[a for s in systems for a in ("--system", s)], *extra]
    return CliRunner().invoke(ablation.main, args)


def test_table_row_per_system_and_cis_match_compare_systems(tmp_path):
    from rescore.cli.wer import main as wer_main
    from rescore.io.kaldi import read_text_table
    from rescore.metrics import compare_systems
    from rescore.jobs.tune import TuneJob, format_setting, tune_nbest_dir
    from rescore.vocab import count_words, read_sentences

    _nn_costs(tmp_path)
    systems = ["first-pass=first-pass", f"good={tmp_path / 'good.nn'}", f"rnd={tmp_path / 'rnd.nn'}"]
    r = _run(tmp_path, systems, ["--train-text", str(tmp_path / "train.txt"), "--buckets", "3",
                                 "--pair", "good:rnd", "--bootstrap", "200", "--seed", "3"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    md = (out / "ablation.md").read_text()
    res = json.loads((out / "ablation.json").read_text())
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| system")
            and not ln.startswith("| scope")]
    names = ["first-pass", "good", "rnd"]
    assert [ln.split(" | ")[0][2:] for ln in rows[:3]] == names
    assert md in r.output
    best = min(res["systems"][1:], key=lambda s: s["pooled_wer"])
    assert f"Best system: {best['name']}, pooled WER {best['pooled_wer']:.2f} %" in md
    # the comparisons are compare_systems of the pooled hypothesis files, on the same draws
    refs = read_text_table(NBEST_SMALL / "data" / "text", "tokens").as_dict()
    hyps = {n: read_text_table(out / f"{n}.txt", "tokens").as_dict() for n in names}
    groups = {u: u.split("-")[0] for u in refs}  # the fixture's recordings (its segments)
    counts = count_words(read_sentences(tmp_path / "train.txt"))
    opts = dict(train_counts=counts, num_buckets=3, groups=groups, draws=200, seed=3)
    for name in names[1:]:
        direct = compare_systems(refs, {"first-pass": hyps["first-pass"], name: hyps[name]}, **opts)
        got = next(d for d in res["baseline"]["differences"] if d["system"] == name)
        assert got["ci"] == direct["differences"][0]["ci"] and got["p_value"] == direct["differences"][0]["p_value"]
        d = direct["differences"][0]
        cell = f"{d['wer_diff']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
        assert cell in md
        assert ("no difference" in next(ln for ln in rows if ln.startswith(f"| {name} |"))) == (
            d["ci"][0] <= 0 <= d["ci"][1])
    pair = compare_systems(refs, {"rnd": hyps["rnd"], "good": hyps["good"]}, **opts)
    assert res["pairs"][0]["comparison"]["differences"] == pair["differences"]
    assert res["pairs"][0]["comparison"]["buckets"] == pair["buckets"]
    assert sum(ln.startswith("| bucket ") for ln in md.splitlines()) == 3
    assert "Verdict: good against rnd: overall " in md
    # each system's figures are rescore-tune --cross-validate's, and its WER is rescore-wer's
    for s in res["systems"]:
        costs = () if s["costs"] == "first-pass" else (s["costs"][0],)
        cv = tune_nbest_dir(TuneJob(nbest_dir=str(NBEST_SMALL), data_dir=str(NBEST_SMALL / "data"), nn_costs=costs,
                                    weights=[0, 0.5, 1], inv_acwts=[8, 10, 12], wips=[0, 0.5], cross_validate=True))
        assert s["pooled_wer"] == cv["pooled_wer"]
        assert s["settings"] == {"1": cv["folds"][0]["best"], "2": cv["folds"][1]["best"]}
        assert f"{s['name']}: tuned on half 1: {format_setting(cv['folds'][0]['best'])}" in md
        w = CliRunner().invoke(wer_main, [str(NBEST_SMALL / "data" / "text"), str(out / f"{s['name']}.txt"),
                                          "--report", str(tmp_path / "w.json")])
        assert w.exit_code == 0, w.output
        assert json.loads((tmp_path / "w.json").read_text())["wer"] == pytest.approx(s["pooled_wer"])


@pytest.mark.parametrize("case", ["no-equals", "missing-costs", "other-hyps", "one-conversation", "bad-pair",
                                  "duplicate"])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, nbest_small, case):
    _nn_costs(tmp_path)
    systems, extra, code, needle = ["first-pass=first-pass"], [], 1, None
    nbest = NBEST_SMALL
    if case == "no-equals":
        systems.append(str(tmp_path / "good.nn"))
        code, needle = 2, "NAME=COSTS"
    elif case == "missing-costs":
        systems.append(f"x={tmp_path / 'none.nn'}")
        needle = "none.nn"
    elif case == "other-hyps":
        (tmp_path / "other.nn").write_text("".join(f"other-{i} 1.0 \n" for i in range(17)))
        systems.append(f"x={tmp_path / 'other.nn'}")
        needle = "other.nn"
    elif case == "one-conversation":
        seg = nbest_small / "data" / "segments"
        seg.write_text(seg.read_text().replace("rec2 0.00 1.80", "rec1 6.00 7.80")
                       .replace("rec2 1.80 3.90", "rec1 7.80 9.90"))
        nbest = nbest_small
        needle = "at least 2 conversations"
    elif case == "bad-pair":
        extra = ["--pair", "first-pass:lstm"]
        code, needle = 2, "--pair"
    elif case == "duplicate":
        systems.append("first-pass=first-pass")
        code, needle = 2, "a different NAME"
    args = ["--nbest-dir", str(nbest), "--data-dir", str(nbest / "data"), "--out-dir", str(tmp_path / "out"),
            *GRID, *[a for s in systems for a in ("--system", s)], *extra]
    r = CliRunner().invoke(ablation.main, args)
    assert r.exit_code == code and needle in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_help():
    r = CliRunner().invoke(ablation.main, ["--help"])
    assert r.exit_code == 0 and "--system" in r.output and "--pair" in r.output


def test_verdict_reads_the_cis():
    def d(ci):
        return {"wer_diff": sum(ci) / 2, "ci": ci}

    cmp = {"differences": [d([-0.9, -0.1])],
           "buckets": [{"bucket": 0, "differences": {"a": d([-2.0, -0.5])}},
                       {"bucket": 1, "differences": {"a": d([-0.5, 0.5])}},
                       {"bucket": 2, "differences": {"a": d([0.1, 1.0])}}]}
    assert ablation.verdict(cmp, "a", "b") == ("Verdict: a against b: overall significantly better; significantly "
                                               "better on buckets: 0; significantly worse on buckets: 2 (0 = rarest).")
    cmp["differences"] = [d([-0.3, 0.0])]  # a CI touching 0 covers it: no difference
    assert "overall no difference" in ablation.verdict(cmp, "a", "b")


def test_two_model_interpolation_is_rescore_tunes_mix_sweep(tmp_path):
    from rescore.nbest.combine import mix_grid
    from rescore.jobs.tune import TuneJob, tune_nbest_dir

    _nn_costs(tmp_path)
    good, rnd = tmp_path / "good.nn", tmp_path / "rnd.nn"
    r = _run(tmp_path, ["first-pass=first-pass", f"mix={good}+{rnd}"], ["--mixes", "0,0.5,1"])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "ablation.json").read_text())
    cv = tune_nbest_dir(TuneJob(nbest_dir=str(NBEST_SMALL), data_dir=str(NBEST_SMALL / "data"),
                                nn_costs=(str(good), str(rnd)), mixes=mix_grid([0, 0.5, 1], 2), weights=[0, 0.5, 1],
                                inv_acwts=[8, 10, 12], wips=[0, 0.5], cross_validate=True))
    mix = res["systems"][1]
    assert mix["costs"] == [str(good), str(rnd)] and mix["pooled_wer"] == cv["pooled_wer"]
    assert mix["settings"] == {"1": cv["folds"][0]["best"], "2": cv["folds"][1]["best"]}
    assert "mix" in mix["settings"]["1"] and len(mix["cv"]["folds"][0]["grid"]) == 3 * 3 * 3 * 2
