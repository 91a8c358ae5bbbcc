"""The N-best dump of an icefall decode, written from the decode script itself.

icefall's decode scripts keep only each method's 1-best; the N-best is a ``k2`` ``Nbest`` object
inside ``icefall.decode`` (``nbest_decoding``, ``rescore_with_n_best_list``). The decode script
makes one itself and hands it to :func:`write_nbest` (docs/ecosystems.md has the lines)::

    from rescore.io.icefall import write_nbest
    nbest = Nbest.from_lattice(lattice, num_paths=params.num_paths, nbest_scale=params.nbest_scale)
    nbest = nbest.intersect(lattice)
    write_nbest(nbest, cut_ids, lexicon.word_table, dump_file, refs=texts)

This module imports neither k2 nor icefall: a ``Nbest`` is used through its attributes (``fsa``,
``shape``, ``tot_scores()``, ``compute_am_scores()``, ``compute_lm_scores()``), and plain lists
do as well (:func:`write_nbest`). The dump is what rescore.io.ecosystems.read_icefall reads.

Each cut's paths are written best first by the first pass (k2's ``Nbest.from_lattice`` keeps
them in the order of ``RaggedTensor.unique``, a sort by a hash of the word ids, not by score):
the first pass is ``am + lm`` (= ``tot_scores()``) where the lattice has ``lm_scores`` (HLG),
else ``tot_scores()`` alone, written as ``pass1_scores`` (e.g. the lattice of a transducer's
``fast_beam_search_nbest``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Dict, List, Mapping, Optional, Sequence, Union

PathLike = Union[str, Path]
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

