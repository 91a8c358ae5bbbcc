"""Write a rare-word-boosted copy of an NN LM cost file, for tuning the boost with the mix grid.

The boosted file B holds the costs of A less BOOST for every token whose word is rare in the LM
training text (training count at most --max-count; words never seen in training included). With
A and B given to the tuner as the two-model system ``A+B`` (``tools/experiments/ablation.py --system
NAME=A+B``), the mix share m of A and the NN weight w give

    w * (m * l_A + (1 - m) * l_B) = w * l_A - w * (1 - m) * BOOST * (rare words of h)

so the mix grid tunes a per-rare-word bonus from 0 (m = 1: A unchanged) to w * BOOST, by
cross-validation like every other weight. The rare class is set by the training text alone,
never by the references: --max-count is derived from --valid (the training count below which
--share of its tokens fall) unless given.

    python -m tools.experiments.rare_boost D/nbest S/lmwt.nn S/lmwt.nn.boost --train-text train.txt \\
        --valid valid.txt --boost 4
"""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger("rare_boost")


def count_threshold(train_counts, valid_tokens, share: float) -> int:
    """The smallest training count c such that the tokens of valid_tokens with a training count of
    at most c are at least ``share`` of them (the rarest-bucket cut of rescore.metrics.buckets,
    taken on a validation text instead of the references)."""
    counts = sorted(train_counts.get(w, 0) for w in valid_tokens)
    if not counts:
        raise ValueError("the validation text has no tokens")
    return counts[max(0, min(len(counts) - 1, int(share * len(counts)) - 1))]


def add_rare_class_options(ap: argparse.ArgumentParser) -> None:
    """The options that set the rare class: the training text, and --valid/--share or --max-count."""
    ap.add_argument("--train-text", required=True, help="the LM training text")
    ap.add_argument("--valid", help="a validation text that sets --max-count (not the references)")
    ap.add_argument("--share", type=float, default=0.1,
                    help="share of --valid's tokens in the rare class (default 0.1: one bucket of 10)")
    ap.add_argument("--max-count", type=int, help="rare: training count at most this (instead of --valid)")


def rare_class_count(ap: argparse.ArgumentParser, args, counts) -> int:
    """The rare class's largest training count: --max-count, else from --valid and --share."""
    if args.max_count is not None:
        return args.max_count
    if not args.valid:
        ap.error("give --valid or --max-count")
    from rescore.vocab import read_sentences

    return count_threshold(counts, [w for s in read_sentences(args.valid) for w in s], args.share)


def boosted(costs, words, rare, boost: float):
    """key -> costs with ``boost`` taken off every rare word's token (per-token rows: n + 1
    costs, the last for the end of sentence) or off the total (one cost per key)."""
    out = {}
    for key, row in costs.items():
        ws = words[key]
        flags = [w in rare for w in ws]
        if len(row) == len(ws) + 1:
            out[key] = [c - boost if f else c for c, f in zip(row, flags)] + [row[-1]]
        elif len(row) == 1:
            out[key] = [row[0] - boost * sum(flags)]
        else:
            raise ValueError(f"{key}: {len(row)} costs for {len(ws)} words")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nbest_dir", help="the N-best dir whose words_text the costs belong to")
    ap.add_argument("costs", help="the NN LM costs (a lmwt.nn of that dir)")
    ap.add_argument("out", help="the boosted copy to write")
    add_rare_class_options(ap)
    ap.add_argument("--boost", type=float, default=4.0, help="cost taken off per rare word (nats)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")

    from pathlib import Path

    from rescore.io.kaldi import read_nn_costs, read_text_table, write_nn_costs
    from rescore.vocab import count_words, read_sentences

    counts = count_words(read_sentences(args.train_text))
    args.max_count = rare_class_count(ap, args, counts)
    words_table = read_text_table(Path(args.nbest_dir) / "words_text", "tokens")
    words = dict(zip(words_table.keys, words_table.values))
    costs = read_nn_costs(args.costs)
    rare = {w for ws in words.values() for w in ws if counts.get(w, 0) <= args.max_count}
    out = boosted(costs, words, rare, args.boost)
    n_rare = sum(w in rare for key in costs for w in words[key])
    n_all = sum(len(words[key]) for key in costs)
    log.info("rare: training count <= %d (%d hypothesis words); %d of %d hypothesis tokens (%.1f %%) boosted by %g",
             args.max_count, len(rare), n_rare, n_all, 100.0 * n_rare / max(1, n_all), args.boost)
    write_nn_costs(args.out, out)


if __name__ == "__main__":
    main()
