#!/usr/bin/env python3
"""Compare two N-best rescoring output dirs of the same decode dir: Kaldi's own
steps/pytorchnn/lmrescore_nbest_pytorchnn.sh (KALDI_DIR) and ours (OURS_DIR), both with
archives.JOB/{words_text,acwt,lmwt.interp*} per job.

Per utterance: the 1-best of each (argmin acwt * ac + lmwt.interp, what lattice-best-path picks
on the rescored lattices), and whether Kaldi's carried LSTM state read padding on the way in:
compute_sentence_scores.py carries the state after running rank 1 of the previous utterance of
the job over the batch's padded length, so when that rank 1 was shorter than the longest
hypothesis the state has also consumed padding (id 0). Prints the counts, one such utterance,
and (with --per-hyp) the largest difference of the per-hypothesis NN costs (Kaldi's lmwt.nn,
4 decimals per word) on the utterances whose carried state is clean.

Usage: compare_pytorchnn.py KALDI_DIR OURS_DIR [--inv-acwt 10]
"""

from __future__ import annotations

import argparse
import glob
import os


def table(path, kind=float):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts:
                out[parts[0]] = parts[1:] if kind is list else kind(parts[1])
    return out


def interp_file(adir):
    cands = sorted(glob.glob(os.path.join(adir, "lmwt.interp*")))
    return min(cands, key=len)  # lmwt.interp, else lmwt.interp.<weight>


def load(dirpath, acwt):
    """utt -> (1-best words, [(key, words)] in job order), and the job order of utterances."""
    best, hyps, order = {}, {}, []
    for adir in sorted(glob.glob(os.path.join(dirpath, "archives.*")),
                       key=lambda p: int(p.rsplit(".", 1)[1])):
        words = table(os.path.join(adir, "words_text"), list)
        ac = table(os.path.join(adir, "acwt"))
        lm = table(os.path.join(adir, "lmwt.interp") if os.path.exists(
            os.path.join(adir, "lmwt.interp")) else interp_file(adir))
        nn = table(os.path.join(adir, "lmwt.nn"), list)
        job = []
        for key, w in words.items():
            utt = key.rsplit("-", 1)[0]
            if utt not in hyps:
                hyps[utt] = []
                job.append(utt)
            total = acwt * ac[key] + lm[key]
            hyps[utt].append((key, w, total, sum(float(x) for x in nn.get(key, []))))
        order.append(job)
        for utt in job:
            b = min(hyps[utt], key=lambda h: h[2])
            best[utt] = " ".join(b[1])
    return best, hyps, order


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kaldi_dir")
    ap.add_argument("ours_dir")
    ap.add_argument("--inv-acwt", type=float, default=10.0)
    args = ap.parse_args()
    acwt = 1.0 / args.inv_acwt
    kbest, khyps, korder = load(args.kaldi_dir, acwt)
    obest, ohyps, _ = load(args.ours_dir, acwt)
    # padded: utterances whose carried state read padding on the way in (rank 1 of the previous
    # utterance shorter than its longest hypothesis); the state carries it on, so every later
    # utterance of the job starts from a state that has read padding somewhere (tainted)
    padded, tainted, why = set(), set(), {}
    for job in korder:
        seen = False
        for prev, utt in zip(job, job[1:]):
            lens = [len(h[1]) for h in khyps[prev]]
            if lens[0] < max(lens):
                padded.add(utt)
                why[utt] = (prev, lens[0], max(lens))
                seen = True
            if seen:
                tainted.add(utt)
    utts = [u for job in korder for u in job]
    clean = [u for u in utts if u not in tainted]
    same_clean = sum(kbest[u] == obest.get(u) for u in clean)
    same_padded = sum(kbest[u] == obest.get(u) for u in padded)
    same_tainted = sum(kbest[u] == obest.get(u) for u in tainted)
    print(f"utterances: {len(utts)} in {len(korder)} jobs; Kaldi's carried state read padding "
          f"on the way into {len(padded)}; {len(tainted)} start from a state that read padding "
          f"at some point of the job's chain")
    print(f"same 1-best, state never read padding: {same_clean} / {len(clean)}")
    print(f"same 1-best, state read padding:       {same_tainted} / {len(tainted)} "
          f"(on the way in: {same_padded} / {len(padded)})")
    diffs = [abs(kc[3] - oc[3]) for u in clean for kc, oc in zip(khyps[u], ohyps.get(u, []))
             if kc[0] == oc[0]]
    if diffs:
        print(f"NN cost per hypothesis, clean utterances: max |Kaldi - ours| = {max(diffs):.5f} "
              f"over {len(diffs)} hypotheses (Kaldi rounds each word cost to 4 decimals)")
    for u in utts:
        if u in padded and kbest[u] != obest.get(u):
            prev, n1, nmax = why[u]
            print(f"example: {u}: the previous utterance {prev} has rank 1 of {n1} words and a "
                  f"hypothesis of {nmax}: Kaldi's state read {nmax - n1} padding tokens")
            print(f"  Kaldi: {kbest[u]}\n  ours:  {obest.get(u)}")
            break
    bad = [u for u in clean if kbest[u] != obest.get(u)]
    for u in bad[:3]:
        print(f"DIFFERENT (clean) {u}:\n  Kaldi: {kbest[u]}\n  ours:  {obest.get(u)}")


if __name__ == "__main__":
    main()
