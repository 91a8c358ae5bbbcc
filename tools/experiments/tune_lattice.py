#!/usr/bin/env python3
"""Tune the NN LM weight, inv-acwt and the word insertion penalty on rescored lattices, the way
rescore-tune does on N-best lists, and report the WER tuned on the whole set and split-half
(tuned on the first half of the conversations, reported on the second: rescore.nbest.combine.split_half).

The weight is not a lattice-time choice (it is in the graph costs), so each weight is its own
rescored decode dir: recipes/steps/lmrescore_lattice.sh --stage 4 --weight W into DIR_W. The
1-best of every (inv-acwt, wip) comes from rescore.nbest.lattice.best_paths (what lattice-add-penalty
| lattice-best-path give), the errors from rescore.metrics.word_errors.

Usage:
  tools/experiments/tune_lattice.py --nbest-dir DEV_NBEST --data-dir DATA --words-txt WORDS.TXT \\
      [--inv-acwts 6:16:0.5] [--wips -1:3:0.5] [--report OUT.json] W1=DIR1 W2=DIR2 ...
DEV_NBEST + DATA give the utterances, their conversations and references (the same halves as
rescore-tune --split-half on that N-best dir); DIR_W holds lat.*.gz, read with Kaldi's
lattice-copy (on PATH).
"""

from __future__ import annotations

import argparse
import glob
import io
import subprocess
import sys



def grid(spec: str):
    from rescore.cli.common import parse_grid

    return parse_grid(spec, "grid")


def read_dir(d: str):
    from rescore.nbest.lattice import iter_lattices

    lats = {}
    for path in sorted(glob.glob(f"{d}/lat.*.gz")):
        r = subprocess.run(["lattice-copy", f"ark:gunzip -c {path}|", "ark,t:-"], capture_output=True,
                           check=True)
        for lat in iter_lattices(io.StringIO(r.stdout.decode()), path):
            lats[lat.key] = lat
    if not lats:
        sys.exit(f"tune_lattice: no lattices in {d}/lat.*.gz")
    return lats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nbest-dir", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--words-txt", required=True)
    ap.add_argument("--inv-acwts", default="6:16:0.5")
    ap.add_argument("--wips", default="-1:3:0.5")
    ap.add_argument("--report")
    ap.add_argument("dirs", nargs="+", metavar="W=DIR")
    args = ap.parse_args()

    from rescore.nbest.combine import split_half
    from rescore.io.kaldi import invert_symbol_table, read_symbol_table
    from rescore.nbest.lattice import best_paths
    from rescore.metrics import word_errors
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(args.nbest_dir, args.data_dir, args.words_txt)
    first, second = split_half(nbest)
    halves = [[u.id for u in first.utterances()], [u.id for u in second.utterances()]]
    refs = nbest.refs
    sym = invert_symbol_table(read_symbol_table(args.words_txt))
    inv_acwts, wips = grid(args.inv_acwts), grid(args.wips)
    settings = [(a, p) for a in inv_acwts for p in wips]
    # errors[(weight, inv_acwt, wip)][utt]
    errors = {}
    for spec in args.dirs:
        w, _, d = spec.partition("=")
        w = float(w)
        lats = read_dir(d)
        missing = [u for u in refs if u not in lats]
        if missing:
            sys.exit(f"tune_lattice: {d}: no lattice for {len(missing)} utterances, e.g. {missing[0]}")
        per = {s: {} for s in settings}
        cache = {}
        for u in refs:
            for s, ids in zip(settings, best_paths(lats[u], [1.0 / a for a in inv_acwts], wips)):
                if (u, ids) not in cache:
                    cache[(u, ids)] = word_errors(refs[u], [sym[i] for i in ids])
                per[s][u] = cache[(u, ids)]
        for (a, p), e in per.items():
            errors[(w, a, p)] = e
        print(f"weight {w:g}: {d} ({len(lats)} lattices)", file=sys.stderr)

    def wer(key, utts):
        return 100.0 * sum(errors[key][u] for u in utts) / sum(len(refs[u]) for u in utts)

    def tune(utts):  # lowest WER; ties: first in grid order (smallest weight, inv_acwt, wip)
        keys = sorted(errors)
        return min(keys, key=lambda k: wer(k, utts))

    every = list(refs)
    best_all = tune(every)
    best_a = tune(halves[0])
    out = {"tuned_all": {"weight": best_all[0], "inv_acwt": best_all[1], "wip": best_all[2],
                         "wer": wer(best_all, every), "utts": len(every)},
           "split_half": {"weight": best_a[0], "inv_acwt": best_a[1], "wip": best_a[2],
                          "tuned_wer": wer(best_a, halves[0]), "held_out_wer": wer(best_a, halves[1]),
                          "held_out_utts": len(halves[1])}}
    print(f"tuned on {len(every)} utterances: WER {out['tuned_all']['wer']:.2f} % "
          f"(weight {best_all[0]:g} inv_acwt {best_all[1]:g} wip {best_all[2]:g})")
    print(f"split half: tuned on {len(halves[0])} (weight {best_a[0]:g} inv_acwt {best_a[1]:g} "
          f"wip {best_a[2]:g}), held out {len(halves[1])}: WER {out['split_half']['held_out_wer']:.2f} %")
    if args.report:
        from rescore.io.files import write_json

        write_json(args.report, out)


if __name__ == "__main__":
    main()
