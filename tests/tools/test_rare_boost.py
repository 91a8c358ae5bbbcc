"""tools/experiments/rare_boost.py: the rare class from the training text, the boosted costs, and the mix
identity that lets the tuner set the boost."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.conftest import NBEST_SMALL

from tools.experiments import rare_boost  # noqa: E402


def test_threshold_is_the_count_that_covers_the_share():
    counts = Counter({"the": 100, "sea": 5, "lobster": 1})
    valid = ["the"] * 8 + ["sea", "krill"]  # krill: never seen in training (count 0)
    assert rare_boost.count_threshold(counts, valid, 0.1) == 0
    assert rare_boost.count_threshold(counts, valid, 0.2) == 5
    assert rare_boost.count_threshold(counts, valid, 0.5) == 100
    with pytest.raises(ValueError):
        rare_boost.count_threshold(counts, [], 0.1)


def test_boost_per_token_and_total_rows():
    words = {"u-1": ["the", "krill", "sea"], "u-2": ["the"]}
    rare = {"krill", "sea"}
    per_token = {"u-1": [1.0, 9.0, 6.0, 2.0], "u-2": [1.0, 2.0]}
    assert rare_boost.boosted(per_token, words, rare, 3.0) == {"u-1": [1.0, 6.0, 3.0, 2.0], "u-2": [1.0, 2.0]}
    assert rare_boost.boosted({"u-1": [18.0], "u-2": [3.0]}, words, rare, 3.0) == {"u-1": [12.0], "u-2": [3.0]}
    with pytest.raises(ValueError, match="u-1: 2 costs for 3 words"):
        rare_boost.boosted({"u-1": [1.0, 2.0]}, words, rare, 3.0)


def test_mixing_the_copy_tunes_a_bonus_per_rare_word(tmp_path):
    """On a real N-best dir: w * (m * A + (1 - m) * B) == w * A - w * (1 - m) * boost * rare words,
    through the same reader and mix the tuner uses."""
    from rescore.nbest import interp
    from rescore.io.kaldi import read_nn_costs, read_text_table, write_nn_costs

    table = read_text_table(NBEST_SMALL / "words_text", "tokens")
    rng = np.random.default_rng(0)
    write_nn_costs(tmp_path / "a.nn", {k: list(rng.uniform(1, 9, len(v) + 1))
                                       for k, v in zip(table.keys, table.values)})
    train = tmp_path / "train.txt"
    train.write_text("the the the lobster\nthe sea\n")
    rare_boost.main([str(NBEST_SMALL), str(tmp_path / "a.nn"), str(tmp_path / "b.nn"), "--train-text", str(train),
                     "--max-count", "1", "--boost", "4"])
    a, b = read_nn_costs(tmp_path / "a.nn"), read_nn_costs(tmp_path / "b.nn")
    assert a.keys() == b.keys()
    counts = Counter({"the": 4, "lobster": 1, "sea": 1})
    n_rare = 0
    for key, words in zip(table.keys, table.values):
        rare = sum(counts.get(w, 0) <= 1 for w in words)
        n_rare += rare
        mixed = interp.mixed_nn_cost([sum(a[key]), sum(b[key])], (0.25, 0.75))
        assert mixed == pytest.approx(sum(a[key]) - 0.75 * 4 * rare, abs=1e-9)
    assert n_rare > 0
