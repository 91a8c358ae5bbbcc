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
    oracle_wer,
    plot_buckets,
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
    assert sum(r["errors"] + r["insertions"] for r in rows) == stats.errors
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
