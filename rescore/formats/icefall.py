"""icefall: the N-best dump written from its decode script (:func:`write_nbest`), read as a table
(``--format icefall``, :func:`read_icefall`), and a rescored table back as icefall's result files
(``--write-format icefall``, ``--to icefall``, :func:`icefall_files`).

The dump.

icefall's decode scripts keep only each method's 1-best; the N-best is a ``k2`` ``Nbest`` object
inside ``icefall.decode`` (``nbest_decoding``, ``rescore_with_n_best_list``). The decode script
makes one itself and hands it to :func:`write_nbest` (docs/ecosystems.md has the lines)::

    from rescore.formats.icefall import write_nbest
    nbest = Nbest.from_lattice(lattice, num_paths=params.num_paths, nbest_scale=params.nbest_scale)
    nbest = nbest.intersect(lattice)
    write_nbest(nbest, cut_ids, lexicon.word_table, dump_file, refs=texts)

This module imports neither k2 nor icefall: a ``Nbest`` is used through its attributes (``fsa``,
``shape``, ``tot_scores()``, ``compute_am_scores()``, ``compute_lm_scores()``), and plain lists
do as well (:func:`write_nbest`). The dump is what :func:`read_icefall` reads.

Each cut's paths are written best first by the first pass (k2's ``Nbest.from_lattice`` keeps
them in the order of ``RaggedTensor.unique``, a sort by a hash of the word ids, not by score):
the first pass is ``am + lm`` (= ``tot_scores()``) where the lattice has ``lm_scores`` (HLG),
else ``tot_scores()`` alone, written as ``pass1_scores`` (e.g. the lattice of a transducer's
``fast_beam_search_nbest``).

Reading (:func:`read_icefall`): icefall's decode scripts keep only each method's
1-best (``recogs-*.txt`` from ``store_transcripts``, no scores), so the N-best is dumped from the
``k2`` ``Nbest`` object of an n-best decoding method (docs/ecosystems.md has the lines): a
JSON-lines file, one object per cut: ``{"cut_id": ..., "hyps": ["w w ...", ...], "am_scores":
[...], "lm_scores": [...], "ref": "w w ..."}`` (``ref`` optional; ``hyps`` also as lists of
words), as :func:`write_nbest` writes it. Every ``<name>_scores`` list
(one log-probability per hypothesis, as ``Nbest.compute_am_scores()``/``compute_lm_scores()``
give per path) becomes column ``<name>`` = -score. The first pass is their sum; a cut whose
first hypothesis is not the best by it (k2's ``Nbest`` keeps the paths in the order of a hash
of their words, not of their scores) is put in that order, with a warning.

Writing (:func:`icefall_files`): ``recogs-<set>-<key>.txt``, ``errs-<set>-<key>.txt`` and
``wer-summary-<set>.txt`` as icefall's ``save_results`` writes them (``store_transcripts``
and ``write_error_stats`` of ``icefall/utils.py``; the alignment is Kaldi's
``LevenshteinAlignment``, as ``kaldialign.align`` computes it). They need references.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import IO, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.formats.base import Format
from rescore.formats.table import Costs, Hypothesis, NbestTable, PathLike, Utterance, parse_score, ranked

log = logging.getLogger(__name__)
ON_INF = ("refuse", "drop", "clamp")


def _tolist(x) -> list:
    x = getattr(x, "values", x)  # a k2.RaggedTensor's values
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _k2_paths(nbest) -> List[dict]:
    """Per cut {"hyps": [word ids per path], "<name>_scores": [...]} of a k2 Nbest."""
    fsa = nbest.fsa
    splits = _tolist(nbest.shape.row_splits(1))
    if hasattr(fsa, "lm_scores"):
        columns = {"am": _tolist(nbest.compute_am_scores()), "lm": _tolist(nbest.compute_lm_scores())}
    else:
        columns = {"pass1": _tolist(nbest.tot_scores())}
    ids = _k2_word_ids(fsa)
    return [{"hyps": ids[a:b], **{f"{c}_scores": v[a:b] for c, v in columns.items()}}
            for a, b in zip(splits[:-1], splits[1:])]


def _k2_word_ids(fsa) -> List[List[int]]:
    """The word ids of each linear path of an FsaVec, as icefall.utils.get_texts takes them
    (aux_labels, else labels; 0s and -1s removed)."""
    import k2  # only reached with a k2 object

    labels = getattr(fsa, "aux_labels", None)
    if labels is None:
        labels = fsa.labels
    if isinstance(labels, k2.RaggedTensor):
        labels = labels.remove_values_leq(0)
        shape = fsa.arcs.shape().compose(labels.shape).remove_axis(1).remove_axis(1)
        ragged = k2.RaggedTensor(shape, labels.values)
    else:
        ragged = k2.RaggedTensor(fsa.arcs.shape().remove_axis(1), labels).remove_values_leq(0)
    return ragged.tolist()


def _word(table, i):
    if isinstance(i, str):
        return i
    if table is None:
        raise ValueError("word ids need a word table (k2.SymbolTable, a dict id -> word, or a function)")
    return table[int(i)]


def _words(ids: Sequence, table) -> str:
    if callable(table) and not hasattr(table, "__getitem__"):  # e.g. sentencepiece's decode
        return str(table(list(ids)))
    return " ".join(_word(table, i) for i in ids)


def cut_lines(paths: Sequence[Mapping], cut_ids: Sequence[str], word_table=None,
              refs: Optional[Sequence[str]] = None, on_inf: str = "refuse", clamp: float = -1e4) -> List[str]:
    """The dump's lines (JSON objects) of plain per-cut path lists (write_nbest)."""
    if on_inf not in ON_INF:
        raise ValueError(f"on_inf must be one of {ON_INF}")
    if len(paths) != len(cut_ids) or (refs is not None and len(refs) != len(cut_ids)):
        raise ValueError(f"{len(cut_ids)} cut ids, {len(paths)} path lists"
                         + (f", {len(refs)} references" if refs is not None else "") + ": one each per cut")
    lines = []
    for k, (cut, p) in enumerate(zip(cut_ids, paths)):
        names = sorted(n for n in p if n.endswith("_scores"))
        hyps = list(p["hyps"])
        cols = {n: [float(x) for x in p[n]] for n in names}
        if not names or any(len(v) != len(hyps) for v in cols.values()):
            raise ValueError(f"cut {cut}: one score per path in each <name>_scores list")
        keep = []
        for i in range(len(hyps)):
            bad = [n for n in names if not math.isfinite(cols[n][i])]
            if any(math.isnan(cols[n][i]) or cols[n][i] > 0 and math.isinf(cols[n][i]) for n in bad):
                raise ValueError(f"cut {cut}, path {i}: a NaN or +inf score ({', '.join(bad)})")
            if bad and on_inf == "refuse":
                raise ValueError(f"cut {cut}, path {i}: {', '.join(bad)} is -inf (a path that the graph, e.g. G, "
                                 "does not accept). write_nbest(..., on_inf='drop') leaves such paths out, "
                                 "on_inf='clamp' writes them with the score `clamp`")
            if bad and on_inf == "drop":
                continue
            for n in bad:
                cols[n][i] = clamp
            keep.append(i)
        if not keep:
            raise ValueError(f"cut {cut}: every path has a -inf score (on_inf='clamp' keeps them)")
        keep.sort(key=lambda i: -sum(cols[n][i] for n in names))  # best first pass first; stable
        obj: Dict[str, object] = {"cut_id": cut, "hyps": [_words(hyps[i], word_table) for i in keep]}
        obj.update({n: [cols[n][i] for i in keep] for n in names})
        if refs is not None:
            obj["ref"] = refs[k]
        lines.append(json.dumps(obj, ensure_ascii=False) + "\n")
    return lines


def write_nbest(nbest, cut_ids: Sequence[str], word_table, out: Union[PathLike, IO[str]],
                refs: Optional[Sequence[str]] = None, on_inf: str = "refuse", clamp: float = -1e4) -> int:
    """Append the N-best of a batch of cuts to the dump ``out`` (an open text file, or a path
    opened for appending: remove it before a decode), one JSON line per cut; returns the number
    of paths written.

    nbest: a k2 ``Nbest`` after ``intersect(lattice)`` (scores assigned), or plain lists, one
    per cut: ``{"hyps": [[word id, ...] or [word, ...], ...], "am_scores": [...], ...}`` with
    one log-probability per path in each ``<name>_scores`` list. word_table: ``k2.SymbolTable``
    (``lexicon.word_table``), a dict id -> word, a function of a list of ids (e.g.
    ``sp.decode`` for BPE tokens), or None for paths given as words. refs: the cuts' reference
    texts (``supervisions["text"]``), optional. on_inf: a -inf score (a path that G does not
    accept after intersecting with it) is refused ("refuse", a ValueError that says so), the
    path left out ("drop") or given the score ``clamp`` ("clamp")."""
    paths = _k2_paths(nbest) if hasattr(nbest, "fsa") and hasattr(nbest, "shape") else nbest
    lines = cut_lines(paths, list(cut_ids), word_table, refs, on_inf, clamp)
    if hasattr(out, "write"):
        out.writelines(lines)
    else:
        with open(out, "a", encoding="utf-8") as f:
            f.writelines(lines)
    return sum(len(json.loads(x)["hyps"]) for x in lines)


# --------------------------------------------------------------------------------------------
# the dump as a table


def _read_words(v, path: Path, line: int, what: str) -> List[str]:
    if isinstance(v, str):
        return v.split()
    if isinstance(v, list) and all(isinstance(w, str) and w and not any(c.isspace() for c in w) for w in v):
        return list(v)
    raise RescoreError(f"{what} as a string of words or a list of words", path=path, line=line, got=str(v)[:60])


def read_icefall(path: PathLike) -> NbestTable:
    """An icefall N-best dump (module doc) as a table: a column per ``<name>_scores`` (negated)."""
    from rescore.io.files import read_json_lines  # (rescore.io: not at a command's --help)

    path = Path(path)
    columns: Optional[Tuple[str, ...]] = None
    utts, refs, seen, reordered = [], {}, {}, []
    for line, obj in read_json_lines(path):
        if not isinstance(obj, dict) or not isinstance(obj.get("cut_id"), str) or not isinstance(obj.get("hyps"), list):
            raise RescoreError("an object with 'cut_id' (a string) and 'hyps' (a list)", path=path, line=line)
        cut = obj["cut_id"]
        if not cut or any(c.isspace() for c in cut) or cut in seen:
            raise RescoreError("a cut_id without whitespace, each once" + (f" (also at line {seen[cut]})"
                               if cut in seen else ""), path=path, line=line, got=cut)
        seen[cut] = line
        names = tuple(sorted(k[: -len("_scores")] for k in obj if k.endswith("_scores")))
        if columns is None:
            columns, first = names, line
        if names != columns:
            raise RescoreError(f"the score lists of the first cut (line {first}: {', '.join(columns) or 'none'})",
                               path=path, line=line, got=", ".join(names) or "none")
        n = len(obj["hyps"])
        if n == 0:
            raise RescoreError("at least one hypothesis", path=path, line=line, got=f"cut {cut}: none")
        cols = []
        for c in columns:
            v = obj[c + "_scores"]
            ok = isinstance(v, list) and len(v) == n and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and parse_score(repr(float(x))) is not None
                for x in v)
            if not ok:
                inf = isinstance(v, list) and any(x is None for x in v)
                raise RescoreError(f"'{c}_scores': {n} finite numbers (one per hypothesis)", path=path, line=line,
                                   got=str(v)[:60] + (" (-Infinity: a path that G does not accept; "
                                                      "write_nbest drops or clamps those)"
                                                      if inf else ""))
            cols.append([-float(x) for x in v])
        hyps = [Hypothesis(k + 1, _read_words(h, path, line, "a hypothesis"), tuple(col[k] for col in cols),
                           (None,) * len(cols), line) for k, h in enumerate(obj["hyps"])]
        first_pass = [sum(h.scores) for h in hyps]
        if first_pass[0] > min(first_pass):
            order = sorted(range(n), key=first_pass.__getitem__)  # stable: ties keep the dump's order
            hyps = [replace(hyps[k], rank=r + 1) for r, k in enumerate(order)]
            reordered.append(cut)
        utts.append(Utterance(cut, hyps))
        if "ref" in obj:
            refs[cut] = _read_words(obj["ref"], path, line, "'ref'")
    if columns is None:
        raise RescoreError("at least one cut", path=path, got="an empty file")
    if reordered:
        log.warning("%s: %d of %d cuts (first: %s) did not list the best path by the first pass (the sum of %s) "
                    "first, as k2's Nbest keeps paths in the order of a hash of their words; ranked them by it",
                    path, len(reordered), len(utts), reordered[0], " + ".join(f"{c}_scores" for c in columns))
    if refs and len(refs) != len(utts):
        raise RescoreError("a 'ref' in every object or in none", path=path, got=f"{len(refs)} of {len(utts)}")
    return NbestTable(str(path), columns, utts, refs or None)


# --------------------------------------------------------------------------------------------
# the result files


def icefall_names(test_set: str, key: str = "rescored", suffix: Optional[str] = None) -> List[str]:
    """The file names of icefall's ``save_results``: ``recogs-<set>-<key>.txt``, ``errs-...``,
    ``wer-summary-<set>.txt``; with ``suffix`` (``params.suffix`` of a current zipformer
    decode.py) ``recogs-<set>-<suffix>.txt``, ``errs-<set>-<suffix>.txt``,
    ``wer-summary-<set>-<suffix>.txt``."""
    if suffix is not None:
        return [f"recogs-{test_set}-{suffix}.txt", f"errs-{test_set}-{suffix}.txt",
                f"wer-summary-{test_set}-{suffix}.txt"]
    return [f"recogs-{test_set}-{key}.txt", f"errs-{test_set}-{key}.txt", f"wer-summary-{test_set}.txt"]


def icefall_test_set(path: PathLike) -> str:
    """The test set name of a dump ``nbest-<set>.jsonl`` (docs/ecosystems.md), else its stem."""
    stem = Path(path).name.split(".")[0]
    return stem[len("nbest-"):] if stem.startswith("nbest-") and len(stem) > len("nbest-") else stem


def kaldi_align(ref: Sequence[str], hyp: Sequence[str], eps: str = "*") -> List[Tuple[str, str]]:
    """``kaldialign.align`` without sclite_mode (its ``LevenshteinAlignment``, a copy of Kaldi's
    util/edit-distance-inl.h with strict comparisons in the trace back): unit costs; from the
    end, a match or substitution only where it is strictly cheaper than a deletion and an
    insertion, a deletion only where strictly cheaper than an insertion."""
    m_len, n_len = len(ref), len(hyp)
    e = [[0] * (n_len + 1) for _ in range(m_len + 1)]
    for n in range(n_len + 1):
        e[0][n] = n
    for m in range(1, m_len + 1):
        e[m][0] = e[m - 1][0] + 1
        for n in range(1, n_len + 1):
            sub_or_ok = e[m - 1][n - 1] + (ref[m - 1] != hyp[n - 1])
            e[m][n] = min(sub_or_ok, e[m - 1][n] + 1, e[m][n - 1] + 1)
    out = []
    m, n = m_len, n_len
    while m != 0 or n != 0:
        if m == 0:
            last_m, last_n = m, n - 1
        elif n == 0:
            last_m, last_n = m - 1, n
        else:
            sub_or_ok = e[m - 1][n - 1] + (ref[m - 1] != hyp[n - 1])
            dele, ins = e[m - 1][n] + 1, e[m][n - 1] + 1
            if sub_or_ok < min(dele, ins):
                last_m, last_n = m - 1, n - 1
            elif dele < ins:
                last_m, last_n = m - 1, n
            else:
                last_m, last_n = m, n - 1
        out.append((eps if last_m == m else ref[last_m], eps if last_n == n else hyp[last_n]))
        m, n = last_m, last_n
    out.reverse()
    return out


def store_transcripts(results: Sequence[Tuple[str, List[str], List[str]]]) -> str:
    """icefall's ``store_transcripts``: two lines per cut, ``cut_id:\\tref=[...]`` and
    ``cut_id:\\thyp=[...]`` (Python's list repr)."""
    return "".join(f"{cut_id}:\tref={ref}\n{cut_id}:\thyp={hyp}\n" for cut_id, ref, hyp in results)


def write_error_stats(results: Sequence[Tuple[str, List[str], List[str]]]) -> Tuple[str, float]:
    """icefall's ``write_error_stats`` (without CER or sclite mode): the errs file's text and
    the WER it returns (percent, 2 decimals)."""
    err = "*"
    subs: Dict[Tuple[str, str], int] = defaultdict(int)
    ins: Dict[str, int] = defaultdict(int)
    dels: Dict[str, int] = defaultdict(int)
    words: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    num_corr = 0
    for _, ref, hyp in results:
        for ref_word, hyp_word in kaldi_align(ref, hyp, err):
            if ref_word == err:
                ins[hyp_word] += 1
                words[hyp_word][3] += 1
            elif hyp_word == err:
                dels[ref_word] += 1
                words[ref_word][4] += 1
            elif hyp_word != ref_word:
                subs[(ref_word, hyp_word)] += 1
                words[ref_word][1] += 1
                words[hyp_word][2] += 1
            else:
                words[ref_word][0] += 1
                num_corr += 1
    ref_len = sum(len(r) for _, r, _ in results)
    sub_errs, ins_errs, del_errs = sum(subs.values()), sum(ins.values()), sum(dels.values())
    tot_errs = sub_errs + ins_errs + del_errs
    if ref_len == 0:
        raise RescoreError("references with at least one word (icefall's WER divides by their number)",
                           got="no reference words")
    tot_err_rate = "%.2f" % (100.0 * tot_errs / ref_len)
    out = [f"%WER = {tot_err_rate}",
           f"Errors: {ins_errs} insertions, {del_errs} deletions, {sub_errs} substitutions, over {ref_len} "
           f"reference words ({num_corr} correct)",
           "Search below for sections starting with PER-UTT DETAILS:, SUBSTITUTIONS:, DELETIONS:, INSERTIONS:, "
           "PER-WORD STATS:", "", "PER-UTT DETAILS: corr or (ref->hyp)  "]
    for cut_id, ref, hyp in results:
        ali = [[[x], [y]] for x, y in kaldi_align(ref, hyp, err)]
        for i in range(len(ali) - 1):  # combine successive errors
            if ali[i][0] != ali[i][1] and ali[i + 1][0] != ali[i + 1][1]:
                ali[i + 1][0] = ali[i][0] + ali[i + 1][0]
                ali[i + 1][1] = ali[i][1] + ali[i + 1][1]
                ali[i] = [[], []]
        ali = [[[a for a in x if a != err], [a for a in y if a != err]] for x, y in ali]
        ali = [x for x in ali if x != [[], []]]
        ali = [[err if x == [] else " ".join(x), err if y == [] else " ".join(y)] for x, y in ali]
        out.append(f"{cut_id}:\t" + " ".join(r if r == h else f"({r}->{h})" for r, h in ali))
    out += ["", "SUBSTITUTIONS: count ref -> hyp"]
    out += [f"{count}   {ref} -> {hyp}" for count, (ref, hyp) in sorted([(v, k) for k, v in subs.items()],
                                                                          reverse=True)]
    out += ["", "DELETIONS: count ref"]
    out += [f"{count}   {ref}" for count, ref in sorted([(v, k) for k, v in dels.items()], reverse=True)]
    out += ["", "INSERTIONS: count hyp"]
    out += [f"{count}   {hyp}" for count, hyp in sorted([(v, k) for k, v in ins.items()], reverse=True)]
    out += ["", "PER-WORD STATS: word  corr tot_errs count_in_ref count_in_hyp"]
    for _, word, counts in sorted([(sum(v[1:]), k, v) for k, v in words.items()], reverse=True):
        corr, ref_sub, hyp_sub, n_ins, n_dels = counts
        out.append(f"{word}   {corr} {ref_sub + hyp_sub + n_ins + n_dels} {corr + ref_sub + n_dels} "
                   f"{corr + hyp_sub + n_ins}")
    return "".join(x + "\n" for x in out), float(tot_err_rate)


def icefall_files(table, costs: Costs, refs: Optional[Mapping[str, Sequence[str]]], test_set: str,
                  key: str = "rescored", suffix: Optional[str] = None) -> Dict[str, str]:
    """icefall's ``save_results`` files of the 1-best (module doc; suffix: icefall_names)."""
    if not refs:
        raise RescoreError("references for icefall's recogs/errs files (the dump's 'ref', or --data-dir with a "
                           "'text')", path=table.path, got="none")
    results = []
    for u, hyps in ranked(table, costs):
        if u.id not in refs:
            raise RescoreError(f"a reference for cut '{u.id}'", path=table.path, got="none")
        results.append((u.id, list(refs[u.id]), list(hyps[0].words)))
    results = sorted(results)
    errs, wer = write_error_stats(results)
    names = icefall_names(test_set, key, suffix)
    return {names[0]: store_transcripts(results), names[1]: errs, names[2]: f"settings\tWER\n{key}\t{wer}\n"}


def _files(table, costs: Costs, args) -> Dict[str, str]:
    return icefall_files(table, costs, args.refs if args.refs is not None else table.refs,
                         args.test_set or icefall_test_set(table.path), suffix=args.suffix)


FORMAT = Format("icefall", "an icefall N-best dump (JSON lines)",
                read=lambda path, manifest, options: read_icefall(path), result_files=_files,
                result_names=lambda args: icefall_names(args.test_set, suffix=args.suffix), refs=True)
