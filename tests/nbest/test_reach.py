"""rescore.nbest.reach and tools/experiments/rare_reach.py: per rare-word bucket, rank 1, the oracle and what the
N-best can reach, on a generated N-best dir whose every figure is worked out by hand below, and
on the real dev set against independent computations."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from tests.conftest import shared_data_path

from tools.experiments import rare_reach  # noqa: E402

# LM training counts: gnu 2, yak 1, zebra 1, quokka never; cat, mat, on, sat, the 10 each.
TRAIN = "gnu gnu yak zebra\n" + "cat mat on sat the\n" * 10
# 16 reference tokens, 8 of rare words (quokka 2, yak 1, zebra 3, gnu 2) and 8 of frequent ones,
# so 2 buckets cut them as bucket 0 = {quokka, yak, zebra, gnu} (train counts 0-2) and
# bucket 1 = {cat, mat, on, sat, the} (10). Words only in hypotheses are unseen: bucket 0.
REFS = {
    "u1": "the zebra sat on the mat",
    "u2": "quokka cat yak cat",
    "u3": "gnu gnu zebra quokka",
    "u4": "zebra cat",
}
NBESTS = {
    # rank 1: S zebra (b0), D the (b1). rank 2: S the (b1), 1 error: the oracle. rank 3 holds
    # 'the' twice: both reference 'the' are reachable, one of them missed by rank 1.
    "u1": ["the zebras sat on mat", "a zebra sat on the mat", "the the zebra"],
    # rank 1: D yak (b0), 1 error; rank 2: S quokka, 1 error too: the oracle is rank 1. yak is
    # reachable through rank 2.
    "u2": ["quokka cat cat", "walker cat yak cat"],
    # rank 1: S gnu (b0) and an inserted quokka (b0); rank 2 is the reference: the oracle.
    "u3": ["the gnu zebra quokka quokka", "gnu gnu zebra quokka"],
    # no hypothesis holds zebra: unreachable, missed, not fixable. The oracle is rank 1.
    "u4": ["zebras cat", "zebras hat"],
}
# Per bucket, by hand from the comments above.
WANT = {
    0: {"ref_tokens": 8, "first_pass": (3, 1, 1), "oracle": (1, 1, 0), "reachable": 7, "missed": 4, "fixable": 3},
    1: {"ref_tokens": 8, "first_pass": (0, 1, 0), "oracle": (1, 0, 0), "reachable": 8, "missed": 1, "fixable": 1},
}


def write_nbest_dir(root, refs, nbests):
    """A Kaldi text N-best dir (words_text and the three cost archives) and its data/text."""
    nb = root / "nbest"
    (root / "data").mkdir(parents=True)
    nb.mkdir()
    (root / "data" / "text").write_text("".join(f"{u} {r}\n" for u, r in refs.items()))
    keys = [(f"{u}-{k}", h) for u, hs in nbests.items() for k, h in enumerate(hs, 1)]
    (nb / "words_text").write_text("".join(f"{k} {h}\n" for k, h in keys))
    for i, name in enumerate(("acwt", "lmwt.withlm", "lmwt.nolm")):
        (nb / name).write_text("".join(f"{k} {10 + i + j}.5\n" for j, (k, _) in enumerate(keys)))
    (root / "train.txt").write_text(TRAIN)
    return nb, root / "data", root / "train.txt"


def _check_row(row, want):
    assert row["ref_tokens"] == want["ref_tokens"]
    for name in ("first_pass", "oracle"):
        s, d, i = want[name]
        assert (row[name]["substitutions"], row[name]["deletions"], row[name]["insertions"]) == (s, d, i), name
        assert row[name]["errors"] == s + d + i
        assert row[name]["wer"] == pytest.approx(100.0 * (s + d + i) / want["ref_tokens"])
    for k in ("reachable", "missed", "fixable"):
        assert row[k] == want[k], k
    assert row["reachable_pct"] == pytest.approx(100.0 * want["reachable"] / want["ref_tokens"])
    assert row["fixable_pct_of_reachable"] == pytest.approx(100.0 * want["fixable"] / want["reachable"])
    assert row["fixable_pct_of_missed"] == pytest.approx(100.0 * want["fixable"] / want["missed"])


def test_every_figure_of_a_generated_nbest_dir(tmp_path):
    from rescore.nbest.reach import reach_report

    nb, data, train = write_nbest_dir(tmp_path, REFS, NBESTS)
    rep = reach_report(nb, data, train, num_buckets=2)
    assert (rep["num_utts"], rep["num_hyps"]) == (4, 9)
    assert [r["train_count_range"] for r in rep["buckets"]] == [[0, 2], [10, 10]]
    for b, want in WANT.items():
        _check_row(rep["buckets"][b], want)
    total = {k: sum(w[k] for w in WANT.values()) if k not in ("first_pass", "oracle") else
             tuple(sum(w[k][j] for w in WANT.values()) for j in range(3)) for k in WANT[0]}
    _check_row(rep["total"], total)
    assert rep["total"]["first_pass"]["wer"] == pytest.approx(100 * 6 / 16)
    assert rep["total"]["oracle"]["wer"] == pytest.approx(100 * 3 / 16)


def test_oracle_takes_the_best_ranked_of_equals_and_reach_counts_repeats():
    from rescore.nbest.reach import oracle_index, reachable_counts

    ref = "a b a c".split()
    assert oracle_index(ref, [["a", "b"], ["a", "c"], ["a", "b", "a", "c"]]) == 2
    assert oracle_index(ref, [["a", "b", "a"], ["b", "a", "c"]]) == 0  # 1 error each: rank 1
    # 'a' twice in the reference: one hypothesis must hold it twice for both to be reachable.
    assert reachable_counts(ref, [["a", "b"], ["a", "c"]]) == Counter({"a": 1, "b": 1, "c": 1})
    assert reachable_counts(ref, [["c"], ["a", "a", "a"]]) == Counter({"a": 2, "c": 1})
    assert reachable_counts(ref, [["x"]]) == Counter()


def test_tool_prints_the_table_and_writes_the_json(tmp_path):
    from rescore.nbest.reach import format_reach_table

    nb, data, train = write_nbest_dir(tmp_path, REFS, NBESTS)
    out = tmp_path / "reach.json"
    r = CliRunner().invoke(rare_reach.main, [str(nb), "--data-dir", str(data), "--train-text", str(train),
                                             "--buckets", "2", "--json", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    assert [b["fixable"] for b in rep["buckets"]] == [3, 1]
    assert format_reach_table(rep) in r.output
    lines = r.output.splitlines()
    total = next(ln for ln in lines if ln.split()[:1] == ["total"])
    # ref tok, rank-1 errors and WER, oracle errors and WER, reachable and %, missed, fixable, shares
    assert total.replace("|", " ").split()[2:] == ["16", "6", "37.50", "3", "18.75", "15", "93.75", "5", "4",
                                                   "26.67", "80.00"]


def test_tool_help_and_bad_input(tmp_path):
    r = CliRunner().invoke(rare_reach.main, ["--help"])
    assert r.exit_code == 0 and "e.g.:" in r.output and "tools.experiments.rare_reach" in r.output
    nb, data, train = write_nbest_dir(tmp_path, REFS, NBESTS)
    with (data / "text").open("a") as f:
        f.write("u5 zebra\n")  # a reference without an N-best
    r = CliRunner().invoke(rare_reach.main, [str(nb), "--data-dir", str(data), "--train-text", str(train)])
    assert r.exit_code == 1 and "u5" in r.output and "error:" in r.output
    r = CliRunner().invoke(rare_reach.main, [str(nb), "--data-dir", str(data), "--train-text", str(train),
                                             "--json", str(tmp_path)])
    assert r.exit_code == 2 and "--json" in r.output
    r = CliRunner().invoke(rare_reach.main, [str(nb), "--data-dir", str(data), "--train-text", str(train),
                                             "--allow-missing", "--buckets", "2"])
    assert r.exit_code == 0, r.output


def test_dev_set_agrees_with_the_metrics(tmp_path):
    """The real dev set: rank 1 and the oracle as rescore.metrics computes them, the buckets
    adding up, and reachability against a token-by-token count."""
    from rescore.metrics import align, bucket_wer, oracle_errors, rare_word_buckets
    from rescore.nbest.sets import load_nbest_dir
    from rescore.nbest.reach import format_reach_table
    from rescore.vocab import count_words, read_sentences

    dev = shared_data_path("tts-wikitext2-dev")
    train = shared_data_path("wikitext2-asr", "train.txt")
    out = tmp_path / "reach.json"
    r = CliRunner().invoke(rare_reach.main, [str(dev / "nbest"), "--data-dir", str(dev / "data"), "--train-text",
                                             str(train), "--json", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    assert format_reach_table(rep) in r.output

    nbest = load_nbest_dir(dev / "nbest", dev / "data")
    refs = nbest.refs
    hyps = {u.id: [h.words for h in u.hyps] for u in nbest.utterances()}
    stats, al = align(refs, {u: h[0] for u, h in hyps.items()})
    assert rep["total"]["first_pass"]["errors"] == stats.errors
    assert rep["total"]["oracle"]["errors"] == sum(oracle_errors(refs[u], hyps[u]) for u in refs)
    buckets = rare_word_buckets(count_words(read_sentences(train)), (w for r in refs.values() for w in r), 10)
    assert [b["first_pass"]["errors"] for b in rep["buckets"]] == [b["errors"] for b in bucket_wer(al, buckets)]
    reach = [0] * 10  # the k-th 'w' of a reference is reachable when one hypothesis holds k of them
    for u, ref in refs.items():
        seen: Counter = Counter()
        for w in ref:
            seen[w] += 1
            reach[buckets[w]] += any(h.count(w) >= seen[w] for h in hyps[u])
    assert [b["reachable"] for b in rep["buckets"]] == reach
    for row in rep["buckets"] + [rep["total"]]:
        correct = row["ref_tokens"] - row["missed"]
        assert correct <= row["reachable"] <= row["ref_tokens"]
        assert 0 <= row["fixable"] == row["reachable"] - correct <= row["missed"]
        assert row["oracle"]["errors"] <= row["first_pass"]["errors"] or row["bucket"] != "total"
    for k in ("ref_tokens", "reachable", "missed", "fixable"):
        assert rep["total"][k] == sum(b[k] for b in rep["buckets"])
