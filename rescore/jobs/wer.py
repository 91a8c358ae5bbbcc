"""The job of rescore-wer: WER of one or more hypothesis texts against a reference text, overall
and per rare-word bucket (rescore.metrics.wer_report); with two or more, each compared with the
first by a paired bootstrap (rescore.metrics.compare_systems).

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) before any work, for a
bad value or an output path that is an input.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

from rescore.errors import RescoreError, check
from rescore.io.files import write_json
from rescore.io.kaldi import read_text_table
from rescore.io.outputs import check_output_file
from rescore.metrics import (check_scorable, compare_systems, format_comparison, format_wer_report,
                             plot_comparison, read_groups, warn_suspect_inputs, wer_report)
from rescore.metrics.refnorm import normalize_refs
from rescore.nbest.checks import check_text_input
from rescore.vocab import count_words, read_sentences


@dataclass(frozen=True)
class WerJob:
    """rescore-wer: score ``systems`` ((name, path) of each hypothesis text, the first the baseline)
    against ``ref_text``. Checked when built."""

    ref_text: str
    systems: Tuple[Tuple[str, str], ...]  # (name, Kaldi text file), in order; names distinct
    train_text: Optional[str] = None  # LM training text: the per rare-word bucket table
    num_buckets: int = 10
    groups: Optional[str] = None  # segments or utt2spk: the bootstrap resamples recordings (speakers)
    draws: int = 1000  # paired bootstrap draws (0: none), with two or more systems
    seed: int = 0
    confidence: float = 0.95  # level of the confidence intervals
    report: Optional[str] = None  # JSON report
    plot: Optional[str] = None  # PNG chart of the per-bucket WER
    title: Optional[str] = None  # of the chart; None: the reference file and the system names
    allow_missing: bool = False  # a missing hypothesis scores as empty, extra ones are ignored
    normalize_refs: bool = False  # lower-case the references, strip punctuation (rescore.metrics.refnorm)

    def __post_init__(self):
        object.__setattr__(self, "systems", tuple((str(n), str(p)) for n, p in self.systems))
        check(bool(self.systems), "at least one hypothesis text", "HYP_TEXT", "none")
        names = [n for n, _ in self.systems]
        check(len(set(names)) == len(names), "a distinct name for each system", "--name", ",".join(names))
        check(self.num_buckets >= 1, "an integer >= 1", "--buckets", self.num_buckets)
        check(self.draws >= 0, "an integer >= 0", "--bootstrap", self.draws)
        check(0.0 < self.confidence < 1.0, "a level in (0, 1)", "--confidence", self.confidence)
        inputs = [self.ref_text, self.train_text, self.groups] + [p for _, p in self.systems]
        check_output_file(self.report, "--report", inputs)
        check_output_file(self.plot, "--plot", inputs + [self.report])

    def run(self) -> str:
        """Score, write --report and --plot; returns the readable report (compute-wer's line and the
        bucket table of one system, or the comparison of several)."""
        refs = read_text_table(self.ref_text, "tokens").as_dict()
        if not any(refs.values()):
            raise RescoreError("a reference with at least one word (a WER of no words is "
                               "undefined)", path=self.ref_text, got="no words")
        hyps = {n: read_text_table(p, "tokens").as_dict() for n, p in self.systems}
        if self.normalize_refs:
            refs = normalize_refs(refs, {w for h in hyps.values() for ws in h.values() for w in ws})
        for n, p in self.systems:
            warn_suspect_inputs(refs, hyps[n], self.ref_text, p)
        sentences = read_sentences(self.train_text) if self.train_text else None
        check_text_input(refs, {p: hyps[n] for n, p in self.systems}, sentences, self.train_text)
        train_counts = count_words(sentences) if sentences is not None else None
        del sentences
        if train_counts is not None and not train_counts:
            raise RescoreError("a training text with at least one word", path=self.train_text,
                               got="no words")
        if len(self.systems) == 1:
            rep = wer_report(self.ref_text, self.systems[0][1], train_text=self.train_text,
                             num_buckets=self.num_buckets, allow_missing=self.allow_missing,
                             train_counts=train_counts, refs=refs)
            text = format_wer_report(rep)
        else:
            text = None
        if len(self.systems) > 1 or self.plot:
            for n, p in self.systems:
                check_scorable(refs, hyps[n], self.ref_text, p)
            cmp = compare_systems(refs, hyps, train_counts=train_counts, num_buckets=self.num_buckets,
                                  groups=read_groups(self.groups) if self.groups else None,
                                  grouping=self.groups and os.path.basename(self.groups),
                                  draws=self.draws if len(self.systems) > 1 else 0, seed=self.seed,
                                  confidence=self.confidence, allow_missing=self.allow_missing,
                                  paths=dict(self.systems), ref_path=self.ref_text)
            if len(self.systems) > 1:
                rep, text = cmp, format_comparison(cmp)
            if self.plot:
                plot_comparison(cmp, self.plot, self.title or f"WER per rare-word bucket on {self.ref_text}: "
                                + " vs ".join(n for n, _ in self.systems))
        if self.report:
            write_json(self.report, rep.as_dict())
        return text
