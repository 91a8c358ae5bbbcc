#!/usr/bin/env python3
"""First-pass and oracle WER of the rebuilt set, its README, and (--benchmark DIR) the rebuilt
set beside an existing tts-wikitext2-dev, on the utterances they share.

Reads SET_DIR (make_layout.py's output) and FIRST_PASS (rescore-nbest --weight 0's report.json:
the rank-1 WER at the decoder's own weights, and the oracle WER); writes SET_DIR/README.md and
adds ``first_pass_wer`` and ``oracle_wer`` (percent) to SET_DIR/stats.json; prints
``first-pass WER: X`` and ``oracle WER: Y``, then the comparison table.

Usage: report.py SET_DIR FIRST_PASS [--benchmark DIR]
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from rescore.metrics.wer import oracle_errors, word_errors


def table(path):
    if not path.is_file():
        sys.exit(f"error: {path}: expected a file of the set, got no such file")
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            key, *rest = line.split()
            out[key] = rest
    return out


class Set:
    """One tts-wikitext2-dev directory: references, N-best lists (rank order), conditions."""

    def __init__(self, root):
        self.root = Path(root)
        self.text = table(self.root / "data" / "text")
        self.sentidx = table(self.root / "data" / "utt2sentidx")
        self.dur = {u: float(v[0]) for u, v in table(self.root / "data" / "utt2dur").items()}
        self.cond = table(self.root / "data" / "utt2cond")
        self.nbest = defaultdict(list)
        for key, words in table(self.root / "nbest" / "words_text").items():
            self.nbest[key.rsplit("-", 1)[0]].append((int(key.rsplit("-", 1)[1]), words))
        self.nbest = {u: [w for _, w in sorted(h)] for u, h in self.nbest.items()}
        missing = sorted(set(self.text) - set(self.nbest))
        if missing:
            sys.exit(f"error: {self.root / 'nbest' / 'words_text'}: expected entries of every utterance, "
                     f"got none for {missing[0]}")
        self.vocab = sum(1 for _ in open(self.root / "lang" / "words.txt", encoding="utf-8"))

    def figures(self, utts):
        ref_words = sum(len(self.text[u]) for u in utts)
        first = sum(word_errors(self.text[u], self.nbest[u][0]) for u in utts)
        oracle = sum(oracle_errors(self.text[u], self.nbest[u]) for u in utts)
        n = sum(len(self.nbest[u]) for u in utts)
        return {
            "utterances": len(utts),
            "articles": len({u.rsplit("-", 2)[0] for u in utts}),
            "reference words": ref_words,
            "audio seconds": round(sum(self.dur[u] for u in utts), 1),
            "N-best entries": n,
            "mean N": round(n / len(utts), 2),
            "first-pass WER %": round(100 * first / ref_words, 2),
            "oracle WER %": round(100 * oracle / ref_words, 2),
            "reference in the N-best %": round(100 * sum(self.text[u] in self.nbest[u] for u in utts) / len(utts), 1),
        }

    def wer_by(self, utts, field):
        """First-pass WER % of the utterances of each value of a utt2cond field (voice, snr)."""
        groups = defaultdict(list)
        for u in utts:
            groups[dict(kv.split("=", 1) for kv in self.cond[u]).get(field, "?")].append(u)
        return {g: round(100 * sum(word_errors(self.text[u], self.nbest[u][0]) for u in us)
                         / sum(len(self.text[u]) for u in us), 2) for g, us in sorted(groups.items())}


README = """# tts-wikitext2-dev, rebuilt by recipes/tts_wikitext2

Real PocketSphinx 5.1.1 N-best lists of synthesized speech of WikiText-2 validation sentences,
in the layout of Kaldi's N-best rescoring (see the recipe's README for every setting).

| | |
|---|---|
{rows}

Scores are natural-log costs: PocketSphinx ranks by acwt / 9.5 + lmwt.withlm (inv_acwt 9.5,
wip 0); to rescore, cost = acwt / 9.5 + lmwt.nolm + w * newLMcost.

First-pass WER by condition: {by_snr} (SNR dB); {by_voice} (voice).
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("set_dir", type=Path)
    p.add_argument("first_pass", type=Path, help="rescore-nbest --weight 0's report.json")
    p.add_argument("--benchmark", type=Path, help="an existing tts-wikitext2-dev to compare with")
    a = p.parse_args()
    if not a.first_pass.is_file():
        sys.exit(f"error: {a.first_pass}: expected rescore-nbest's report.json, got no such file")
    report = json.loads(a.first_pass.read_text())
    new = Set(a.set_dir)
    utts = sorted(new.text)
    fig = new.figures(utts)
    # The rank-1 WER computed here and rescore-nbest's at the decoder's weights must agree.
    if abs(fig["first-pass WER %"] - report["wer"]) > 0.01:
        sys.exit(f"error: {a.first_pass}: expected the rank-1 WER {fig['first-pass WER %']}, got {report['wer']:.2f}")
    stats_path = a.set_dir / "stats.json"
    stats = json.loads(stats_path.read_text())
    stats.update(first_pass_wer=round(report["wer"], 3), oracle_wer=round(report["oracle_wer"], 3))
    stats_path.write_text(json.dumps(stats, indent=1) + "\n")
    rows = "\n".join(f"| {k} | {v} |" for k, v in fig.items())
    (a.set_dir / "README.md").write_text(README.format(
        rows=rows, by_snr=", ".join(f"{k} {v} %" for k, v in new.wer_by(utts, "snr").items()),
        by_voice=", ".join(f"{k} {v} %" for k, v in new.wer_by(utts, "voice").items())))
    print(f"first-pass WER: {report['wer']:.2f}")
    print(f"oracle WER: {report['oracle_wer']:.2f}")
    if a.benchmark is None:
        return

    old = Set(a.benchmark)
    shared = [u for u in utts if u in old.text]
    if not shared:
        sys.exit(f"error: {a.benchmark / 'data' / 'text'}: expected utterance ids of {a.set_dir}, got none in common")
    print(f"\n{len(shared)} utterances in both ({a.set_dir} | {a.benchmark}):")
    f_new, f_old = new.figures(shared), old.figures(shared)
    width = max(len(k) for k in f_new)
    print(f"  {'':{width}}  {'rebuilt':>10}  {'benchmark':>10}")
    for k in f_new:
        print(f"  {k:{width}}  {f_new[k]:>10}  {f_old[k]:>10}")
    for field in ("snr", "voice"):
        w_new, w_old = new.wer_by(shared, field), old.wer_by(shared, field)
        print(f"  first-pass WER % by {field}: " + ", ".join(f"{g} {w_new[g]} | {w_old.get(g)}" for g in w_new))
    same = {
        "selection (utt2sentidx)": sum(new.sentidx[u] == old.sentidx.get(u) for u in shared),
        "references (text)": sum(new.text[u] == old.text[u] for u in shared),
        "durations (utt2dur, 1 ms)": sum(abs(new.dur[u] - old.dur[u]) < 1e-3 for u in shared),
        "conditions (utt2cond)": sum(new.cond[u] == old.cond.get(u) for u in shared),
        "rank 1": sum(new.nbest[u][0] == old.nbest[u][0] for u in shared),
        "whole N-best list": sum(new.nbest[u] == old.nbest[u] for u in shared),
    }
    print("  identical, of the shared utterances: " + "; ".join(f"{k} {v}" for k, v in same.items()))


if __name__ == "__main__":
    main()
