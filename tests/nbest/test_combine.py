"""Interpolation (design §3), 1-best selection and tuning (the outputs: tests/jobs/test_pipeline.py)."""

from __future__ import annotations

import random

import pytest

from rescore.nbest.combine import (
    CostArrays,
    NnCosts,
    Params,
    best_hypotheses,
    fixed_cost,
    graph_cost,
    split_half,
    total_cost,
    tune,
)
from rescore.errors import RescoreError
from rescore.nbest.sets import Hypothesis, load_nbest_dir


def test_fixed_and_total_cost_follow_design_3():
    h = Hypothesis("u-1", ["a", "b", "c"], ac=950.0, withlm=30.0, nolm=2.0)
    w, inv, wip, l_nn = 0.25, 10.0, 0.5, 40.0
    # ac/inv + g0 + (1-w) l_ng + w l_nn + wip |h|, l_ng = withlm - nolm
    assert fixed_cost(h, w, inv, wip) == pytest.approx(95.0 + 2.0 + 0.75 * 28.0 + 1.5)
    assert total_cost(fixed_cost(h, w, inv, wip), l_nn, w) == pytest.approx(95.0 + 2.0 + 21.0 + 10.0 + 1.5)
    assert graph_cost(h, w, l_nn) == pytest.approx(2.0 + 21.0 + 10.0)
    assert fixed_cost(h, 0.0, inv, 0.0) == pytest.approx(95.0 + 30.0)  # weight 0: the first-pass cost


def _random_nn_costs(nbest, seed=0, per_token=True):
    rng = random.Random(seed)
    return {h.key: ([rng.uniform(0.5, 9.0) for _ in range(len(h.words) + 1)] if per_token
                    else [rng.uniform(5.0, 40.0)]) for u in nbest.utterances() for h in u.hyps}


def _checked(nbest, *costs):
    """The NnCosts of one or several models' key -> costs."""
    return NnCosts.check(nbest, list(costs), [f"model{k}.nn" for k in range(1, len(costs) + 1)])


def test_fast_sweep_agrees_with_a_scalar_reference(nbest_small):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    costs = _random_nn_costs(s)
    nn = _checked(s, costs)
    arrays = CostArrays(s, nn)
    rng = random.Random(3)
    for _ in range(200):
        p = Params(rng.choice([0.0, rng.random()]), rng.uniform(1, 20), rng.uniform(-3, 3))
        # one hypothesis at a time: the formula of rescore.nbest.interp, the first minimum
        ref = [min(range(len(u.hyps)), key=lambda i: total_cost(fixed_cost(u.hyps[i], p.weight, p.inv_acwt, p.wip),
                                                                  sum(costs[u.hyps[i].key]), p.weight))
               for u in s.utterances()]
        assert (arrays.best(p) - arrays.starts).tolist() == ref
        best = best_hypotheses(s, p, nn)
        assert [best[u] for u in arrays.utt_ids] == ref


def test_tune_picks_the_grid_minimum_and_reports_held_out(nbest_small):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    dev, held = split_half(s)
    assert [c.id for c in dev.conversations] == ["rec1"] and [c.id for c in held.conversations] == ["rec2"]
    costs = _random_nn_costs(s, seed=5)
    grid = dict(weights=[0.0, 0.5, 1.0], inv_acwts=[8.0, 10.0, 12.0], wips=[-1.0, 0.0, 1.0])
    res = tune(dev, nn_costs=_checked(s, costs), held_out=held, **grid)
    assert len(res["grid"]) == 27
    assert res["dev_wer"] == min(r["wer"] for r in res["grid"])
    first_min = next(r for r in res["grid"] if r["wer"] == res["dev_wer"])
    assert res["best"] == {k: first_min[k] for k in ("weight", "inv_acwt", "wip")}
    # the held-out figure is the WER of the chosen setting on the other half, recomputed with jiwer
    from rescore.metrics import align

    best = best_hypotheses(held, Params(**res["best"]), _checked(s, costs))
    stats, _ = align(held.refs, {u.id: u.hyps[best[u.id]].words for u in held.utterances()})
    assert res["held_out_wer"] == pytest.approx(stats.wer)
    # without NN costs only weight 0 is swept
    assert {r["weight"] for r in tune(dev, **grid)["grid"]} == {0.0}


def test_params_json_round_trip(tmp_path):
    p = Params(0.3, 9.5, -0.5)
    p.to_json(tmp_path / "p.json", dev_wer=12.0)
    assert Params.from_json(tmp_path / "p.json") == p
    (tmp_path / "bad.json").write_text('{"weight": 0.1,\n "inv_acwt": }')
    with pytest.raises(RescoreError, match=r"bad\.json:2: expected JSON"):
        Params.from_json(tmp_path / "bad.json")


def test_tune_with_weight_dependent_costs(nbest_small):
    # A model's costs depend on the weight (state carry); tune() asks for them per weight.
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    asked = []

    def costs_for(w):
        asked.append(w)
        return _checked(s, _random_nn_costs(s, seed=int(w * 10)))

    grid = dict(weights=[0.0, 0.5], inv_acwts=[10.0], wips=[0.0])
    res = tune(s, nn_costs=costs_for, **grid)
    assert asked == [0.0, 0.5]
    fixed = tune(s, nn_costs=_checked(s, _random_nn_costs(s, seed=5)), weights=[0.5], inv_acwts=[10.0], wips=[0.0])
    assert res["grid"][1]["wer"] == fixed["grid"][0]["wer"]


# --------------------------------------------------------------------------------------------
# Interpolating several NN LMs: Params.mix, the mixed cost, the mix sweep


def test_mix_is_checked_and_round_trips(tmp_path):
    from rescore.errors import OptionError

    assert Params().mix == (1.0,) and Params(0.5, 10.0, 0.0, [0.25, 0.75]).mix == (0.25, 0.75)
    for bad, what in (((0.5, 0.6), "summing to 1"), ((-0.5, 1.5), ">= 0"), ((), "one share"),
                      ((float("nan"), 1.0), ">= 0"), (("a", 1.0), ">= 0")):
        with pytest.raises(OptionError, match=what) as e:
            Params(mix=bad)
        assert e.value.option == "--mix"
    p = Params(0.3, 9.5, -0.5, (0.6, 0.4))
    p.to_json(tmp_path / "p.json")
    assert Params.from_json(tmp_path / "p.json") == p
    # one model: no "mix" written, and an old file without one reads as one model
    assert "mix" not in Params(0.3, 9.5, 0.0).as_dict()
    (tmp_path / "old.json").write_text('{"weight": 0.3, "inv_acwt": 9.5, "wip": 0}')
    assert Params.from_json(tmp_path / "old.json").mix == (1.0,)
    for text in ('{"weight": 0.3, "inv_acwt": 9.5, "wip": 0, "mix": [0.7, 0.7]}',
                 '{"weight": 0.3, "inv_acwt": 9.5, "wip": 0, "mix": 0.5}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(RescoreError, match=r"bad\.json: expected 'mix'"):
            Params.from_json(tmp_path / "bad.json")


def test_mixed_cost_is_the_share_weighted_sum(nbest_small):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    a, b = _random_nn_costs(s, seed=1), _random_nn_costs(s, seed=2, per_token=False)
    rng = random.Random(4)
    arrays = CostArrays(s, _checked(s, a, b))
    for _ in range(50):
        share = rng.random()
        p = Params(rng.random(), rng.uniform(5, 15), rng.uniform(-2, 2), (share, 1.0 - share))
        # the 1-best of two cost sets under a mix == the 1-best of one set of the mixed totals
        mixed = {k: [share * sum(a[k]) + (1.0 - share) * sum(b[k])] for k in a}
        one = best_hypotheses(s, p.replace(mix=(1.0,)), _checked(s, mixed))
        assert best_hypotheses(s, p, _checked(s, a, b)) == one
        assert [one[u] for u in arrays.utt_ids] == (arrays.best(p) - arrays.starts).tolist()
    # the lmwt.nn of a mix: per token where both are per token, else the total
    both = _checked(s, a, a).mixed_rows((0.25, 0.75))
    assert all(len(both[k]) == len(a[k]) and both[k] == pytest.approx(a[k]) for k in a)
    tot = _checked(s, a, b).mixed_rows((0.25, 0.75))
    assert all(tot[k] == pytest.approx([0.25 * sum(a[k]) + 0.75 * b[k][0]]) for k in a)
    with pytest.raises(RescoreError, match="one --mix share per set"):
        best_hypotheses(s, Params(0.5), _checked(s, a, b))


def test_mix_grid():
    from rescore.nbest.combine import mix_grid

    assert mix_grid([0.0, 0.5, 1.0], 1) == [(1.0,)]
    assert mix_grid([0.0, 0.3, 1.0], 2) == [(0.0, 1.0), (0.3, 0.7), (1.0, 0.0)]
    three = mix_grid([round(0.1 * i, 10) for i in range(11)], 3)
    assert len(three) == 66 == len(set(three))  # C(12, 2): shares in steps of 0.1
    assert all(abs(sum(m) - 1.0) < 1e-9 and min(m) >= 0 for m in three)


def test_tune_finds_a_mix_better_than_either_model(nbest_small):
    # Model A knows rec1's references, model B rec2's (each is flat elsewhere): only a mix of the
    # two picks the reference everywhere, and the sweep must find one.
    s = load_nbest_dir(nbest_small, nbest_small / "data")

    def knows(conv):
        return {h.key: [0.0 if (h.words == s.refs[u.id] or not u.id.startswith(conv)) else 50.0]
                for u in s.utterances() for h in u.hyps}

    a, b = knows("rec1"), knows("rec2")
    grid = dict(weights=[0.5, 1.0], inv_acwts=[10.0], wips=[0.0])
    alone = [tune(s, nn_costs=_checked(s, c), **grid)["dev_wer"] for c in (a, b)]
    res = tune(s, nn_costs=_checked(s, a, b), mixes=[(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)], **grid)
    assert res["dev_wer"] <= min(alone) and res["dev_wer"] < max(alone)
    assert res["dev_wer"] == 0.0 and res["best"]["mix"] == [0.5, 0.5]
    assert len(res["grid"]) == 6 and all("mix" in r for r in res["grid"])
    # the pure mixes reproduce each model alone
    for mix, wer in (((1.0, 0.0), alone[0]), ((0.0, 1.0), alone[1])):
        assert min(r["wer"] for r in res["grid"] if tuple(r["mix"]) == mix) == wer
