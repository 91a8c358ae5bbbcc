"""WER against jiwer, oracle WER, rare-word buckets and their bookkeeping."""

from __future__ import annotations

import random
from collections import Counter

import jiwer
import pytest

from rescore.errors import RescoreError
from rescore.metrics import (
    align,
    bucket_ce_difference,
    bucket_cross_entropy,
    bucket_wer,
    compare_systems,
    format_comparison,
    oracle_wer,
    plot_buckets,
    plot_comparison,
    rare_word_buckets,
)

WORDS = "the a of lobster blue red sea river north long it is in cooked turns zebra quartz".split()


def _corpus(seed, n=200):
    rng = random.Random(seed)
    refs, hyps = {}, {}
    for i in range(n):
        r = [rng.choice(WORDS) for _ in range(rng.randrange(0, 12))]
        h = list(r)
        for _ in range(rng.randrange(0, 4)):
            op = rng.randrange(3)
            if op == 0 and h:
                h[rng.randrange(len(h))] = rng.choice(WORDS)
            elif op == 1 and h:
                del h[rng.randrange(len(h))]
            else:
                h.insert(rng.randrange(len(h) + 1), rng.choice(WORDS))
        refs[f"u{i:03d}"], hyps[f"u{i:03d}"] = r, h
    refs["u000"] = ["a", "b"]
    refs["u001"], hyps["u001"] = [], ["extra", "words"]  # empty reference: insertions only
    return refs, hyps


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_wer_agrees_with_jiwer(seed):
    refs, hyps = _corpus(seed)
    stats, _ = align(refs, hyps)
    keys = list(refs)
    o = jiwer.process_words([" ".join(refs[u]) for u in keys], [" ".join(hyps[u]) for u in keys])
    assert (stats.substitutions, stats.deletions, stats.insertions) == (o.substitutions, o.deletions, o.insertions)
    assert stats.ref_words == sum(len(r) for r in refs.values())
    assert stats.wer / 100 == pytest.approx(o.wer)
    # jiwer.wer on the references that are not empty (it refuses empty ones)
    keys = [u for u in refs if refs[u]]
    stats2, _ = align({u: refs[u] for u in keys}, {u: hyps[u] for u in keys})
    assert stats2.wer / 100 == pytest.approx(jiwer.wer([" ".join(refs[u]) for u in keys],
                                                        [" ".join(hyps[u]) for u in keys]))


def test_missing_and_extra_hypotheses():
    refs, hyps = _corpus(4, n=10)
    del hyps["u005"]
    with pytest.raises(RescoreError, match="u005"):
        align(refs, hyps, hyp_path="hyp.txt")
    stats, _ = align(refs, hyps, allow_missing=True)
    full, _ = align(refs, {**hyps, "u005": []})
    assert stats.errors == full.errors


def test_buckets_are_rarest_first_roughly_equal_and_add_up():
    refs, hyps = _corpus(5, n=400)
    train = Counter({w: (i + 1) ** 2 for i, w in enumerate(WORDS)})  # 'the' rarest ... 'quartz' most frequent
    ref_tokens = [w for r in refs.values() for w in r]
    b = rare_word_buckets(train, ref_tokens, n=5)
    order = sorted(set(ref_tokens), key=lambda w: (train[w], w))
    assert [b[w] for w in order] == sorted(b[w] for w in order)  # monotone: rarer words, lower buckets
    assert b["never-seen"] == 0 and b["b"] == 0  # unseen words are the rarest
    stats, al = align(refs, hyps)
    rows = bucket_wer(al, b)
    assert sum(r["ref_tokens"] for r in rows) == stats.ref_words
    assert sum(r["errors"] for r in rows) == stats.errors  # insertions included, in their word's bucket
    for k in ("substitutions", "deletions", "insertions"):
        assert sum(r[k] for r in rows) == getattr(stats, k)
    assert all(r["errors"] == r["substitutions"] + r["deletions"] + r["insertions"] for r in rows)
    # the token-weighted mean of the bucket WERs is the WER
    assert sum(r["wer"] * r["ref_tokens"] for r in rows) / stats.ref_words == pytest.approx(stats.wer)
    for r in rows:  # a word is never split, so buckets are roughly (not exactly) equal
        assert r["ref_tokens"] <= 2 * stats.ref_words / 5


def test_bucket_cross_entropy():
    b = rare_word_buckets(Counter({"x": 1, "y": 100}), ["x", "y", "y", "x"], n=2)
    ce = bucket_cross_entropy(["x", "y", "x", "y"], [4.0, 1.0, 2.0, 3.0], b)
    assert ce == [{"bucket": 0, "tokens": 2, "ce": 3.0}, {"bucket": 1, "tokens": 2, "ce": 2.0}]
    diff = bucket_ce_difference(ce, [{"bucket": 0, "tokens": 2, "ce": 3.5}, {"bucket": 1, "tokens": 2, "ce": 1.0}])
    assert [d["ce_diff"] for d in diff] == [-0.5, 1.0]


def test_oracle_wer_brute_force_with_jiwer():
    refs, hyps = _corpus(6, n=30)
    rng = random.Random(0)
    nbests = {u: [hyps[u]] + [[rng.choice(WORDS) for _ in range(rng.randrange(0, 8))] for _ in range(5)] for u in refs}
    errs = 0
    for u, r in refs.items():
        best = None
        for h in nbests[u]:
            o = jiwer.process_words(" ".join(r) or "EMPTYREF", " ".join(h) or "EMPTYHYP") if r else None
            e = (o.substitutions + o.deletions + o.insertions) if r else len(h)
            if r and not h:
                e = len(r)
            best = e if best is None else min(best, e)
        errs += best
    assert oracle_wer(refs, nbests) == pytest.approx(100.0 * errs / sum(len(r) for r in refs.values()))


def test_plot_writes_png(tmp_path):
    rows = [{"bucket": i, "wer": 10.0 - i, "ref_tokens": 5, "errors": 1, "insertions": 0} for i in range(10)]
    plot_buckets(rows, tmp_path / "b.png", others=[rows], labels=["a", "b"], title="t")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------
# Two systems: the comparison, its bucket table and the paired bootstrap


def _two_systems(seed=7, n=300):
    refs, hyps = _corpus(seed, n=n)
    worse = dict(hyps)
    rng = random.Random(seed)
    for u in list(worse)[: n // 3]:  # more errors on a third of the utterances
        worse[u] = worse[u] + [rng.choice(WORDS)]
    return refs, hyps, worse


def test_comparison_bucket_table_adds_up_to_the_total():
    refs, a, b = _two_systems()
    train = Counter({w: (i + 1) ** 2 for i, w in enumerate(WORDS)})
    cmp = compare_systems(refs, {"a": a, "b": b}, train_counts=train, num_buckets=5, draws=200)
    for s in cmp["systems"]:
        stats, _ = align(refs, a if s["name"] == "a" else b)
        assert (s["errors"], s["insertions"]) == (stats.errors, stats.insertions)
        rows = [r["systems"][s["name"]] for r in cmp["buckets"]]
        assert sum(r["errors"] for r in rows) == s["errors"]
        for k in ("substitutions", "deletions", "insertions"):
            assert sum(r[k] for r in rows) == s[k]
    assert sum(r["ref_tokens"] for r in cmp["buckets"]) == cmp["ref_words"]
    # the printed total line is the sum of the rows, and equals the corpus figures
    total = [ln for ln in format_comparison(cmp).splitlines() if ln.lstrip().startswith("total")][0]
    nums = total.replace("|", " ").split()
    assert nums[1] == str(cmp["ref_words"])
    assert nums[2] == str(cmp["systems"][0]["errors"]) and nums[4] == str(cmp["systems"][1]["errors"])
    d = cmp["differences"][0]
    assert d["wer_diff"] == pytest.approx(cmp["systems"][1]["wer"] - cmp["systems"][0]["wer"])
    assert d["relative_change"] == pytest.approx(100 * d["wer_diff"] / cmp["systems"][0]["wer"])


def test_bootstrap_is_deterministic_under_a_seed():
    refs, a, b = _two_systems()
    def run(seed):
        return compare_systems(refs, {"a": a, "b": b}, draws=300, seed=seed)

    assert run(3) == run(3)
    assert run(3)["differences"][0]["ci"] != run(4)["differences"][0]["ci"]


def test_system_against_itself_ci_covers_zero():
    refs, a, _ = _two_systems()
    cmp = compare_systems(refs, {"a": a, "same": dict(a)}, draws=500, seed=1)
    d = cmp["differences"][0]
    assert d["wer_diff"] == 0 and d["ci"][0] <= 0 <= d["ci"][1]
    assert d["p_value"] == 1.0 and d["prob_improvement"] == 0.0


def test_clearly_better_system_ci_excludes_zero():
    refs, a, b = _two_systems()
    perfect = {u: list(r) for u, r in refs.items()}
    cmp = compare_systems(refs, {"a": a, "perfect": perfect, "worse": b}, draws=500, seed=1)
    better, worse = cmp["differences"]
    assert better["ci"][1] < 0 and better["p_value"] < 0.01 and better["prob_improvement"] == 1.0
    assert worse["ci"][0] > 0 and worse["prob_improvement"] < 0.01
    lo, hi = cmp["systems"][0]["wer_ci"]
    assert lo < cmp["systems"][0]["wer"] < hi


def test_bootstrap_against_a_slow_reference():
    """The vectorised bootstrap (one matrix product) equals a loop over the drawn utterances."""
    import numpy as np

    refs, a, b = _two_systems(n=80)
    cmp = compare_systems(refs, {"a": a, "b": b}, draws=200, seed=5)
    utts = list(refs)
    _, al_a = align(refs, a)
    _, al_b = align(refs, b)
    def err(al, u):
        return al[u].substitutions + al[u].deletions + len(al[u].inserted)

    idx = np.random.default_rng(5).integers(0, len(utts), size=(200, len(utts)))  # as _resample_counts draws
    diffs = []
    for draw in idx:
        n = sum(len(refs[utts[i]]) for i in draw)
        diffs.append(100.0 * (sum(err(al_b, utts[i]) for i in draw) - sum(err(al_a, utts[i]) for i in draw)) / n)
    assert cmp["differences"][0]["ci"] == pytest.approx(list(np.percentile(diffs, [2.5, 97.5])))
    assert cmp["differences"][0]["prob_improvement"] == pytest.approx(np.mean(np.array(diffs) < 0))


def test_bootstrap_by_groups():
    refs, a, b = _two_systems(n=60)
    one_each = compare_systems(refs, {"a": a, "b": b}, groups={u: "g" + u for u in refs}, grouping="segments",
                               draws=200, seed=2)
    plain = compare_systems(refs, {"a": a, "b": b}, draws=200, seed=2)
    assert one_each["differences"] == plain["differences"]  # a group per utterance: the same draws
    assert one_each["bootstrap"]["unit"] == "group" and plain["bootstrap"]["unit"] == "utterance"
    by10 = compare_systems(refs, {"a": a, "b": b}, groups={u: str(i // 10) for i, u in enumerate(refs)},
                           grouping="segments", draws=200, seed=2)
    assert by10["bootstrap"]["units"] == 6
    assert "6 recordings (by segments)" in format_comparison(by10)
    with pytest.raises(RescoreError, match="u000"):
        compare_systems(refs, {"a": a}, groups={}, grouping="segments")


def test_comparison_json_has_no_nan_or_infinity(tmp_path):
    import json

    refs = {"u1": [], "u2": ["a"]}  # an empty reference; one utterance of one word
    cmp = compare_systems({"u1": []}, {"x": {"u1": ["extra"]}, "y": {"u1": []}}, draws=50)
    assert cmp["systems"][0]["wer"] is None  # errors over 0 reference words
    json.dumps(cmp.as_dict(), allow_nan=False)
    cmp = compare_systems(refs, {"x": {"u1": ["b"], "u2": ["a"]}, "y": {"u1": [], "u2": ["a"]}},
                          train_counts=Counter({"a": 3}), num_buckets=3, draws=50)
    json.dumps(cmp.as_dict(), allow_nan=False)
    plot_comparison(cmp, tmp_path / "c.png", "x vs y")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_difference_does_not_depend_on_the_other_systems_compared():
    """Every system is drawn on the same samples, so a table of many systems (tools/experiments/ablation.py)
    gives each difference the CI of a two-system comparison, per bucket too."""
    refs, a, b = _two_systems(n=80)
    perfect = {u: list(r) for u, r in refs.items()}
    counts = Counter(w for r in refs.values() for w in r)
    groups = {u: str(i // 8) for i, u in enumerate(refs)}
    opts = dict(train_counts=counts, num_buckets=3, groups=groups, grouping="segments", draws=300, seed=7)
    many = compare_systems(refs, {"a": a, "perfect": perfect, "b": b}, **opts)
    two = compare_systems(refs, {"a": a, "b": b}, **opts)
    assert many["differences"][1] == two["differences"][0]
    for rm, rt in zip(many["buckets"], two["buckets"]):
        assert rm["differences"]["b"] == rt["differences"]["b"]
    # the other way round (b as the baseline) the difference and its CI change sign
    back = compare_systems(refs, {"b": b, "a": a}, **opts)
    d, e = two["differences"][0], back["differences"][0]
    assert e["wer_diff"] == pytest.approx(-d["wer_diff"])
    assert e["ci"] == pytest.approx([-d["ci"][1], -d["ci"][0]])


def test_records_read_like_the_json_written_from_them():
    import json

    refs, a, b = _two_systems(n=30)
    cmp = compare_systems(refs, {"a": a, "b": b}, train_counts=Counter(WORDS), num_buckets=3, draws=50)
    d = cmp.as_dict()
    assert list(d) == ["num_utts", "ref_words", "ref_text", "baseline", "systems", "differences", "bootstrap",
                       "buckets", "bucket_rule"]
    assert list(d["systems"][0]) == ["name", "path", "wer", "errors", "substitutions", "deletions", "insertions",
                                     "ref_words", "num_utts", "wer_ci"]
    back = json.loads(json.dumps(d, allow_nan=False))  # nothing but JSON inside
    assert back == d == dict(cmp)
    assert cmp["systems"][1]["name"] == cmp.systems[1].name == "b"
    assert cmp["buckets"][0]["differences"]["b"] == cmp.buckets[0].differences["b"].as_dict()
    assert format_comparison(cmp) == format_comparison(back)


def test_a_bootstrap_knows_how_many_units_it_resamples(caplog):
    refs, a, b = _two_systems(n=30)
    train = Counter({w: (i + 1) ** 2 for i, w in enumerate(WORDS)})
    one = compare_systems(refs, {"a": a, "b": b}, groups={u: "r" for u in refs}, grouping="segments", draws=100,
                          train_counts=train, num_buckets=3)
    assert one.bootstrap.units == 1 and not one.bootstrap.reliable and "one recording" in one.bootstrap.note
    d = one.differences[0]
    assert d.wer_diff != 0 and (d.ci, d.p_value, d.prob_improvement) == (None, None, None)
    assert all(r.differences["b"].ci is None for r in one.buckets) and one.systems[0].wer_ci is None
    few = compare_systems(refs, {"a": a, "b": b}, groups={u: str(i % 3) for i, u in enumerate(refs)},
                          grouping="utt2spk", draws=100)
    assert few.differences[0].ci is not None and not few.bootstrap.reliable
    assert few.bootstrap.note.startswith("only 3 groups (by utt2spk)") and f"note: {few.bootstrap.note}" in \
        format_comparison(few)
    assert sum("only 3 groups" in m for m in caplog.messages) == 1
    enough = compare_systems(refs, {"a": a, "b": b}, draws=100)  # 30 utterances
    assert enough.bootstrap.reliable and enough.bootstrap.note is None and "note:" not in format_comparison(enough)


def test_word_errors_of_an_nbest_list_in_one_call():
    from rescore.metrics import oracle_errors, word_errors
    from rescore.metrics.wer import word_errors_of_each

    rng = random.Random(5)
    for _ in range(300):
        ref = rng.choices(WORDS + ["", "é"], k=rng.randrange(0, 8))
        hyps = [rng.choices(WORDS[:5], k=rng.randrange(0, 8)) for _ in range(rng.randrange(1, 6))]
        each = [word_errors(ref, h) for h in hyps]
        assert word_errors_of_each(ref, hyps) == each and oracle_errors(ref, iter(hyps)) == min(each)
    assert word_errors_of_each(["a"], []) == []


def _buckets_word_by_word(train_counts, ref_tokens, n):
    """The module doc's rule, one word at a time: (bucket_of, ranges)."""
    ref_counts = Counter(ref_tokens)
    total = sum(ref_counts.values())
    bucket_of, ranges, before = {}, [None] * n, 0
    for w in sorted(set(train_counts) | set(ref_counts), key=lambda w: (train_counts.get(w, 0), w)):
        r = ref_counts.get(w, 0)
        b = min(n - 1, int(n * (before + r / 2) / total)) if total else 0
        bucket_of[w] = b
        before += r
        if r:
            c = train_counts.get(w, 0)
            ranges[b] = (c, c) if ranges[b] is None else (min(ranges[b][0], c), max(ranges[b][1], c))
    return bucket_of, ranges


def test_rare_word_buckets_follow_the_rule_word_by_word():
    rng = random.Random(11)
    for _ in range(200):
        vocab = [f"w{i}" for i in range(rng.randrange(1, 40))]
        train = Counter({w: rng.choice([1, 2, 3, 10, 1000]) for w in rng.sample(vocab, rng.randrange(len(vocab)))})
        refs = rng.choices(vocab + ["unseen"], k=rng.randrange(0, 150))
        n = rng.randrange(1, 12)
        b = rare_word_buckets(train, refs, n)
        bucket_of, ranges = _buckets_word_by_word(train, refs, n)
        assert list(b.bucket_of.items()) == list(bucket_of.items()) and b.ranges == ranges
