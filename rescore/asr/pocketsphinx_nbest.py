"""Decode audio with PocketSphinx and write Kaldi-style N-best lists with separate costs.

PocketSphinx (``pip install pocketsphinx``) ships an English acoustic model, a pronunciation
dictionary and a 3-gram LM, so it gives real first-pass N-best lists on any machine.  Its Python
API exposes no N-best with separate acoustic and LM scores, so we take its word lattice
(``Decoder.get_lattice().write()``, Sphinx text format, exact integer link scores) and run our
own search over it, scoring every path exactly as PocketSphinx's ``ps_lattice_bestpath`` does:

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

Each utterance is decoded with a fresh front end (``reinit_feat``): PocketSphinx otherwise
carries noise and cepstral-mean estimates from one utterance to the next, and results would
depend on which process decoded what before.

This is the convention of ``../shared/data/tts-wikitext2-dev`` (its README): ``inv_acwt`` 9.5,
``wip`` 0 with PocketSphinx's default weights.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import re
import subprocess
import tempfile
import wave
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from rescore.errors import OptionError, RescoreError
from rescore.io.files import write_json

log = logging.getLogger(__name__)

SENSCR_SHIFT = 10
LOG_BASE = 1.0001
#: nats per PocketSphinx score unit (shifted log base 1.0001).
NATS_PER_UNIT = (1 << SENSCR_SHIFT) * math.log(LOG_BASE)
SAMPLE_RATE = 16000


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
    fillers = scorer.fillers
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

    # Filler closure: from node i, the best (ascr, fillpen) to each non-filler node reachable
    # through zero or more filler nodes.  Fillers leave the LM history unchanged, so only the
    # best filler chain per target can be on a best path.
    order = sorted(range(nn), key=lambda i: lat.sf[i])
    closure: Dict[int, Dict[int, Tuple[int, int]]] = {}

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

    # States: (node, previous real word); the LM history at node i is (lm_word[i], prev).
    def hist(state: Tuple[int, Optional[str]]) -> Tuple[str, ...]:
        node, prev = state
        return ("<s>",) if node == lat.start else (lm_word[node], prev)  # type: ignore[return-value]

    # Forward: reachable states.
    states_at: Dict[int, set] = {lat.start: {None}}
    for i in order:
        if i not in states_at or i == lat.end:
            continue
        for j in closure[i]:
            states_at.setdefault(j, set()).update({lm_word[i]})
    # Backward: exact best completion h(state).
    h: Dict[Tuple[int, Optional[str]], int] = {}
    for i in reversed(order):
        if i not in states_at:
            continue
        for prev in states_at[i]:
            s = (i, prev)
            if i == lat.end:
                h[s] = 0
                continue
            hs = hist(s)
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
    start_state = (lat.start, None)
    if start_state not in h:
        return []

    # A* over word prefixes.  An item's map holds, per state, the best parts of any path that
    # spells the prefix; its priority is the exact best completion, so complete items pop in
    # score order and each word sequence is produced once.
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
        groups: Dict[Optional[str], Dict[Tuple[int, Optional[str]], PathScore]] = {}
        finals: Dict[Tuple[str, ...], PathScore] = {}
        for s, g in smap.items():
            node = s[0]
            hs = hist(s)
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


# ----------------------------------------------------------------------------------------
# Decoding


@dataclass
class UttResult:
    """One utterance's N-best (normalized words, costs) and PocketSphinx's own 1-best."""

    utt: str
    hyps: List[Tuple[List[str], float, float, float]]  # (words, acwt, withlm, nolm)
    ps_hyp: List[str]  # PocketSphinx hyp(), normalized
    ps_raw_hyp: List[str]  # PocketSphinx hyp(), decoder words
    rank1_raw: List[str]  # our rank-1 decoder words
    n_frames: int = 0


def costs(ps_: PathScore, settings: DecoderSettings) -> Tuple[float, float, float]:
    """(acwt, lmwt.withlm, lmwt.nolm) in nats from a path's integer parts (module docstring)."""
    acwt = -(ps_.ascr - ps_.fillpen) * NATS_PER_UNIT
    withlm = -(ps_.lm + ps_.fillpen) * NATS_PER_UNIT / settings.bestpathlw
    lwf = settings.bestpathlw / settings.lw
    nolm = (-ps_.fillpen * NATS_PER_UNIT + ps_.n_terms * lwf * -math.log(settings.wip)) / settings.bestpathlw
    return acwt, withlm, nolm


def default_model_paths() -> Dict[str, str]:
    from pocketsphinx import get_model_path

    m = get_model_path()
    return {
        "hmm": os.path.join(m, "en-us", "en-us"),
        "dict": os.path.join(m, "en-us", "cmudict-en-us.dict"),
        "lm": os.path.join(m, "en-us", "en-us.lm.bin"),
    }


def _filler_words(hmm_dir: str) -> List[str]:
    words = ["<s>", "</s>", "<sil>"]
    nd = Path(hmm_dir) / "noisedict"
    if nd.exists():
        words += [ln.split()[0] for ln in nd.read_text().splitlines() if ln.strip()]
    return sorted(set(words))


class NbestDecoder:
    """A PocketSphinx decoder that returns N-best lists; one per process."""

    def __init__(self, settings: DecoderSettings, nbest: int = 100, search_n: Optional[int] = None):
        import pocketsphinx

        self.settings = settings
        self.nbest = nbest
        self.search_n = search_n or nbest + max(20, nbest // 5)
        paths = default_model_paths()
        cfg = pocketsphinx.Config()
        cfg["hmm"] = settings.hmm or paths["hmm"]
        cfg["dict"] = settings.dict or paths["dict"]
        cfg["lm"] = settings.lm or paths["lm"]
        for k in ("lw", "fwdflatlw", "bestpathlw", "wip", "pip", "silprob", "fillprob", "beam", "wbeam"):
            cfg[k] = float(getattr(settings, k))
        cfg["maxhmmpf"] = int(settings.maxhmmpf)
        cfg["cmn"] = settings.cmn
        cfg["fwdflat"] = True
        cfg["bestpath"] = True
        cfg["logfn"] = os.devnull
        self._ps = pocketsphinx.Decoder(cfg)
        self.scorer = LatticeScorer(
            self._ps.get_lm(), self._ps.logmath, settings, _filler_words(cfg["hmm"])
        )
        self._tmp = tempfile.mkdtemp(prefix="ps-lat-")

    def decode(self, utt: str, pcm: bytes) -> UttResult:
        """Decode 16 kHz 16-bit mono PCM (little-endian bytes) into an N-best list."""
        d = self._ps
        # A fresh front end per utterance: otherwise its noise and CMN estimates carry over from
        # the previous utterance and the result depends on which process decoded what before.
        d.reinit_feat()
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        raw_hyp = hyp.hypstr.split() if hyp is not None and hyp.hypstr else []
        entries: List[NbestEntry] = []
        if hyp is not None:
            lat_path = os.path.join(self._tmp, "lat.txt")
            try:
                d.get_lattice().write(lat_path)
                entries = lattice_nbest(read_sphinx_lattice(Path(lat_path)), self.scorer, self.search_n)
            except RuntimeError as e:  # no lattice (e.g. silence): keep PocketSphinx's hyp
                log.warning("%s: no lattice (%s)", utt, e)
        hyps: List[Tuple[List[str], float, float, float]] = []
        seen = set()
        for e in entries:
            words = normalize_decoder_words(e.words)
            key = tuple(words)
            if key in seen:
                continue
            seen.add(key)
            hyps.append((words,) + costs(e.score, self.settings))
            if len(hyps) == self.nbest:
                break
        if not hyps:
            log.warning("%s: empty N-best; writing PocketSphinx's hypothesis with zero costs", utt)
            hyps.append((normalize_decoder_words(raw_hyp), 0.0, 0.0, 0.0))
        return UttResult(
            utt,
            hyps,
            normalize_decoder_words(raw_hyp),
            raw_hyp,
            entries[0].words if entries else raw_hyp,
            d.n_frames() if hasattr(d, "n_frames") else 0,
        )


# ----------------------------------------------------------------------------------------
# Kaldi data dirs: wav.scp (+ segments)


def _read_table(path: Path, min_fields: int) -> List[List[str]]:
    from rescore.io.kaldi import iter_lines  # UTF-8 and gzip errors name the file and line

    rows = []
    for ln, line in iter_lines(path):
        if not line.strip():
            continue
        f = line.split(None, min_fields - 1) if min_fields == 2 else line.split()
        if len(f) < min_fields:
            raise RescoreError(f"at least {min_fields} fields", path=path, line=ln, got=line)
        rows.append(f)
    return rows


def check_wav(spec: str) -> None:
    """Fail early, in the main process, on a missing or wrongly formatted WAV file."""
    if spec.rstrip().endswith("|"):
        return
    try:
        with wave.open(spec, "rb") as w:
            if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise RescoreError(
                    "16 kHz 16-bit mono WAV", path=spec,
                    got=f"{w.getframerate()} Hz, {w.getnchannels()} channels, {8 * w.getsampwidth()} bit",
                )
    except (wave.Error, EOFError, OSError) as e:
        raise RescoreError("a readable WAV file", path=spec, got=str(e)) from None


def read_wav_pcm(spec: str, where: str) -> bytes:
    """16-bit mono 16 kHz PCM from a wav.scp value: a file name, or a command ending in ``|``."""
    if spec.rstrip().endswith("|"):
        data = subprocess.run(spec.rstrip()[:-1], shell=True, check=True, stdout=subprocess.PIPE).stdout
        src = __import__("io").BytesIO(data)
    else:
        src = spec
    try:
        with wave.open(src, "rb") as w:
            if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise RescoreError(
                    "16 kHz 16-bit mono WAV", path=where,
                    got=f"{w.getframerate()} Hz, {w.getnchannels()} channels, {8 * w.getsampwidth()} bit",
                )
            return w.readframes(w.getnframes())
    except (wave.Error, EOFError, OSError) as e:
        raise RescoreError("a readable WAV file", path=where, got=str(e)) from None


@dataclass
class UttAudio:
    utt: str
    spec: str  # wav.scp value
    start: float = 0.0
    end: float = -1.0  # seconds; -1 = to the end of the recording


def list_utterances(data_dir: Path) -> List[UttAudio]:
    """Utterances of a Kaldi data dir: ``segments`` over ``wav.scp``, else one per recording."""
    data_dir = Path(data_dir)
    scp = data_dir / "wav.scp"
    if not scp.exists():
        raise RescoreError("a Kaldi data dir with wav.scp", path=scp)
    wavs: Dict[str, str] = {}
    for ln, row in enumerate(_read_table(scp, 2), 1):
        if row[0] in wavs:
            raise RescoreError("unique recording ids", path=scp, line=ln, got=row[0])
        wavs[row[0]] = row[1]
    seg = data_dir / "segments"
    if not seg.exists():
        return [UttAudio(r, s) for r, s in sorted(wavs.items())]
    out = []
    for ln, row in enumerate(_read_table(seg, 4), 1):
        utt, reco = row[0], row[1]
        if reco not in wavs:
            raise RescoreError("a recording id of wav.scp", path=seg, line=ln, got=reco)
        try:
            start, end = float(row[2]), float(row[3])
            if not (math.isfinite(start) and math.isfinite(end) and 0 <= start
                    and (end > start or end == -1)):
                raise ValueError
        except ValueError:
            raise RescoreError("start and end times in seconds, 0 <= start < end (end -1: to the "
                               "end of the recording)", path=seg, line=ln, got=" ".join(row)) from None
        out.append(UttAudio(utt, wavs[reco], start, end))
    return sorted(out, key=lambda u: u.utt)


_WORKER: Optional[NbestDecoder] = None
_PCM_CACHE: Dict[str, bytes] = {}


def _init_worker(settings: DecoderSettings, nbest: int) -> None:
    global _WORKER
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _WORKER = NbestDecoder(settings, nbest)


def _decode_one(u: UttAudio) -> UttResult:
    assert _WORKER is not None
    pcm = _PCM_CACHE.get(u.spec)
    if pcm is None:
        _PCM_CACHE.clear()  # utterances of one recording come together: keep one recording
        pcm = read_wav_pcm(u.spec, u.spec)
        _PCM_CACHE[u.spec] = pcm
    a = int(round(u.start * SAMPLE_RATE)) * 2
    b = len(pcm) if u.end < 0 else int(round(u.end * SAMPLE_RATE)) * 2
    return _WORKER.decode(u.utt, pcm[a:b])


NBEST_OUTPUTS = ("words.txt", "words_text", "words", "acwt", "lmwt.withlm", "lmwt.nolm",
                 "ps_1best.txt", "decode.json")


def check_settings(settings: DecoderSettings, nbest: int, nj: int) -> None:
    """A RescoreError naming the option for a value PocketSphinx would misuse, before any work."""
    def need(option, value, ok, expected):
        if not ok:
            raise OptionError(expected, option=option, got=str(value))

    for option, v in (("--lw", settings.lw), ("--fwdflatlw", settings.fwdflatlw),
                      ("--bestpathlw", settings.bestpathlw)):
        need(option, v, math.isfinite(v) and v > 0, "a finite LM weight > 0")
    need("--wip", settings.wip, math.isfinite(settings.wip) and 0 < settings.wip <= 1,
         "a word insertion probability in (0, 1]")
    need("--maxhmmpf", settings.maxhmmpf, settings.maxhmmpf >= 1 or settings.maxhmmpf == -1,
         "an integer >= 1 (-1: no limit)")
    need("--nbest", nbest, isinstance(nbest, int) and nbest >= 1, "an integer >= 1")
    need("--nj", nj, isinstance(nj, int) and nj >= 1, "an integer >= 1")


def decode_data_dir(
    data_dir: Path,
    out_dir: Path,
    settings: Optional[DecoderSettings] = None,
    nbest: int = 100,
    nj: int = 2,
    extra_words: Optional[Iterable[str]] = None,
) -> Dict[str, object]:
    """Decode every utterance of ``data_dir`` and write a Kaldi-style N-best dir to ``out_dir``.

    Writes ``words_text``, ``words`` (ids of ``words.txt``), ``acwt``, ``lmwt.withlm``,
    ``lmwt.nolm`` (keys ``<utt>-<rank>``, rank 1..n in PocketSphinx score order), ``words.txt``,
    ``ps_1best.txt`` (PocketSphinx's own ``hyp()``, normalized) and ``decode.json`` (settings,
    ``inv_acwt``, ``wip`` and the rank-1 agreement).  Returns the decode.json dict.
    """
    from rescore.progress import progress

    from rescore.io.outputs import check_output_dir

    settings = settings or DecoderSettings()
    check_settings(settings, nbest, nj)
    check_output_dir(out_dir, "OUT_DIR", names=NBEST_OUTPUTS,
                     inputs=[p for p in Path(data_dir).iterdir() if p.is_file()]
                     if Path(data_dir).is_dir() else ())
    utts = list_utterances(data_dir)
    if not utts:
        raise RescoreError("at least one utterance", path=Path(data_dir) / "wav.scp")
    for spec in sorted({u.spec for u in utts}):
        check_wav(spec)
    log.info("decoding %d utterances of %s with %d jobs", len(utts), data_dir, nj)
    results: List[UttResult] = []
    if nj <= 1:
        _init_worker(settings, nbest)
        it: Iterator[UttResult] = map(_decode_one, utts)
        results = list(progress(it, total=len(utts), desc="decode", unit="utt"))
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn" if os.name == "nt" else "fork")
        by_reco = sorted(utts, key=lambda u: (u.spec, u.start))
        with ctx.Pool(nj, initializer=_init_worker, initargs=(settings, nbest)) as pool:
            for r in progress(pool.imap(_decode_one, by_reco, chunksize=4), total=len(utts), desc="decode", unit="utt"):
                results.append(r)
        order = {u.utt: k for k, u in enumerate(utts)}
        results.sort(key=lambda r: order[r.utt])
    return write_nbest_dir(results, Path(out_dir), settings, extra_words)


def _atomic_write(path: Path, lines: Iterable[str]) -> None:
    from rescore.io.files import atomic_output

    with atomic_output(path, "w") as f:
        for line in lines:
            f.write(line + "\n")


def write_nbest_dir(
    results: Sequence[UttResult],
    out_dir: Path,
    settings: DecoderSettings,
    extra_words: Optional[Iterable[str]] = None,
) -> Dict[str, object]:
    """Write decoded N-best lists in the Kaldi text layout (see :func:`decode_data_dir`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = {w for r in results for h in r.hyps for w in h[0]}
    vocab.update(w for w in (extra_words or ()) if w)
    vocab -= {"<eps>", "<s>", "</s>", "#0"}
    symbols = ["<eps>"] + sorted(vocab) + ["<s>", "</s>", "#0"]
    ids = {w: i for i, w in enumerate(symbols)}
    keys = [(f"{r.utt}-{k}", h) for r in results for k, h in enumerate(r.hyps, 1)]
    _atomic_write(out_dir / "words.txt", (f"{w} {i}" for i, w in enumerate(symbols)))
    _atomic_write(out_dir / "words_text", (" ".join([k] + h[0]) for k, h in keys))
    _atomic_write(out_dir / "words", (" ".join([k] + [str(ids[w]) for w in h[0]]) for k, h in keys))
    _atomic_write(out_dir / "acwt", (f"{k} {h[1]:.4f}" for k, h in keys))
    _atomic_write(out_dir / "lmwt.withlm", (f"{k} {h[2]:.4f}" for k, h in keys))
    _atomic_write(out_dir / "lmwt.nolm", (f"{k} {h[3]:.4f}" for k, h in keys))
    _atomic_write(out_dir / "ps_1best.txt", (" ".join([r.utt] + r.ps_hyp) for r in results))
    agree = sum(r.rank1_raw == r.ps_raw_hyp for r in results)
    for r in results:
        if r.rank1_raw != r.ps_raw_hyp:
            log.warning("%s: rank 1 differs from PocketSphinx's bestpath (%s | %s)",
                        r.utt, " ".join(r.rank1_raw), " ".join(r.ps_raw_hyp))
    info: Dict[str, object] = {
        "decoder": "pocketsphinx",
        "settings": asdict(settings),
        "inv_acwt": settings.bestpathlw,
        "wip": 0.0,
        "num_utts": len(results),
        "num_hyps": len(keys),
        "rank1_equals_pocketsphinx": agree,
        "cost_convention": "cost = acwt / inv_acwt + lmwt.withlm ranks as PocketSphinx's bestpath",
    }
    write_json(out_dir / "decode.json", info)
    log.info("wrote %d hypotheses of %d utterances to %s; rank 1 = PocketSphinx's 1-best for %d",
             len(keys), len(results), out_dir, agree)
    return info
