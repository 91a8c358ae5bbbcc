"""How much of each rare-word bucket an N-best set can reach at all, whatever LM rescores it.

A rescoring LM only chooses among the N-best hypotheses, so a reference word that no
hypothesis of its utterance holds stays an error for every LM. Per rare-word bucket
(rescore.metrics.rare_word_buckets: vocabulary sorted rarest first by LM training count, cut
into buckets of roughly equal reference tokens) this module counts:

* ref_tokens: the bucket's reference tokens;
* first_pass / oracle: errors (S + D + I, counted per bucket as rescore.metrics.bucket_wer
  does) and WER of rank 1, and of the N-best oracle (per utterance the hypothesis with the
  fewest word errors, the best-ranked one among equals), aligned and bucketed like rank 1;
* reachable: reference tokens that some hypothesis of their utterance holds as the same word.
  A word that occurs k times in the reference has min(k, m) reachable tokens, m the most times
  one hypothesis of the N-best holds it;
* missed: reference tokens that rank 1 substitutes or deletes;
* fixable: reachable tokens that rank 1 misses, the tokens a perfect LM could fix. Rank 1 is a
  hypothesis of the N-best and each of its correct tokens is that word in it, so a word's
  correct tokens are among its reachable ones, and fixable = reachable - correct.

Shares are in percent: reachable of ref_tokens, fixable of reachable and fixable of missed
(None where the denominator is 0). The buckets' counts add up to the total's.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

from rescore.errors import RescoreError
from rescore.metrics import BucketMap, align, bucket_wer, rare_word_buckets, word_errors
from rescore.nbest.sets import load_nbest_dir
from rescore.vocab import count_words, read_sentences

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

COUNTS = ("ref_tokens", "reachable", "missed", "fixable")


def oracle_index(ref: Sequence[str], hyps: Sequence[Sequence[str]]) -> int:
    """0-based rank of the hypothesis with the fewest word errors against ref (the first of
    equals, so rank 1 where it is as good as any)."""
    if not hyps:
        raise ValueError("an N-best list of at least one hypothesis")
    errors = [word_errors(ref, h) for h in hyps]
    return errors.index(min(errors))


def reachable_counts(ref: Sequence[str], hyps: Sequence[Sequence[str]]) -> Counter:
    """word -> how many of its reference tokens some hypothesis holds: min(times in ref, most
    times in one hypothesis)."""
    need = Counter(ref)
    best: Counter = Counter()
    for h in hyps:
        for w, c in Counter(w for w in h if w in need).items():
            if c > best[w]:
                best[w] = c
    return Counter({w: min(k, best[w]) for w, k in need.items() if best[w]})


def _share(num: int, den: int) -> Optional[float]:
    return 100.0 * num / den if den else None


def _finish(row: dict) -> dict:
    """The shares of a row of counts (module doc)."""
    row["reachable_pct"] = _share(row["reachable"], row["ref_tokens"])
    row["fixable_pct_of_reachable"] = _share(row["fixable"], row["reachable"])
    row["fixable_pct_of_missed"] = _share(row["fixable"], row["missed"])
    return row


def _errors(rows: List[dict]) -> List[dict]:
    """The S/D/I, errors and WER of bucket_wer rows (WER None for a bucket without tokens)."""
    keys = ("substitutions", "deletions", "insertions", "errors")
    return [{**{k: r[k] for k in keys}, "wer": r["wer"] if r["ref_tokens"] else None} for r in rows]


def _total(rows: List[dict], name: str) -> dict:
    """The corpus figures of one system: the sum of its bucket rows."""
    out = {k: sum(r[name][k] for r in rows) for k in ("substitutions", "deletions", "insertions", "errors")}
    ref = sum(r["ref_tokens"] for r in rows)
    out["wer"] = 100.0 * out["errors"] / ref if ref else None
    return out


def bucket_reach(refs: Mapping[str, Sequence[str]], nbests: Mapping[str, Sequence[Sequence[str]]],
                 buckets: BucketMap) -> dict:
    """The reach of every bucket (module doc) of an N-best set: refs is utt -> reference words,
    nbests utt -> hypotheses' words in rank order (the same utterances, each with at least one
    hypothesis). Returns {"buckets": [row per bucket], "total": row of the sums}; a row holds
    bucket, train_count_range, ref_tokens, first_pass and oracle ({substitutions, deletions,
    insertions, errors, wer}), reachable, missed, fixable and the shares in percent."""
    missing = [u for u in refs if not nbests.get(u)]
    if missing:
        raise ValueError(f"an N-best of at least one hypothesis for every reference; none for '{missing[0]}'")
    first = {u: list(nbests[u][0]) for u in refs}
    oracle = {u: list(nbests[u][oracle_index(refs[u], nbests[u])]) for u in refs}
    _, first_al = align(refs, first)
    _, oracle_al = align(refs, oracle)
    rows = [{"bucket": b, "train_count_range": list(rng) if rng else None, **{k: 0 for k in COUNTS}}
            for b, rng in zip(range(buckets.n), buckets.ranges)]
    for u, ref in refs.items():
        missed = Counter(first_al[u].ref_errors)
        reach = reachable_counts(ref, nbests[u])
        for w, k in Counter(ref).items():
            row = rows[buckets[w]]
            row["ref_tokens"] += k
            row["reachable"] += reach[w]
            row["missed"] += missed[w]
            row["fixable"] += reach[w] - (k - missed[w])  # reachable minus rank 1's correct tokens
    for row, f, o in zip(rows, _errors(bucket_wer(first_al, buckets)), _errors(bucket_wer(oracle_al, buckets))):
        row["first_pass"], row["oracle"] = f, o
        _finish(row)
    total = {"bucket": "total", "train_count_range": None, **{k: sum(r[k] for r in rows) for k in COUNTS},
             "first_pass": _total(rows, "first_pass"), "oracle": _total(rows, "oracle")}
    return {"buckets": rows, "total": _finish(total)}


def reach_report(nbest_dir: PathLike, data_dir: PathLike, train_text: PathLike, *,
                 words_txt: Optional[PathLike] = None, num_buckets: int = 10, allow_missing: bool = False) -> dict:
    """bucket_reach of an N-best dir (rescore.nbest.sets.load_nbest_dir) against the references of
    data_dir, buckets cut by the counts of the LM training text (one sentence a line), with
    what was read: nbest_dir, data_dir, train_text, num_buckets, num_utts, num_hyps."""
    train_counts = count_words(read_sentences(train_text))
    if not train_counts:
        raise RescoreError("a training text with at least one word", path=train_text, got="no words")
    nbest = load_nbest_dir(nbest_dir, data_dir, words_txt, allow_missing=allow_missing)
    if nbest.refs is None:
        raise RescoreError("a data dir with 'text' (the references)", path=Path(data_dir) / "text", got="none")
    refs = {u.id: nbest.refs[u.id] for u in nbest.utterances()}
    if not any(refs.values()):
        raise RescoreError("references with at least one word", path=Path(data_dir) / "text", got="none")
    nbests: Dict[str, List[List[str]]] = {u.id: [h.words for h in u.hyps] for u in nbest.utterances()}
    buckets = rare_word_buckets(train_counts, (w for r in refs.values() for w in r), num_buckets)
    report = {"nbest_dir": str(nbest_dir), "data_dir": str(data_dir), "train_text": str(train_text),
              "num_buckets": num_buckets, "num_utts": nbest.num_utts, "num_hyps": nbest.num_hyps}
    report.update(bucket_reach(refs, nbests, buckets))
    log.info("%d utterances, %d hypotheses: %d of %d reference tokens reachable", report["num_utts"],
             report["num_hyps"], report["total"]["reachable"], report["total"]["ref_tokens"])
    return report


def _pct(x: Optional[float], width: int) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.2f}"


def _range(rng) -> str:
    if not rng:
        return "-"
    return str(rng[0]) if rng[0] == rng[1] else f"{rng[0]}-{rng[1]}"


REACH_RULE = ("reachable = reference tokens some hypothesis of their N-best holds; missed = tokens rank 1 "
              "substitutes or deletes;\nfixable = reachable tokens rank 1 misses (what a perfect LM could fix), "
              "as % of reachable and of missed;\nWER = (S + D + I) / ref tokens, an insertion in its word's bucket")


def format_reach_table(report: dict) -> str:
    """The readable table of a reach_report (or bucket_reach) result; its total line is the sum
    of the rows."""
    lines = []
    if "nbest_dir" in report:
        lines.append(f"{report['nbest_dir']}: {report['num_utts']} utterances, {report['num_hyps']} hypotheses; "
                     f"buckets by training counts of {report['train_text']} (0 = rarest)")
    lines.append(f"{'':>6} {'':>13} {'':>8} | {'rank 1':^14} | {'oracle':^14} | {'reachable':^15} | "
                 f"{'rank 1 misses':^32}")
    lines.append(f"{'bucket':>6} {'train count':>13} {'ref tok':>8} | {'errors':>7} {'WER':>6} | {'errors':>7} "
                 f"{'WER':>6} | {'tokens':>7} {'%':>7} | {'missed':>7} {'fixable':>7} {'% reach':>7} "
                 f"{'% miss':>7}")
    for r in report["buckets"] + [report["total"]]:
        f, o = r["first_pass"], r["oracle"]
        name = r["bucket"]
        lines.append(f"{name:>6} {_range(r['train_count_range']):>13} {r['ref_tokens']:>8} | {f['errors']:>7} "
                     f"{_pct(f['wer'], 6)} | {o['errors']:>7} {_pct(o['wer'], 6)} | {r['reachable']:>7} "
                     f"{_pct(r['reachable_pct'], 7)} | {r['missed']:>7} {r['fixable']:>7} "
                     f"{_pct(r['fixable_pct_of_reachable'], 7)} {_pct(r['fixable_pct_of_missed'], 7)}")
    lines.append(REACH_RULE)
    return "\n".join(lines)
