"""Write a copy of an NN LM cost file that favours words the rest of the recording supports.

A rare word (a name, a term) of an article tends to come back in its other utterances, where the
recognizer may have it right or at least among its hypotheses. For each utterance u of a recording
and each word w, the evidence is the expected number of the recording's *other* utterances that
hold w:

    E_u(w) = sum over utterances v != u of the recording of  P_v(w),
    P_v(w) = sum of the N-best posteriors of v's hypotheses that hold w,

with a hypothesis' posterior proportional to exp(-total cost), total = the interpolated cost at
the fixed setting --weight / --inv-acwt / --wip (as the carry's). The boosted file B holds the
costs of A less BOOST * min(1, E_u(w)) on every token of a word w in the boosted class (the rare
words of rare_boost.py, or all words with --all-words). Given to the tuner as the two-model
system ``A+B`` (``tools/experiments/ablation.py --system NAME=A+B``), the mix share sets the bonus from 0 to
w * BOOST per supported word, cross-validated like every other weight (see rare_boost.py).

    python -m tools.experiments.recording_boost $DEV/nbest S/lmwt.nn S/lmwt.nn.rec --data-dir $DEV/data \\
        --train-text $LM/train.txt --valid $LM/valid.nodev.txt --boost 5
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import defaultdict

from tools.experiments.rare_boost import add_rare_class_options, rare_class_count  # noqa: E402  (this folder's tool)

log = logging.getLogger("recording_boost")


def utterance_posteriors(hyps, nn_costs, weight: float, inv_acwt: float, wip: float):
    """word -> P(the utterance holds the word), from its N-best list (``hyps``: rescore.nbest.sets
    Hypothesis; ``nn_costs``: each one's per-token NN costs)."""
    from rescore.nbest.interp import fixed_cost, total_cost, word_posterior_mass

    totals = [total_cost(fixed_cost(h.ac, h.withlm, h.nolm, len(h.words), weight, inv_acwt, wip),
                         sum(c), weight) for h, c in zip(hyps, nn_costs)]
    return word_posterior_mass(totals, (h.words for h in hyps))


def recording_evidence(conversation, costs, weight: float, inv_acwt: float, wip: float):
    """utt id -> word -> E_u(w): the expected number of the recording's other utterances that
    hold the word."""
    per_utt = {u.id: utterance_posteriors(u.hyps, [costs[h.key] for h in u.hyps], weight, inv_acwt, wip)
               for u in conversation.utterances if u.hyps}
    total = defaultdict(float)
    for post in per_utt.values():
        for w, p in post.items():
            total[w] += p
    return {uid: {w: total[w] - post.get(w, 0.0) for w in total} for uid, post in per_utt.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nbest_dir", help="the N-best dir the costs belong to")
    ap.add_argument("costs", help="the NN LM costs (a lmwt.nn of that dir, per-token rows)")
    ap.add_argument("out", help="the boosted copy to write")
    ap.add_argument("--data-dir", required=True, help="the data dir whose segments group the recordings")
    add_rare_class_options(ap)
    ap.add_argument("--all-words", action="store_true", help="boost every supported word, not only rare ones")
    ap.add_argument("--boost", type=float, default=5.0, help="cost taken off per fully supported word (nats)")
    ap.add_argument("--weight", type=float, default=0.5)
    ap.add_argument("--inv-acwt", type=float, default=9.5)
    ap.add_argument("--wip", type=float, default=0.5)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")

    from rescore.io.kaldi import read_nn_costs, write_nn_costs
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import count_words, read_sentences

    counts = count_words(read_sentences(args.train_text))
    if not args.all_words:
        args.max_count = rare_class_count(ap, args, counts)
    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    costs = read_nn_costs(args.costs)
    out, n_tokens, n_boosted, mass = {}, 0, 0, 0.0
    for conv in nbest.conversations:
        evidence = recording_evidence(conv, costs, args.weight, args.inv_acwt, args.wip)
        for u in conv.utterances:
            ev = evidence.get(u.id, {})
            for h in u.hyps:
                row = costs[h.key]
                if len(row) != len(h.words) + 1:
                    raise ValueError(f"{args.costs}: {h.key}: {len(row)} costs for {len(h.words)} words")
                new = list(row)
                for i, w in enumerate(h.words):
                    n_tokens += 1
                    if not args.all_words and counts.get(w, 0) > args.max_count:
                        continue
                    bonus = min(1.0, ev.get(w, 0.0))
                    if bonus > 0:
                        new[i] -= args.boost * bonus
                        n_boosted += 1
                        mass += bonus
                out[h.key] = new
    log.info("%s: %d of %d hypothesis tokens supported by their recording (mean support %.2f), "
             "boost %g", "all words" if args.all_words else f"rare (training count <= {args.max_count})",
             n_boosted, n_tokens, mass / max(1, n_boosted), args.boost)
    write_nn_costs(args.out, out)


if __name__ == "__main__":
    main()
