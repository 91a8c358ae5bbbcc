"""Lattice rescoring by path cover: Kaldi's ``steps/pytorchnn`` method, on Kaldi's text lattices.

The method (Ke Li's ``lmrescore_lattice_pytorchnn.sh``, 2021)::

    lattice-prune | lattice-expand        Kaldi: arcs of high posterior get a history of their own
    path_cover                            the best path through every arc (and every final state)
    score the paths with the NN LM        our engine (rescore-nbest): prefix sharing, micro-batches,
                                          LM state and pointer history carried across utterances
    arc_nn_costs                          each arc: the NN cost of its word after the history of
                                          its best path (estimate_arc_nnlm_scores.py)
    add_nn_costs                          graph cost += w * NN cost on every word arc and final
    lattice-lmrescore[-const-arpa]        Kaldi: graph cost -= w * old n-gram LM cost

Why this method: it rescores the lattice itself (the output is a lattice for ``local/score.sh``)
with a bounded number of NN LM queries (one path per arc at most, typically far fewer), it keeps
every decision inside the first-pass lattice topology, and its paths are an N-best list, so the
whole N-best machinery (the engine's prefix trie, the state carry from the rescored best, the
OOV penalty, job splitting) applies unchanged. Kaldi's rnnlm pruned expansion
(``lmrescore_pruned.sh``) merges NN histories by their last n-gram words, which an implicit
cache pointer (whose history is the whole conversation) would defeat.

Where this differs from Kaldi's implementation (both fixed here, tests cover them):

* Kaldi names an arc by its (source, destination) state pair, so two arcs between the same states
  (different words, or the same word with different alignments) share one score; here an arc is
  its position in the lattice.
* Kaldi's path words skip epsilon arcs while its state sequences do not, so a path with an
  epsilon arc gives its later arcs the scores of their neighbours; here positions count word
  arcs only. And a final state that no cover path ends at gets no end-of-sentence cost in
  Kaldi; here every final state is covered like an arc (its best path ends there).

Lattices are read and written in Kaldi's text form by :mod:`rescore.io.lattices` (its names
are re-exported here).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from rescore.errors import OptionError, RescoreError
from rescore.io.lattices import (Arc, Lattice, format_lattice, iter_lattices, open_text,  # noqa: F401  (re-exported)
                                 read_lattices, write_lattices)

log = logging.getLogger(__name__)
PathLike = Union[str, Path]


# --------------------------------------------------------------------------------------------
# Path cover


@dataclass
class CoverPath:
    """A path from the start state: its arcs (indices into ``Lattice.arcs``), the final state
    it stops at, and its first-pass cost ``lm_scale * graph + acoustic_scale * ac``."""

    arcs: List[int]
    end: int
    cost: float

    def words(self, lat: Lattice) -> List[int]:
        return [lat.arcs[i].word for i in self.arcs if lat.arcs[i].word != 0]


def topological_order(lat: Lattice) -> List[int]:
    """States in an order where every arc goes forward (Kahn); a cycle is an error."""
    indeg = [0] * lat.num_states
    for a in lat.arcs:
        indeg[a.dst] += 1
    out = lat.out_arcs()
    order = [s for s in range(lat.num_states) if indeg[s] == 0]
    i = 0
    while i < len(order):
        for j in out[order[i]]:
            d = lat.arcs[j].dst
            indeg[d] -= 1
            if indeg[d] == 0:
                order.append(d)
        i += 1
    if len(order) != lat.num_states:
        raise RescoreError(f"an acyclic lattice ('{lat.key}' has a cycle)", path=lat.where or None)
    return order


def path_cover(lat: Lattice, acoustic_scale: float, lm_scale: float = 1.0) -> List[CoverPath]:
    """Kaldi's path cover (``lattice-path-cover``): for every arc, and every final state, the
    best path through it; each distinct path once, best first (ties: in discovery order).

    An arc on no complete path (unreachable, or no final state after it) is not covered.
    """
    if lat.start < 0:
        return []
    inf = math.inf
    cost = [lm_scale * a.graph + acoustic_scale * a.ac for a in lat.arcs]
    fcost = {s: lm_scale * g + acoustic_scale * ac for s, (g, ac, _) in lat.finals.items()}
    order = topological_order(lat)
    out = lat.out_arcs()
    alpha = [inf] * lat.num_states   # best cost from the start
    back = [-1] * lat.num_states     # the arc into a state on that best path
    alpha[lat.start] = 0.0
    for s in order:
        if alpha[s] == inf:
            continue
        for i in out[s]:
            d = lat.arcs[i].dst
            c = alpha[s] + cost[i]
            if c < alpha[d]:
                alpha[d], back[d] = c, i
    beta = [inf] * lat.num_states    # best cost to the end, final weight included
    fwd = [-1] * lat.num_states      # the arc out of a state on that best path; -1: stop here
    for s in reversed(order):
        beta[s] = fcost.get(s, inf)
        for i in out[s]:
            c = cost[i] + beta[lat.arcs[i].dst]
            if c < beta[s]:
                beta[s], fwd[s] = c, i

    def prefix(s: int) -> List[int]:
        arcs = []
        while s != lat.start:
            arcs.append(back[s])
            s = lat.arcs[back[s]].src
        return arcs[::-1]

    def suffix(s: int) -> Tuple[List[int], int]:
        arcs = []
        while fwd[s] >= 0:
            arcs.append(fwd[s])
            s = lat.arcs[fwd[s]].dst
        return arcs, s

    # The best path through arc i (s -> d) is prefix(s) + i + suffix(d). A path is named
    # without building it by (m, e): m the last state up to which it follows the back pointers,
    # e the arc it takes from m (-1: it stops at m). Then the remainder after e is suffix(dst e),
    # so (m, e) gives the path back, and every arc or final state whose best path it is names
    # it the same way: each distinct path is built once (Kaldi's skip of repeats, made exact).
    walk = [-1] * lat.num_states     # m for the best path through a state
    for s in reversed(order):
        f = fwd[s]
        walk[s] = walk[lat.arcs[f].dst] if f >= 0 and back[lat.arcs[f].dst] == f else s
    seen: Dict[Tuple[int, int], float] = {}
    for s in order:
        if alpha[s] == inf:
            continue
        for i in out[s]:
            d = lat.arcs[i].dst
            if beta[d] == inf:
                continue
            key = (walk[d], fwd[walk[d]]) if back[d] == i else (s, i)
            seen.setdefault(key, alpha[s] + cost[i] + beta[d])
        if s in fcost:
            seen.setdefault((s, -1), alpha[s] + fcost[s])
    paths = []
    for (m, e), c in seen.items():
        if e < 0:
            paths.append(CoverPath(prefix(m), m, c))
        else:
            tail, end = suffix(lat.arcs[e].dst)
            paths.append(CoverPath(prefix(m) + [e] + tail, end, c))
    return sorted(paths, key=lambda p: p.cost)  # stable: ties keep discovery order



def path_lattice(lat: Lattice, path: CoverPath, key: str) -> Lattice:
    """A cover path as a linear lattice (its arcs' weights and transition ids, epsilon arcs
    included, the end state's final weight): one N-best entry in Kaldi's form."""
    arcs = [Arc(k, k + 1, lat.arcs[i].word, lat.arcs[i].graph, lat.arcs[i].ac, lat.arcs[i].ali)
            for k, i in enumerate(path.arcs)]
    n = len(arcs)
    return Lattice(key=key, start=0, num_states=n + 1, arcs=arcs, finals={n: lat.finals[path.end]})


# --------------------------------------------------------------------------------------------
# Arc scores


@dataclass
class ArcCosts:
    """NN LM costs estimated for one lattice: ``arcs[i]`` for arc i (None: a word arc no scored
    path holds; 0.0 for epsilon arcs), ``finals[s]`` the end-of-sentence cost at final state s."""

    arcs: List[Optional[float]]
    finals: Dict[int, float]

    @property
    def missing(self) -> int:
        return sum(c is None for c in self.arcs)


def arc_nn_costs(lat: Lattice, paths: Sequence[CoverPath],
                 path_costs: Sequence[Optional[Sequence[float]]]) -> ArcCosts:
    """Each word arc gets the NN cost of its word at its place in the first path (in the given
    order, best first) that holds it; each final state the end-of-sentence cost of the first
    path that ends there (estimate_arc_nnlm_scores.py, with arcs named by index and positions
    counted over word arcs only).

    path_costs[k]: per-token costs of paths[k] (its words, then end of sentence), or None for a
    path that was not scored (e.g. dropped by the old-LM removal); the next path holding an arc
    then gives its cost.
    """
    arcs: List[Optional[float]] = [0.0 if a.word == 0 else None for a in lat.arcs]
    finals: Dict[int, float] = {}
    for path, costs in zip(paths, path_costs):
        if costs is None:
            continue
        n_words = sum(1 for i in path.arcs if lat.arcs[i].word != 0)
        if len(costs) != n_words + 1:
            raise RescoreError(f"{n_words + 1} NN costs ({n_words} words + end of sentence) for a "
                               f"path of lattice '{lat.key}'", got=f"{len(costs)} costs")
        pos = 0
        for i in path.arcs:
            if lat.arcs[i].word == 0:
                continue
            if arcs[i] is None:
                arcs[i] = float(costs[pos])
            pos += 1
        finals.setdefault(path.end, float(costs[-1]))
    return ArcCosts(arcs, finals)


def add_nn_costs(lat: Lattice, costs: ArcCosts, scale: float) -> Lattice:
    """A copy of lat with ``scale * NN cost`` added to the graph cost of every word arc and
    final weight (Kaldi's lattice-add-nnlmscore --lm-scale). Arcs without a cost keep theirs."""
    arcs = [Arc(a.src, a.dst, a.word,
                a.graph + (scale * c if c is not None else 0.0), a.ac, a.ali)
            for a, c in zip(lat.arcs, costs.arcs)]
    finals = {s: (g + scale * costs.finals.get(s, 0.0), ac, ali)
              for s, (g, ac, ali) in lat.finals.items()}
    return Lattice(lat.key, lat.start, lat.num_states, arcs, finals)


# --------------------------------------------------------------------------------------------
# The two steps of the shell script


def check_scales(acoustic_scale: float, lm_scale: float, weight: Optional[float] = None) -> None:
    """The options of both steps: finite scales (acoustic > 0, LM >= 0), a weight in [0, 1]."""
    if not (math.isfinite(acoustic_scale) and acoustic_scale > 0):
        raise OptionError("a finite number > 0 (1 / inv_acwt)", option="--acoustic-scale",
                          got=str(acoustic_scale))
    if not (math.isfinite(lm_scale) and lm_scale >= 0):
        raise OptionError("a finite number >= 0", option="--lm-scale", got=str(lm_scale))
    if weight is not None and not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
        raise OptionError("a number in [0, 1]", option="--weight", got=str(weight))


@dataclass
class CoverStats:
    lattices: int = 0
    arcs: int = 0
    paths: int = 0
    uncovered: int = 0   # word arcs without an NN cost (apply)


def write_cover_nbest(lattices: Iterable[Lattice], out: PathLike, acoustic_scale: float,
                      lm_scale: float = 1.0) -> CoverStats:
    """The path cover of every lattice as an N-best archive: linear lattices keyed
    ``<utt>-<k>``, k = 1.. best first, what ``lattice-to-nbest`` would write for them (Kaldi's
    nbest-to-linear and the old-LM removal of lmrescore_nbest.sh read it)."""
    stats = CoverStats()

    def gen():
        for lat in lattices:
            paths = path_cover(lat, acoustic_scale, lm_scale)
            if not paths:
                log.warning("lattice '%s' has no complete path: no N-best entries", lat.key)
            stats.lattices += 1
            stats.arcs += len(lat.arcs)
            stats.paths += len(paths)
            for k, p in enumerate(paths, 1):
                yield path_lattice(lat, p, f"{lat.key}-{k}")

    write_lattices(out, gen())
    return stats


def nbest_costs_by_words(words: Mapping[str, Sequence[int]], nn_costs: Mapping[str, Sequence[float]],
                         source: PathLike = "lmwt.nn", words_source: PathLike = "words"
                         ) -> Dict[str, Dict[Tuple[int, ...], List[float]]]:
    """utt -> (word ids -> per-token NN costs) from an N-best archive dir's ``words`` and
    ``lmwt.nn`` (keys ``<utt>-<k>``). Matching by words survives the renumbering of entries
    that an old-LM removal with G.fst drops; equal words have equal costs (same start state)."""
    if not words:
        raise RescoreError("at least one N-best entry (the cover paths after rescore-nbest)",
                           path=words_source, got="an empty archive")
    out: Dict[str, Dict[Tuple[int, ...], List[float]]] = {}
    for key, w in words.items():
        utt, sep, rank = key.rpartition("-")
        if not sep or not rank.isdigit():
            raise RescoreError("N-best keys '<utt>-<rank>'", path=source, got=key)
        try:
            c = nn_costs[key]
        except KeyError:
            raise RescoreError(f"an NN cost for key '{key}'", path=source, got="none") from None
        if len(c) != len(w) + 1:
            raise RescoreError(f"per-token NN costs for key '{key}', {len(w) + 1} of them "
                               f"({len(w)} words + end of sentence, as rescore-nbest writes)",
                               path=source, got=f"{len(c)} costs")
        out.setdefault(utt, {})[tuple(w)] = list(c)
    extra = [k for k in nn_costs if k not in words]
    if extra:
        raise RescoreError("NN costs only for keys of the archive dir's words", path=source,
                           got=f"{len(extra)} other keys, e.g. '{extra[0]}'")
    return out


def rescore_lattices(lattices: Iterable[Lattice], costs: Mapping[str, Mapping[Tuple[int, ...], Sequence[float]]],
                     acoustic_scale: float, weight: float, lm_scale: float = 1.0,
                     stats: Optional[CoverStats] = None, source: PathLike = "words") -> Iterator[Lattice]:
    """Each lattice with ``weight *`` its estimated arc NN costs added (arc_nn_costs over the
    same path cover as write_cover_nbest). A lattice whose utterance has no scored path is
    passed through unchanged, with a warning (an old-LM removal with G.fst can drop them all).

    The costs must be those of these lattices' cover paths: an entry whose words are no cover
    path of its lattice, or of an utterance that is no lattice of the archive, is a RescoreError
    naming ``source`` (the archives of other lattices, or of `cover` with other scales)."""
    stats = stats if stats is not None else CoverStats()
    seen = set()
    for lat in lattices:
        paths = path_cover(lat, acoustic_scale, lm_scale)
        stats.lattices += 1
        stats.arcs += len(lat.arcs)
        stats.paths += len(paths)
        seen.add(lat.key)
        utt = costs.get(lat.key)
        if not utt:
            log.warning("lattice '%s': no NN costs for any of its paths, left as it is", lat.key)
            yield lat
            continue
        cover = {tuple(p.words(lat)) for p in paths}
        stray = [w for w in utt if w not in cover]
        if stray:
            raise RescoreError(f"N-best entries of '{lat.key}' that are paths of its path cover "
                               "(the archives of `rescore-lattice cover` on these lattices, with "
                               "the same --acoustic-scale and --lm-scale)", path=source,
                               got=f"{len(stray)} other word sequences, e.g. {list(stray[0])}")
        est = arc_nn_costs(lat, paths, [utt.get(tuple(p.words(lat))) for p in paths])
        if est.missing:
            log.warning("lattice '%s': %d word arcs lie on no scored path; they get no NN cost",
                        lat.key, est.missing)
            stats.uncovered += est.missing
        yield add_nn_costs(lat, est, weight)
    others = [u for u in costs if u not in seen]
    if others:
        raise RescoreError("N-best entries only of the lattices being rescored", path=source,
                           got=f"entries of {len(others)} utterances that are no lattice of the "
                               f"archive, e.g. '{others[0]}'")


# --------------------------------------------------------------------------------------------
# 1-best under many weights (tuning on rescored lattices)


def best_paths(lat: Lattice, acoustic_scales: Sequence[float], wips: Sequence[float],
               lm_scale: float = 1.0) -> List[Tuple[int, ...]]:
    """The 1-best word sequence of lat for every setting of the grid (acoustic scales outer,
    word insertion penalties inner): what ``lattice-add-penalty --word-ins-penalty=wip |
    lattice-best-path --acoustic-scale=a`` gives, for all settings in one pass (numpy over the
    grid). Cost of a path: lm_scale * graph + a * acoustic + wip * (number of words)."""
    a = np.repeat(np.asarray(acoustic_scales, dtype=np.float64), len(wips))   # (G,)
    p = np.tile(np.asarray(wips, dtype=np.float64), len(acoustic_scales))      # (G,)
    G = a.shape[0]
    if lat.start < 0 or not lat.finals:
        return [()] * G
    alpha = np.full((lat.num_states, G), np.inf)
    back = np.full((lat.num_states, G), -1, dtype=np.int64)
    alpha[lat.start] = 0.0
    out = lat.out_arcs()
    for s in topological_order(lat):
        if not np.isfinite(alpha[s]).any():
            continue
        for i in out[s]:
            arc = lat.arcs[i]
            c = alpha[s] + (lm_scale * arc.graph + a * arc.ac + (p if arc.word else 0.0))
            better = c < alpha[arc.dst]
            if better.any():
                alpha[arc.dst] = np.where(better, c, alpha[arc.dst])
                back[arc.dst] = np.where(better, i, back[arc.dst])
    finals = sorted(lat.finals)
    total = np.stack([alpha[f] + lm_scale * lat.finals[f][0] + a * lat.finals[f][1] for f in finals])
    end = np.asarray(finals)[np.argmin(total, axis=0)]   # (G,) first final on ties
    result = []
    for g in range(G):
        if not np.isfinite(total[:, g]).any():
            result.append(())
            continue
        words, s = [], int(end[g])
        while s != lat.start:
            arc = lat.arcs[int(back[s, g])]
            if arc.word:
                words.append(arc.word)
            s = arc.src
        result.append(tuple(reversed(words)))
    return result
