"""Any input of rescore-nbest as a table (rescore.formats.table.NbestTable): a Kaldi N-best dir
(read and checked as rescore.nbest.sets loads it), or any other format by its reader
(rescore.formats.registry); and the one rule that ranks a table's
hypotheses, for rescore-nbest and for every writer of a recognizer's files.

The total cost of hypothesis h, from its score columns s_c (costs), the NN LM cost l_nn and its
|h| words::

    total(h) = sum_c lambda_c * s_c(h)  +  w * l_nn(h)  +  wip * |h|

lambda_c is ``--score-weight c=X``; a column without one has weight 1, except Kaldi's columns
(``ac``, ``graph``, ``nolm``: :func:`kaldi_to_table`), which default to Kaldi's interpolation
(rescore.nbest.interp): ``ac`` 1/inv_acwt, ``graph`` 1 - w, ``nolm`` w. Kaldi's columns come
together: ``graph`` or ``nolm`` without the other two is refused (an unscaled ``ac`` summed with
a graph cost ranks by the acoustic cost alone), unless each column present is weighted by hand.
:func:`interp_inputs` maps a hypothesis onto rescore.nbest.interp's (ac, withlm, nolm), so that
``fixed_cost`` gives the total without the NN LM; :func:`ranking_costs` is that total for a
table without NN LM costs (or its ``total`` column, rescore-nbest's scores.tsv), with
rescore-nbest's defaults: the 1-best any writer picks is the one rescore-nbest would pick."""

from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Sequence, Tuple

from rescore.errors import RescoreError
from rescore.formats.base import ReadOptions
from rescore.formats.kaldi import KALDI_COLUMNS
from rescore.formats.registry import FORMATS, input_format
from rescore.formats.table import Hypothesis, NbestTable, PathLike, Utterance, parse_score
from rescore.io.text_tables import read_text_table
from rescore.nbest.interp import Params, fixed_cost
from rescore.nbest import sets as nb
from rescore.nbest.sets import load_nbest_dir

ADDED = ("nn", "total")  # the columns rescore-nbest adds to scores.tsv


def _key_parts(key: str) -> Tuple[str, int]:
    utt, _, k = key.rpartition("-")
    return utt, int(k)


def kaldi_to_table(nbest_dir: PathLike, words_txt: Optional[PathLike] = None) -> NbestTable:
    """A Kaldi N-best dir (read and checked by rescore.nbest.sets.load_nbest_dir) as a table with
    columns ac, graph, nolm, in the dir's order; the scores of text archives keep their text."""
    nbest = load_nbest_dir(nbest_dir, words_txt=words_txt)
    texts: Dict[str, Dict[str, str]] = {}
    for col, name in KALDI_COLUMNS.items():
        p = nbest.kaldi.archives[name]
        texts[col] = {}
        if p is None or p.name.endswith(".scp"):
            continue
        try:  # a text archive's number texts; a binary archive fails here, or gives none that match below
            t = read_text_table(p, "tokens")
        except RescoreError:
            continue
        texts[col] = {k: v[0] for k, v in zip(t.keys, t.values) if len(v) == 1 and parse_score(v[0]) is not None}
    utts = []
    for u in nbest.utterances():
        hyps = []
        for h in u.hyps:
            scores = (h.ac, h.withlm, h.nolm)
            own = tuple(texts[c].get(h.key) for c in KALDI_COLUMNS)
            # a kept text must read back to the float the archive reader found
            own = tuple(t if t is not None and float(t) == x else None for t, x in zip(own, scores))
            hyps.append(Hypothesis(_key_parts(h.key)[1], list(h.words), scores, own))
        utts.append(Utterance(u.id, hyps))
    return NbestTable(str(nbest_dir), tuple(KALDI_COLUMNS), utts)


def load_table(path: PathLike, fmt: str = "auto", manifest: Optional[PathLike] = None,
               words_txt: Optional[PathLike] = None, options: ReadOptions = ReadOptions()) -> NbestTable:
    """Read any input of rescore-nbest as a table (rescore.formats.registry: a Kaldi dir here,
    every other format by its own reader; manifest: NeMo's; options: the readers' own)."""
    fmt = input_format(path, fmt)
    if fmt == "kaldi":
        return kaldi_to_table(path, words_txt)
    return FORMATS[fmt].read(path, manifest, options)


# --------------------------------------------------------------------------------------------
# The ranking rule (module doc)


def is_kaldi_default(columns: Sequence[str], given: Mapping[str, float]) -> bool:
    """Kaldi's columns alone, none of them weighted by hand: rescore.nbest.interp's formula applies."""
    return set(columns) == set(KALDI_COLUMNS) and not set(given) & set(KALDI_COLUMNS)


def column_weights(table: NbestTable, given: Mapping[str, float], params: Params) -> Dict[str, float]:
    """lambda_c of every column of the table (module doc); a RescoreError for Kaldi's columns in
    part, naming the missing ones."""
    present = [c for c in KALDI_COLUMNS if c in table.columns]
    if {"graph", "nolm"} & set(present) and len(present) < len(KALDI_COLUMNS) and \
            not all(c in given for c in present):
        missing = [c for c in KALDI_COLUMNS if c not in present]
        raise RescoreError(f"Kaldi's score columns {', '.join(KALDI_COLUMNS)} together, to rank by Kaldi's "
                           f"acwt * ac + graph (or, for rescore-nbest, --score-weight for each of "
                           f"{', '.join(present)})", path=table.path, line=table.header_line,
                           got=f"no column {' or '.join(repr(c) for c in missing)}")
    kaldi = len(present) == len(KALDI_COLUMNS)
    defaults = {"ac": 1.0 / params.inv_acwt, "graph": 1.0 - params.weight, "nolm": params.weight}
    return {c: given.get(c, defaults[c] if kaldi and c in defaults else 1.0) for c in table.columns}


def interp_inputs(scores: Sequence[float], columns: Sequence[str], weights: Mapping[str, float],
                  kaldi: bool) -> Tuple[float, float, float]:
    """A hypothesis' (ac, withlm, nolm) for rescore.nbest.interp: with Kaldi's defaults its
    columns ac, graph, nolm; else (0, f, f) with f = sum_c lambda_c s_c, so that fixed_cost is
    exactly f + wip * |h| (0/inv_acwt and (1 - w) * 0 add nothing). f may overflow: the caller
    checks."""
    if kaldi:
        return tuple(scores[columns.index(c)] for c in KALDI_COLUMNS)
    f = 0.0
    for c, x in zip(columns, scores):
        f += weights[c] * x
    return 0.0, f, f


def ranking_costs(table: NbestTable, params: Params = Params(),
                  given: Optional[Mapping[str, float]] = None) -> Dict[Tuple[str, int], float]:
    """(utt, rank) -> the cost that ranks each hypothesis of a table: its column ``total``
    (rescore-nbest's scores.tsv), else rescore-nbest's total without an NN LM (module doc;
    params and given: rescore-nbest's --weight/--inv-acwt/--wip and --score-weight, by default
    its defaults). A table with rescore-nbest's 'nn' but no 'total', or with Kaldi's columns in
    part, is refused: the error names the missing column."""
    if "total" in table.columns:
        i = table.columns.index("total")
        return {(u.id, h.rank): h.scores[i] for u in table.utterances for h in u.hyps}
    if "nn" in table.columns:
        raise RescoreError("a score column 'total' beside 'nn' (rescore-nbest writes both into scores.tsv; the "
                           "total holds the NN LM's weight)", path=table.path, line=table.header_line,
                           got="no column 'total'")
    given = given or {}
    weights = column_weights(table, given, params)
    kaldi = is_kaldi_default(table.columns, given)
    out = {}
    for u in table.utterances:
        for h in u.hyps:
            cost = fixed_cost(*interp_inputs(h.scores, table.columns, weights, kaldi), len(h.words),
                              params.weight, params.inv_acwt, params.wip)
            if not math.isfinite(cost):
                raise RescoreError("scores whose total stays finite", path=table.path, line=h.line or None,
                                   got=f"{u.id} rank {h.rank}: {cost}")
            out[(u.id, h.rank)] = cost
    return out


# --------------------------------------------------------------------------------------------
# A table as an N-best set (the engine's and rescore.nbest.combine's input)


def to_nbest_set(table, weights: Mapping[str, float], kaldi: bool, data_dir=None, allow_missing=False):
    """The table as a rescore.nbest.sets.NbestSet for the engine and rescore.nbest.combine: hypothesis keys
    ``<utt>-<rank>``; with Kaldi's defaults ac, withlm, nolm are the columns ac, graph, nolm;
    else ac = 0 and withlm = nolm = sum_c lambda_c s_c, so that rescore.nbest.interp.fixed_cost is
    exactly that sum + wip * |h| (0/inv_acwt and (1 - w) * 0 add nothing)."""
    idx = {c: table.columns.index(c) for c in table.columns}
    utts = []
    lines: Dict[str, int] = {}
    for u in table.utterances:
        hyps = []
        for h in u.hyps:
            key = f"{u.id}-{h.rank}"
            lines[key] = h.line
            ac, withlm, nolm = interp_inputs(h.scores, table.columns, weights, kaldi)
            if not math.isfinite(withlm):
                _overflow(table, h, key, weights, idx)
            hyps.append(nb.Hypothesis(key, h.words, ac, withlm, nolm))
        utts.append(nb.Utterance(u.id, hyps))
    nbest = nb.assemble_set(table.path, utts, data_dir, refs=table.refs, allow_missing=allow_missing)
    # where an overflow of the interpolation finds each cost (rescore.nbest.combine.CostArrays): the
    # table's file and line, its columns for Kaldi's archives
    columns = ({"acwt": "ac", "lmwt.withlm": "graph", "lmwt.nolm": "nolm"} if kaldi else
               dict.fromkeys(("acwt", "lmwt.withlm", "lmwt.nolm"), "the weighted sum of the score columns"))
    nbest.source_table = (table.path, lines, columns)
    return nbest


def _overflow(table, h, key: str, weights: Mapping[str, float], idx: Mapping[str, int]):
    """The RescoreError of a hypothesis whose weighted sum of scores overflows: its file, line
    and the column of the largest term."""
    terms = {c: weights[c] * h.scores[i] for c, i in idx.items()}
    c = max(terms, key=lambda c: abs(terms[c]) if math.isfinite(terms[c]) else math.inf)
    text = h.texts[idx[c]] if h.texts else repr(h.scores[idx[c]])
    raise RescoreError(f"scores whose weighted sum stays finite: {weights[c]:g} * {c} overflows the total of "
                       f"hypothesis '{key}'", path=table.path, line=h.line or None, got=f"{c} {text}")
