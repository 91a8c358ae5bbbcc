"""tools/experiments/recording_boost.py: a word's support from the other utterances of its recording, and
the boosted costs it writes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from tests.conftest import NBEST_SMALL

from tools.experiments import recording_boost  # noqa: E402


def test_evidence_counts_the_other_utterances_only():
    from rescore.nbest.sets import Conversation, Hypothesis, Utterance

    def hyp(key, words, ac):
        return Hypothesis(key, words, ac, 0.0, 0.0)

    # utterance a: "krill" in the rank-1 hypothesis only; posterior 1 / (1 + e^-1) (costs 0 and 1)
    a = Utterance("a", [hyp("a-1", ["the", "krill"], 0.0), hyp("a-2", ["the", "grill"], 1.0)])
    b = Utterance("b", [hyp("b-1", ["krill", "eat"], 0.0)])
    c = Utterance("c", [hyp("c-1", ["the", "sea"], 0.0)])
    costs = {h.key: [0.0] * (len(h.words) + 1) for u in (a, b, c) for h in u.hyps}
    ev = recording_boost.recording_evidence(Conversation("rec", [a, b, c]), costs, 0.5, 1.0, 0.0)
    p = 1.0 / (1.0 + math.exp(-1.0))
    assert ev["b"]["krill"] == pytest.approx(p)         # from a
    assert ev["a"]["krill"] == pytest.approx(1.0)       # from b, not its own
    assert ev["c"]["krill"] == pytest.approx(1.0 + p)
    assert ev["a"]["the"] == pytest.approx(1.0)         # c holds it; a's own does not count
    assert ev["b"]["grill"] == pytest.approx(1.0 - p)


def test_boosted_costs_on_a_real_nbest_dir(tmp_path):
    from rescore.io.kaldi import read_nn_costs, read_text_table, write_nn_costs

    table = read_text_table(NBEST_SMALL / "words_text", "tokens")
    words = dict(zip(table.keys, table.values))
    rng = np.random.default_rng(0)
    write_nn_costs(tmp_path / "a.nn", {k: list(rng.uniform(1, 9, len(v) + 1)) for k, v in words.items()})
    train = tmp_path / "train.txt"
    train.write_text("the the the lobster\nthe sea\n")
    recording_boost.main([str(NBEST_SMALL), str(tmp_path / "a.nn"), str(tmp_path / "b.nn"),
                          "--data-dir", str(NBEST_SMALL / "data"), "--train-text", str(train),
                          "--max-count", "1", "--boost", "4"])
    a, b = read_nn_costs(tmp_path / "a.nn"), read_nn_costs(tmp_path / "b.nn")
    assert a.keys() == b.keys()
    counts = Counter({"the": 4, "lobster": 1, "sea": 1})
    changed = 0
    for key, ws in words.items():
        assert b[key][-1] == a[key][-1]  # the end of sentence is never boosted
        for w, ca, cb in zip(ws, a[key], b[key]):
            assert ca - 4.0 - 1e-9 <= cb <= ca
            if counts.get(w, 0) > 1:
                assert cb == ca  # only the rare class
            changed += cb < ca
    assert changed > 0
