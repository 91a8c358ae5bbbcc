"""The reports: of one hypothesis file (:func:`wer_report`), of a rescored N-best set
(:func:`nbest_report`, rescore-nbest's report.json / report.txt) and of a comparison of systems
(:func:`format_comparison`), as records (``as_dict()`` is the JSON written) and as text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Union

from rescore.errors import RescoreError
from rescore.metrics.buckets import _range_label, bucket_wer, format_bucket_table, rare_word_buckets
from rescore.metrics.compare import BootstrapInfo, Comparison, CorpusFigures, NbestWords, compare_nbest, corpus_figures
from rescore.metrics.record import plain
from rescore.metrics.wer import align, check_scorable, oracle_wer

PathLike = Union[str, Path]


@dataclass
class WerReport(CorpusFigures):
    """wer_report's result: the corpus figures (wer None where not finite), the files, how many
    hypotheses were missing or extra, and the per-bucket rows (bucket_wer) with training counts."""

    ref_text: str
    hyp_text: str
    missing_hyps: int
    extra_hyps: int
    buckets: Optional[List[dict]] = None

    def as_dict(self) -> dict:
        d = super().as_dict()
        if self.buckets is None:
            del d["buckets"]
        return d


@dataclass
class NbestReport(CorpusFigures):
    """nbest_report's result: the chosen 1-best's corpus figures, the set's size, oracle and
    rank-1 WER, the setting (params), what the caller adds (extra: its keys follow nbest_dir in
    the JSON), the per-bucket rows with training counts, and the first pass against the rescored
    1-best (comparison)."""

    num_hyps: int
    num_conversations: int
    grouping: str
    oracle_wer: float
    first_rank_wer: float
    changed_utts: int
    params: dict
    nbest_dir: str
    extra: dict = field(default_factory=dict)
    buckets: Optional[List[dict]] = None
    comparison: Optional[Comparison] = None

    def as_dict(self) -> dict:
        d = super().as_dict()
        tail = {k: d.pop(k) for k in ("extra", "buckets", "comparison")}
        d.update(tail["extra"])
        if tail["buckets"] is not None:
            d["buckets"] = tail["buckets"]
        d["comparison"] = tail["comparison"]
        return d


def _fmt(x: Optional[float], spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _fmt_ci(ci: Optional[list], spec: str = "+.2f") -> str:
    return "-" if ci is None else f"[{ci[0]:{spec}}, {ci[1]:{spec}}]"


def _fmt_p(p: Optional[float]) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def describe_bootstrap(boot: Optional[dict], baseline: str) -> str:
    """One line saying how the intervals were drawn."""
    if not boot:
        return "no bootstrap (--bootstrap 0)"
    one, unit = BootstrapInfo(**boot).unit_names()
    if boot["units"] == 1:
        return f"no paired bootstrap: one {one} cannot be resampled"
    return (f"paired bootstrap (Bisani & Ney 2004): {boot['draws']} draws of the {boot['units']} {unit} with "
            f"replacement, seed {boot['seed']}; {100 * boot['confidence']:g}% CI of WER(system) - WER({baseline}) "
            f"in points; p two-sided; P(better) = share of draws where the system's WER is lower")


def format_comparison(cmp: dict) -> str:
    """The readable comparison (of a Comparison or its JSON): one line per system, then the
    per-bucket table (rows add up to the total line, which is the corpus figure)."""
    cmp = plain(cmp)
    names = [s["name"] for s in cmp["systems"]]
    base = cmp["baseline"]
    w = max(8, *(len(n) for n in names))
    conf = int(round(100 * cmp["bootstrap"]["confidence"])) if cmp["bootstrap"] else 95
    lines = [f"{cmp['num_utts']} utterances, {cmp['ref_words']} reference words; baseline: {base}",
             f"{'system':<{w}} {'%WER':>6} {'errors':>7} {'sub':>5} {'del':>5} {'ins':>5} {'rel.change':>10} "
             f"{'diff':>6} {str(conf) + '% CI of diff':>16} {'p':>6} {'P(better)':>9}"]
    diffs = {d["system"]: d for d in cmp["differences"]}
    for s in cmp["systems"]:
        d = diffs.get(s["name"])
        line = (f"{s['name']:<{w}} {_fmt(s['wer'], '6.2f', 'inf'):>6} {s['errors']:>7} {s['substitutions']:>5} "
                f"{s['deletions']:>5} {s['insertions']:>5}")
        if d is None:
            line += f" {'(baseline)':>10}"
        else:
            rel = _fmt(d["relative_change"], "+.1f")
            poi = "-" if d["prob_improvement"] is None else f"{100 * d['prob_improvement']:.1f} %"
            rel = rel + " %" if d["relative_change"] is not None else rel
            line += (f" {rel:>10} {_fmt(d['wer_diff'], '+6.2f'):>6} "
                     f"{_fmt_ci(d['ci']):>16} {_fmt_p(d['p_value']):>6} "
                     f"{poi:>9}")
        lines.append(line.rstrip())
    lines.append(describe_bootstrap(cmp["bootstrap"], base))
    if cmp["bootstrap"] and cmp["bootstrap"].get("note"):
        lines.append(f"note: {cmp['bootstrap']['note']}")
    if cmp.get("buckets"):
        lines += ["", "per rare-word bucket (0 = rarest in the LM training text; train count = range of the "
                      "training counts of its reference words):"]
        top = f"{'':>6} {'':>13} {'':>7}"
        head = f"{'bucket':>6} {'train count':>13} {'ref tok':>7}"
        for n in names:
            span = 14 if n == base else 14 + 7 + 17
            top += f" | {n[:span]:^{span}}"
            head += f" | {'errors':>7} {'WER':>6}"
            if n != base:
                head += f" {'diff':>6} {'CI of diff':>16}"
        lines += [top.rstrip(), head]
        tot_ref = 0
        tot_err = {n: 0 for n in names}
        for r in cmp["buckets"]:
            tot_ref += r["ref_tokens"]
            line = f"{r['bucket']:>6} {_range_label(r['train_count_range']):>13} {r['ref_tokens']:>7}"
            for n in names:
                x = r["systems"][n]
                tot_err[n] += x["errors"]
                line += f" | {x['errors']:>7} {x['wer']:>6.2f}"
                if n != base:
                    d = r["differences"][n]
                    line += f" {d['wer_diff']:>+6.2f} {_fmt_ci(d['ci']):>16}"
            lines.append(line)
        line = f"{'total':>6} {'':>13} {tot_ref:>7}"
        for n in names:
            line += f" | {tot_err[n]:>7} {100.0 * tot_err[n] / max(tot_ref, 1):>6.2f}"
            if n != base:
                d = diffs[n]
                line += f" {_fmt(d['wer_diff'], '+6.2f'):>6} {_fmt_ci(d['ci']):>16}"
        lines.append(line)
        lines.append(cmp["bucket_rule"])
    return "\n".join(lines)


def wer_report(ref_text: PathLike, hyp_text: PathLike, *, train_text: Optional[PathLike] = None,
               num_buckets: int = 10, allow_missing: bool = False, train_counts: Optional[Counter] = None,
               refs: Optional[Mapping[str, Sequence[str]]] = None) -> WerReport:
    """WER of two Kaldi text files (``utt w1 w2 ...``) keyed by utterance, with the rare-word
    bucket table when train_text (or its counts, train_counts) is given. Missing or extra
    utterances are an error unless allow_missing (then a missing hypothesis counts as empty, an
    extra one is ignored). JSON-ready: a WER of no reference words with errors is None. refs:
    ref_text's references as read (and normalised: rescore-wer --normalize-refs), else read here."""
    from rescore.io.kaldi import read_text_table  # (lazy: keeps rescore.io out of the commands' start-up)

    if refs is None:
        refs = read_text_table(ref_text, "tokens").as_dict()
    hyps = read_text_table(hyp_text, "tokens").as_dict()
    check_scorable(refs, hyps, ref_text, hyp_text)
    stats, alignments = align(refs, hyps, allow_missing=allow_missing, ref_path=ref_text, hyp_path=hyp_text)  # type: ignore[arg-type]
    report = WerReport(*corpus_figures(stats), str(ref_text), str(hyp_text),
                       missing_hyps=sum(1 for u in refs if u not in hyps),
                       extra_hyps=sum(1 for u in hyps if u not in refs))
    if train_counts is None and train_text is not None:
        from rescore.vocab import count_words, read_sentences  # (lazy: keeps rescore.io out of the commands' start-up)

        train_counts = count_words(read_sentences(train_text))
    if train_counts is not None:
        buckets = rare_word_buckets(train_counts, (w for r in refs.values() for w in r), num_buckets)
        report.buckets = bucket_wer(alignments, buckets)
    return report


def format_wer_report(report: dict) -> str:
    """Kaldi compute-wer style line, plus the bucket table when present."""
    report = plain(report)
    lines = [f"%WER {_fmt(report['wer'], '.2f', 'inf')} [ {report['errors']} / {report['ref_words']}, "
             f"{report['insertions']} ins, {report['deletions']} del, {report['substitutions']} sub ]  "
             f"({report['num_utts']} utterances)"]
    if "buckets" in report:
        lines += ["", "per rare-word bucket (0 = rarest in training text):", format_bucket_table(report["buckets"])]
    return "\n".join(lines)


def nbest_report(nbest: NbestWords, best: Mapping[str, int], *, params: Mapping[str, float], train_counts=None,
                 num_buckets: int = 10, extra: Optional[dict] = None) -> NbestReport:
    """The report of a rescored N-best set (its words: NbestWords, with references): WER of the
    chosen 1-best (``best``: utt -> 0-based rank), rank-1 and oracle WER, how many 1-bests
    changed, the setting, the per rare-word bucket table when train_counts is given, and the
    first pass against the rescored 1-best (compare_nbest)."""
    if nbest.refs is None:
        raise RescoreError("references (a data dir with 'text')", path=nbest.path)
    one_best = {u: hyps[best[u]] for u, hyps in nbest.hyps.items()}
    first = align(nbest.refs, {u: hyps[0] for u, hyps in nbest.hyps.items()})
    stats, alignments = rescored = align(nbest.refs, one_best)
    report = NbestReport(
        *corpus_figures(stats, finite=False), num_hyps=sum(map(len, nbest.hyps.values())),
        num_conversations=len(set(nbest.conversation.values())), grouping=nbest.grouping,
        oracle_wer=oracle_wer(nbest.refs, nbest.hyps), first_rank_wer=first[0].wer,
        changed_utts=sum(1 for i in best.values() if i != 0), params=dict(params), nbest_dir=nbest.path,
        extra=dict(extra or {}))
    buckets = None
    if train_counts is not None:
        buckets = rare_word_buckets(train_counts, (w for r in nbest.refs.values() for w in r), num_buckets)
        report.buckets = bucket_wer(alignments, buckets)
    report.comparison = compare_nbest(nbest, one_best, train_counts=train_counts, num_buckets=num_buckets,
                                      aligned=(first, rescored), buckets=buckets)
    return report


def format_report(report: dict) -> str:
    """The readable report.txt of rescore-nbest (also what the commands print)."""
    report = plain(report)
    p = report.get("params", {})
    lines = [
        f"N-best dir   {report.get('nbest_dir', '')}",
        f"setting      weight {p.get('weight')}  inv_acwt {p.get('inv_acwt')}  wip {p.get('wip')}",
        *(["NN LMs       " + "  ".join(f"{m} ({s:g})" for m, s in zip(report["models"], p.get("mix", [])))]
          if report.get("models") else []),
        f"utterances   {report['num_utts']}  hypotheses {report['num_hyps']}  conversations "
        f"{report.get('num_conversations')} (by {report.get('grouping')})",
        f"%WER {report['wer']:.2f} [ {report['errors']} / {report['ref_words']}, {report['insertions']} ins, "
        f"{report['deletions']} del, {report['substitutions']} sub ]",
        f"rank-1 WER   {report['first_rank_wer']:.2f} %   oracle WER {report['oracle_wer']:.2f} %   "
        f"1-best changed in {report['changed_utts']} utterances",
    ]
    if report.get("input_checks"):
        lines += format_input_checks(report["input_checks"])
    if "comparison" in report:
        lines += ["", "first pass (rank 1 of the N-best) against rescored:", format_comparison(report["comparison"])]
    return "\n".join(lines)


def format_input_checks(checks: Mapping, warnings: bool = True) -> List[str]:
    """The lines of report.txt for the input checks of rescore-nbest (rescore.nbest.checks.InputChecks,
    or its JSON), without its warnings if not warnings."""
    lines = []
    for v in checks.get("vocabulary") or []:
        line = (f"vocabulary   {v['model']}: {v['vocab_size']} words; outside it {v['hyp_oov_rate']:.2f} % of "
                f"the hypothesis tokens")
        if v.get("ref_oov_rate") is not None:
            line += f", {v['ref_oov_rate']:.2f} % of the reference tokens"
        if v.get("words_txt_oov") is not None:
            line += f", {v['words_txt_oov']} of the {v['words_txt_words']} words.txt words"
        lines.append(line)
    st = checks.get("symbol_table")
    if st:
        lines.append(f"symbol table {st['words_txt']}: first-pass WER {st['first_pass_wer']:.2f} %, "
                     f"{st['token_overlap']:.1f} % of its tokens in the references")
    lines += [c["line"] for c in checks.get("references") or []]
    for v in [*(checks.get("vocabulary") or []), *([st] if st else []), *(checks.get("references") or [])] \
            if warnings else []:
        lines += [f"warning      {w}" for w in v["warnings"]]
    return lines
