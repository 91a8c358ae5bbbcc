"""PocketSphinx's word lattice (``Decoder.get_lattice().write()``, Sphinx text format, exact
integer link scores), scored exactly as PocketSphinx's ``ps_lattice_bestpath`` does, and an
exact N-best search over it:

* a path's score, in PocketSphinx's integer units (log base 1.0001, shifted right by
  ``SENSCR_SHIFT`` = 10 bits, so one unit is ``1024 * ln(1.0001)`` nats), is the sum over its
  links of the link's acoustic score ``ascr`` (links entering a filler node carry the filler
  penalty: ``silpen`` for ``<sil>``, ``fillpen`` for noise words) plus, for every link entering a
  real word (or the final node, scored as ``</s>``), the LM term
  ``trunc(((int)(lw * raw + log(wip)) >> 10) * lwf)``, ``raw`` the 3-gram log-probability of the
  word given the previous two real words (fillers are transparent), ``lwf = bestpathlw / lw``;
* the final node's own acoustic score is the same for every path and left out.

An A* search over word prefixes with an exact heuristic (the best completion of every
(lattice node, previous word) state, computed backwards) pops complete hypotheses in score
order and never emits a word sequence twice, so the first N pops are the N best distinct
decoder word sequences.  Where PocketSphinx's own bestpath is exact (always, except where it
takes the LM history across a filler word from a Viterbi back-pointer), our first entry is its
``hyp()``; the command counts and logs any difference.

Costs written (natural log, negated; Kaldi's convention ``cost = acwt / inv_acwt + lmwt.withlm``
with ``inv_acwt = bestpathlw`` ranks exactly as PocketSphinx does, with word penalty 0):

* ``acwt``: ``-(sum of ascr - filler penalties) * 1024 * ln(1.0001)``, the acoustic cost;
* ``lmwt.withlm``: ``-(sum of LM terms + filler penalties) * 1024 * ln(1.0001) / bestpathlw``;
* ``lmwt.nolm``: the part of ``lmwt.withlm`` that is not the n-gram LM:
  ``(filler penalties + n_terms * lwf * -ln(wip)) / bestpathlw`` (in nats), ``n_terms`` = decoder
  words + 1 (the end of sentence), so ``lmwt.withlm - lmwt.nolm = -ln P_3gram(words </s>)`` up
  to PocketSphinx's integer rounding (under 0.016 nats a word: one score unit, ``lwf`` times,
  over ``bestpathlw``).

Two entries with equal integer scores are an exact tie (PocketSphinx's own pick among them is
an accident of its traversal order); the archives' 4-decimal rounding can then order their
costs either way, by at most 1e-4.  One integer unit is ``1024 * ln(1.0001) / 9.5 = 0.0108``
in cost, so no other order is affected.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from rescore.errors import RescoreError

SENSCR_SHIFT = 10
LOG_BASE = 1.0001
#: nats per PocketSphinx score unit (shifted log base 1.0001).
NATS_PER_UNIT = (1 << SENSCR_SHIFT) * math.log(LOG_BASE)


@dataclass
class DecoderSettings:
    """PocketSphinx search settings; defaults are PocketSphinx 5's, except the two noted."""

    lw: float = 6.5  # fwdtree LM weight (the LM's scores carry lw and wip)
    fwdflatlw: float = 8.5  # LM weight of the fwdflat pass (the lattice comes from it)
    bestpathlw: float = 9.5  # LM weight of the lattice search: inv_acwt in Kaldi terms
    wip: float = 0.65  # word insertion probability
    pip: float = 1.0  # phone insertion probability
    silprob: float = 0.005  # silence word probability
    fillprob: float = 1e-8  # noise word probability
    beam: float = 1e-48
    wbeam: float = 7e-29
    maxhmmpf: int = 10000  # PocketSphinx's default is 30000; 10000 caps the time per frame
    cmn: str = "batch"  # whole-utterance cepstral mean (PocketSphinx's default is "live")
    hmm: Optional[str] = None  # acoustic model dir; None = PocketSphinx's en-us
    dict: Optional[str] = None  # pronunciation dictionary; None = cmudict-en-us.dict
    lm: Optional[str] = None  # n-gram LM; None = en-us.lm.bin


@dataclass
class Lattice:
    """A PocketSphinx word lattice as ``Lattice.write`` leaves it (Sphinx text format).

    ``words[i]`` is node i's dictionary word (alternate pronunciations keep their ``(2)``),
    ``sf[i]`` its start frame; ``exits[i]`` lists ``(to_node, ascr)`` with ``ascr`` the link's
    acoustic score in shifted units (int, <= 0).
    """

    words: List[str]
    sf: List[int]
    start: int
    end: int
    exits: List[List[Tuple[int, int]]]


def read_sphinx_lattice(path: Path) -> Lattice:
    """Parse the Sphinx lattice format written by ``ps_lattice_write``."""
    lines = Path(path).read_text().splitlines()
    words: List[str] = []
    sf: List[int] = []
    start = end = -1
    exits: List[List[Tuple[int, int]]] = []
    i = 0
    try:
        while i < len(lines):
            line = lines[i]
            if line.startswith("Nodes "):
                n = int(line.split()[1])
                for k in range(n):
                    f = lines[i + 1 + k].split()
                    if int(f[0]) != k:
                        raise RescoreError(f"node {k}", path=path, line=i + 2 + k, got=lines[i + 1 + k])
                    words.append(f[1])
                    sf.append(int(f[2]))
                exits = [[] for _ in range(n)]
                i += n + 1
                continue
            if line.startswith("Initial "):
                start = int(line.split()[1])
            elif line.startswith("Final "):
                end = int(line.split()[1])
            elif line.startswith("Edges "):
                i += 1
                while i < len(lines) and lines[i] != "End":
                    a, b, s = lines[i].split()
                    # The file holds ascr << SENSCR_SHIFT: exact, so this shift is lossless.
                    exits[int(a)].append((int(b), int(s) >> SENSCR_SHIFT))
                    i += 1
            i += 1
    except (ValueError, IndexError) as e:
        raise RescoreError("a PocketSphinx lattice", path=path, line=i + 1, got=str(e)) from None
    if start < 0 or end < 0 or not words:
        raise RescoreError("Nodes, Initial and Final sections", path=path)
    return Lattice(words, sf, start, end, exits)


_ALT_PRON = re.compile(r"\(\d+\)$")


def base_word(word: str) -> str:
    """Dictionary word without its alternate-pronunciation marker: ``read(2)`` -> ``read``."""
    return _ALT_PRON.sub("", word)


def normalize_decoder_words(words: Sequence[str]) -> List[str]:
    """Map decoder words to the reference normalization (lowercase ``[a-z']`` tokens).

    cmudict has ``a.m.``, ``able-bodied``, ``m.``: split them at ``.``, ``-``, ``_``.
    """
    out: List[str] = []
    for w in words:
        out.extend(t for t in re.split(r"[.\-_]+", w.lower()) if t)
    return out


@dataclass
class PathScore:
    """Integer score parts of a path (PocketSphinx shifted units; higher is better)."""

    total: int
    ascr: int  # sum of link acoustic scores, filler penalties included
    fillpen: int  # the filler penalties inside ascr
    lm: int  # sum of LM terms
    n_terms: int  # LM terms: words + final node


@dataclass
class NbestEntry:
    """One distinct decoder word sequence with its score parts."""

    words: List[str]  # decoder base words (fillers, <s>, </s> removed)
    score: PathScore


class LatticeScorer:
    """PocketSphinx's bestpath scoring: LM terms and filler penalties, in shifted units."""

    def __init__(self, lm, logmath, settings: DecoderSettings, fillers: Iterable[str]):
        self._lm = lm
        self.fillers = set(fillers)
        self._lw = np.float32(settings.lw)
        self._log_wip = logmath.log(settings.wip)  # unshifted int, as ngram_model_apply_weights
        # float32, as ngram_search_calc_beams stores the ratio.
        self._lwf = np.float32(settings.bestpathlw / settings.lw)
        pip = logmath.log(settings.pip) >> SENSCR_SHIFT
        self.silpen = pip + (logmath.log(settings.silprob) >> SENSCR_SHIFT)
        self.fillpen = pip + (logmath.log(settings.fillprob) >> SENSCR_SHIFT)
        self._cache: Dict[Tuple[str, ...], int] = {}

    def lm_term(self, word: str, hist: Tuple[str, ...]) -> int:
        """LM term for ``word`` after ``hist`` (most recent first, 1 or 2 words)."""
        key = (word,) + hist
        t = self._cache.get(key)
        if t is None:
            raw = self._lm.prob(list(key))  # ngram_prob: unweighted log prob, base 1.0001
            # ngram_model_trie's weight_score: (int32)(raw * lw + log_wip) in float32.
            scr = int(np.float32(raw) * self._lw + np.float32(self._log_wip))
            t = int(np.float32(scr >> SENSCR_SHIFT) * self._lwf)  # C truncates toward zero
            self._cache[key] = t
        return t

    def penalty(self, word: str) -> int:
        return self.silpen if base_word(word) == "<sil>" else self.fillpen


def lattice_nbest(lat: Lattice, scorer: LatticeScorer, n: int, max_pops: int = 20000) -> List[NbestEntry]:
    """The ``n`` best distinct word sequences of ``lat`` under PocketSphinx's bestpath score."""
    lm_word, out_word, is_fil = _word_roles(lat, scorer.fillers)
    order = sorted(range(len(lat.words)), key=lambda i: lat.sf[i])
    closure = _filler_closure(lat, scorer, is_fil, order)
    h = _best_completions(lat, scorer, lm_word, closure, order)
    if (lat.start, None) not in h:
        return []
    return _astar(lat, scorer, lm_word, out_word, closure, h, n, max_pops)


State = Tuple[int, Optional[str]]  # (lattice node, previous real word)
Closure = Dict[int, Dict[int, Tuple[int, int]]]  # node -> {non-filler node: (ascr, fillpen)}


def _word_roles(lat: Lattice, fillers) -> Tuple[List[str], List[Optional[str]], List[bool]]:
    """Per node: the word the LM scores, the word a hypothesis spells (None: none), whether it is
    a filler the search passes through."""
    nn = len(lat.words)
    base = [base_word(w) for w in lat.words]
    is_fil = [base[i] in fillers and i not in (lat.start, lat.end) for i in range(nn)]
    # The final node is scored as </s> when it is a filler (ngram_search_lattice's "minor hack").
    lm_word = list(base)
    if base[lat.end] in fillers:
        lm_word[lat.end] = "</s>"
    out_word: List[Optional[str]] = [None if (b in fillers or b in ("<s>", "</s>")) else b for b in base]
    if lat.end != lat.start and base[lat.end] in fillers:
        out_word[lat.end] = None
    return lm_word, out_word, is_fil


def _filler_closure(lat: Lattice, scorer: LatticeScorer, is_fil: List[bool], order: List[int]) -> Closure:
    """From node i, the best (ascr, fillpen) to each non-filler node reachable through zero or
    more filler nodes.  Fillers leave the LM history unchanged, so only the best filler chain per
    target can be on a best path."""
    closure: Closure = {}

    def reach(i: int) -> Dict[int, Tuple[int, int]]:
        if i in closure:
            return closure[i]
        best: Dict[int, Tuple[int, int]] = {}
        for j, a in lat.exits[i]:
            if is_fil[j]:
                pen = scorer.penalty(lat.words[j])  # already inside a: ascr carries it
                for k, (a2, p2) in reach(j).items():
                    cand = (a + a2, pen + p2)
                    if k not in best or cand[0] > best[k][0]:
                        best[k] = cand
            else:
                if j not in best or a > best[j][0]:
                    best[j] = (a, 0)
        closure[i] = best
        return best

    for i in reversed(order):  # fill bottom-up so recursion stays shallow
        reach(i)
    return closure


def _hist(lat: Lattice, lm_word: List[str], state: State) -> Tuple[str, ...]:
    """The LM history at a state: (lm_word[node], previous real word), or <s> at the start."""
    node, prev = state
    return ("<s>",) if node == lat.start else (lm_word[node], prev)  # type: ignore[return-value]


def _best_completions(lat: Lattice, scorer: LatticeScorer, lm_word: List[str], closure: Closure,
                      order: List[int]) -> Dict[State, int]:
    """The exact best completion score of every reachable state (the A* heuristic)."""
    # Forward: reachable states.
    states_at: Dict[int, set] = {lat.start: {None}}
    for i in order:
        if i not in states_at or i == lat.end:
            continue
        for j in closure[i]:
            states_at.setdefault(j, set()).update({lm_word[i]})
    # Backward: exact best completion h(state).
    h: Dict[State, int] = {}
    for i in reversed(order):
        if i not in states_at:
            continue
        for prev in states_at[i]:
            s = (i, prev)
            if i == lat.end:
                h[s] = 0
                continue
            hs = _hist(lat, lm_word, s)
            best = None
            for j, (a, _p) in closure[i].items():
                hj = h.get((j, lm_word[i]))
                if hj is None:  # a dead end (links with positive ascr are not written)
                    continue
                v = a + scorer.lm_term(lm_word[j], hs) + hj
                if best is None or v > best:
                    best = v
            if best is not None:
                h[s] = best
    return h


def _astar(lat: Lattice, scorer: LatticeScorer, lm_word: List[str], out_word: List[Optional[str]],
           closure: Closure, h: Dict[State, int], n: int, max_pops: int) -> List[NbestEntry]:
    """A* over word prefixes.  An item's map holds, per state, the best parts of any path that
    spells the prefix; its priority is the exact best completion, so complete items pop in
    score order and each word sequence is produced once."""
    start_state = (lat.start, None)
    zero = PathScore(0, 0, 0, 0, 0)
    heap: List[tuple] = []
    counter = 0
    heapq.heappush(heap, (-h[start_state], counter, (), {start_state: zero}, False))
    results: List[NbestEntry] = []
    pops = 0
    while heap and len(results) < n and pops < max_pops:
        negp, _, prefix, smap, complete = heapq.heappop(heap)
        pops += 1
        if complete:
            results.append(NbestEntry(list(prefix), smap))
            continue
        groups, finals = _extend(lat, scorer, lm_word, out_word, closure, prefix, smap)
        for words, ps_ in finals.items():
            counter += 1
            heapq.heappush(heap, (-ps_.total, counter, words, ps_, True))
        for label, nmap in groups.items():
            nmap = {s: g for s, g in nmap.items() if s in h}
            if not nmap:
                continue
            pri = max(g.total + h[s] for s, g in nmap.items())
            counter += 1
            heapq.heappush(heap, (-pri, counter, prefix + ((label,) if label else ()), nmap, False))
    return results


def _extend(lat: Lattice, scorer: LatticeScorer, lm_word: List[str], out_word: List[Optional[str]],
            closure: Closure, prefix: Tuple[str, ...], smap: Dict[State, PathScore]
            ) -> Tuple[Dict[Optional[str], Dict[State, PathScore]], Dict[Tuple[str, ...], PathScore]]:
    """One word more after ``prefix``: the best parts per next state grouped by the word spelled,
    and the complete hypotheses (the final node reached) with their best parts."""
    groups: Dict[Optional[str], Dict[State, PathScore]] = {}
    finals: Dict[Tuple[str, ...], PathScore] = {}
    for s, g in smap.items():
        node = s[0]
        hs = _hist(lat, lm_word, s)
        for j, (a, p) in closure[node].items():
            t = scorer.lm_term(lm_word[j], hs)
            ps_ = PathScore(g.total + a + t, g.ascr + a, g.fillpen + p, g.lm + t, g.n_terms + 1)
            if j == lat.end:
                words = prefix + ((out_word[j],) if out_word[j] else ())
                if words not in finals or ps_.total > finals[words].total:
                    finals[words] = ps_
                continue
            ns = (j, lm_word[node] if node != lat.start else "<s>")
            label = out_word[j]
            grp = groups.setdefault(label, {})
            if ns not in grp or ps_.total > grp[ns].total:
                grp[ns] = ps_
    return groups, finals


def costs(ps_: PathScore, settings: DecoderSettings) -> Tuple[float, float, float]:
    """(acwt, lmwt.withlm, lmwt.nolm) in nats from a path's integer parts (module docstring)."""
    acwt = -(ps_.ascr - ps_.fillpen) * NATS_PER_UNIT
    withlm = -(ps_.lm + ps_.fillpen) * NATS_PER_UNIT / settings.bestpathlw
    lwf = settings.bestpathlw / settings.lw
    nolm = (-ps_.fillpen * NATS_PER_UNIT + ps_.n_terms * lwf * -math.log(settings.wip)) / settings.bestpathlw
    return acwt, withlm, nolm
