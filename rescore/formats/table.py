"""The N-best table: what every format reads into and writes from (rescore.formats.registry).

A table is a list of utterances, each with its hypotheses in rank order (rank 1 = the
recognizer's best), each hypothesis with its words and one score per named column. Every score
is a **cost**, as in Kaldi: a negated natural-log score, lower is better; a reader of a
recognizer whose scores are log-probabilities negates them. A score keeps the text it was read
with (``Hypothesis.texts``), so a file converted from Kaldi text archives and back gives the same
bytes (rescore.formats.kaldi); computed scores are written as the shortest text that reads back
to the same float64.

:func:`ranked` puts a table's hypotheses in the order of a cost per hypothesis, as every writer
of a recognizer's result files does (rescore.nbest.tables.ranking_costs gives the costs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError

PathLike = Union[str, Path]
Costs = Mapping[Tuple[str, int], float]  # (utt, rank) -> cost

FIRST_PASS = "pass1"  # the column of a beam search's total (ESPnet, NeMo, generate()), as a cost
FIXED = ("utt", "rank", "words")  # the fields of a hypothesis before its score columns
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*\Z")
# A decimal number as C's strtod and every TSV reader take it (Python's float() would also take
# '1_000', 'nan', 'inf' and surrounding spaces).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


@dataclass
class Hypothesis:
    """One line: ``scores[i]`` is the cost of column ``columns[i]`` of its table, ``texts[i]`` its
    text as read (None for a computed score); line: where it was read (0: not read)."""

    rank: int
    words: List[str]
    scores: Tuple[float, ...]
    texts: Tuple[Optional[str], ...] = ()
    line: int = 0


@dataclass
class Utterance:
    id: str
    hyps: List[Hypothesis]


@dataclass
class NbestTable:
    """An N-best list in any format: its score columns and utterances (the input's order).

    refs: utt -> reference words where a reader found them (a NeMo manifest); None otherwise.
    header_line: the line of ``path`` that names the columns (2 in a TSV file; None
    where the columns come from a layout, as in another recognizer's decode dir).
    """

    path: str
    columns: Tuple[str, ...]
    utterances: List[Utterance] = field(default_factory=list)
    refs: Optional[Dict[str, List[str]]] = None
    header_line: Optional[int] = None

    @property
    def num_hyps(self) -> int:
        return sum(len(u.hyps) for u in self.utterances)

    def column(self, name: str) -> int:
        """The index of score column ``name`` (RescoreError naming the header without it)."""
        if name not in self.columns:
            raise RescoreError(f"a score column '{name}' (the input has: {', '.join(self.columns) or 'none'})",
                               path=self.path, line=self.header_line)
        return self.columns.index(name)


def format_score(x: float) -> str:
    """The shortest text that reads back to the same float64; NaN and infinities are refused."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"non-finite score {x}")
    return repr(x)


def parse_score(text: str) -> Optional[float]:
    """A finite decimal number, or None where ``text`` is not one."""
    if not _NUMBER.match(text):
        return None
    x = float(text)
    return x if math.isfinite(x) else None


def check_columns(columns: Sequence[str], path: Optional[PathLike] = None, line: Optional[int] = 2) -> None:
    """Score column names: well formed, none twice, none of utt/rank/words."""
    seen = set()
    for c in columns:
        if c in FIXED or not _NAME.match(c):
            raise RescoreError("score column names of a letter, then letters, digits, '_', '.' or '-' "
                               f"(not {', '.join(FIXED)})", path=path, line=line, got=c)
        if c in seen:
            raise RescoreError("each score column named once", path=path, line=line, got=c)
        seen.add(c)


def with_columns(table: NbestTable, extra: Sequence[str], values: Dict[Tuple[str, int], Sequence[float]],
                 path: Optional[str] = None) -> NbestTable:
    """A copy of ``table`` with score columns ``extra`` added at the end; values[(utt, rank)]
    holds each hypothesis' new scores (one per extra column)."""
    check_columns([*table.columns, *extra], path or table.path, line=None)
    utts = []
    for u in table.utterances:
        hyps = []
        for h in u.hyps:
            new = tuple(float(x) for x in values[(u.id, h.rank)])
            texts = h.texts if len(h.texts) == len(table.columns) else (None,) * len(table.columns)
            hyps.append(Hypothesis(h.rank, h.words, h.scores + new, texts + (None,) * len(new), h.line))
        utts.append(Utterance(u.id, hyps))
    return NbestTable(path or table.path, (*table.columns, *extra), utts, table.refs, table.header_line)


def ranked(table: NbestTable, costs: Costs):
    """[(utterance, its hypotheses best first)]: by cost, ties in rank order."""
    return [(u, sorted(u.hyps, key=lambda h: (costs[(u.id, h.rank)], h.rank))) for u in table.utterances]


def parse_printed(text: str) -> Optional[float]:
    """A finite number from str() of a float or of a 0-dim tensor: '-3.25', 'tensor(-3.25)',
    "tensor(-3.25, device='cuda:0')"; None otherwise."""
    text = text.strip()
    if text.startswith("tensor(") and text.endswith(")"):
        text = text[len("tensor("):-1].split(",")[0].strip()
    return parse_score(text)


def print_score(x: float) -> str:
    """A score as the recognizers' own files print a Python float (repr; no check)."""
    return repr(float(x))
