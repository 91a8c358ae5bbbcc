"""Decode audio with PocketSphinx and write Kaldi-style N-best lists with separate costs.

PocketSphinx (``pip install pocketsphinx``) ships an English acoustic model, a pronunciation
dictionary and a 3-gram LM, so it gives real first-pass N-best lists on any machine.  Its Python
API exposes no N-best with separate acoustic and LM scores, so we take its word lattice
(``Decoder.get_lattice().write()``, Sphinx text format, exact integer link scores) and run our
own search over it, scoring every path exactly as PocketSphinx's ``ps_lattice_bestpath`` does
(``rescore.asr.sphinx_lattice``: the scores, the search and the costs written).

Each utterance is decoded with a fresh front end (``reinit_feat``): PocketSphinx otherwise
carries noise and cepstral-mean estimates from one utterance to the next, and results would
depend on which process decoded what before.

The N-best dir's ``words.txt`` holds every word the decoder can say (its dictionary's words that
its LM knows, as the hypotheses write them), not only those of the N-best, so that a rescoring
LM's out-of-vocabulary penalty can count the recognizer's words it never saw.

This is the convention of the tts-wikitext2-dev benchmark (docs/benchmarks.md): ``inv_acwt`` 9.5,
``wip`` 0 with PocketSphinx's default weights.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import subprocess
import tempfile
import wave
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from rescore.asr.sphinx_lattice import (DecoderSettings, LatticeScorer, NbestEntry, base_word, costs, lattice_nbest,
                                        normalize_decoder_words, read_sphinx_lattice)
from rescore.errors import RescoreError, check
from rescore.io.files import atomic_output, write_json
from rescore.io.lines import iter_lines  # UTF-8 and gzip errors name the file and line
from rescore.io.outputs import check_output_dir
from rescore.progress import progress

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
PathLike = Union[str, Path]


@dataclass
class UttResult:
    """One utterance's N-best (normalized words, costs) and PocketSphinx's own 1-best."""

    utt: str
    hyps: List[Tuple[List[str], float, float, float]]  # (words, acwt, withlm, nolm)
    ps_hyp: List[str]  # PocketSphinx hyp(), normalized
    ps_raw_hyp: List[str]  # PocketSphinx hyp(), decoder words
    rank1_raw: List[str]  # our rank-1 decoder words
    n_frames: int = 0


def default_model_paths() -> Dict[str, str]:
    from pocketsphinx import get_model_path  # (lazy: pocketsphinx is the optional 'mini' extra)

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


_NO_SUCH_WORD = "no such word"  # (no LM word holds a space)


def dictionary_words(path: PathLike, fillers: Iterable[str] = (),
                     known: Optional[Callable[[str], bool]] = None) -> Set[str]:
    """The words a PocketSphinx pronunciation dictionary (``word phone phone ...`` a line) lets
    the decoder say, as the N-best writes them: alternative pronunciations folded (``read(2)``
    is ``read``), then normalized (normalize_decoder_words: ``a.m.`` gives ``a`` and ``m``).
    Comment lines (``##``, ``;;``), lines without a pronunciation (PocketSphinx skips them too),
    the ``fillers`` (``<s>``, ``<sil>``, noise words: never words of a hypothesis) and, with
    ``known``, the dictionary words for which it is false are left out."""
    skip = set(fillers)
    words: Set[str] = set()
    for _, line in iter_lines(path):
        fields = line.split()
        if len(fields) < 2 or fields[0].startswith(("##", ";;")):
            continue
        word = base_word(fields[0])
        if word not in skip and (known is None or known(word)):
            words.update(normalize_decoder_words([word]))
    if not words:
        raise RescoreError("a pronunciation dictionary ('word phone phone ...' lines) with words the LM knows",
                           path=path, got="none")
    return words


def recognizer_words(settings: DecoderSettings) -> Set[str]:
    """The words PocketSphinx can recognize, as the N-best writes them: those of its dictionary
    (--dict, else cmudict-en-us.dict) that its n-gram LM (--lm, else en-us.lm.bin) knows (the
    search leaves the others out: 72,266 of cmudict's 124,991 with en-us.lm.bin), without the
    acoustic model's fillers."""
    import pocketsphinx  # (lazy: pocketsphinx is the optional 'mini' extra)

    paths = default_model_paths()
    cfg = pocketsphinx.Config()
    cfg["logfn"] = os.devnull
    lm_path = settings.lm or paths["lm"]
    try:
        lm = pocketsphinx.NGramModel(cfg, pocketsphinx.LogMath(), lm_path)
    except (RuntimeError, ValueError) as e:
        raise RescoreError("an n-gram LM PocketSphinx reads (ARPA, DMP or binary)", path=lm_path, got=str(e)) from None
    unknown = lm.prob([_NO_SUCH_WORD])  # the score of a word the LM does not know
    return dictionary_words(settings.dict or paths["dict"], _filler_words(settings.hmm or paths["hmm"]),
                            known=lambda w: lm.prob([w]) != unknown)


class NbestDecoder:
    """A PocketSphinx decoder that returns N-best lists; one per process."""

    def __init__(self, settings: DecoderSettings, nbest: int = 100, search_n: Optional[int] = None):
        import pocketsphinx  # (lazy: pocketsphinx is the optional 'mini' extra)

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
            # (a scratch dir per utterance, removed at once: PocketSphinx writes lattices to a path)
            with tempfile.TemporaryDirectory(prefix="ps-lat-") as tmp:
                lat_path = os.path.join(tmp, "lat.txt")
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
    if not spec.rstrip().endswith("|"):
        _wav_frames(spec, spec, read=False)


def read_wav_pcm(spec: str, where: str) -> bytes:
    """16-bit mono 16 kHz PCM from a wav.scp value: a file name, or a command ending in ``|``."""
    if spec.rstrip().endswith("|"):
        data = subprocess.run(spec.rstrip()[:-1], shell=True, check=True, stdout=subprocess.PIPE).stdout
        src = __import__("io").BytesIO(data)
    else:
        src = spec
    return _wav_frames(src, where)


def _wav_frames(src, where: str, read: bool = True) -> bytes:
    """The PCM of a 16 kHz 16-bit mono WAV file (name or binary file object; b"" unless read);
    a RescoreError naming where if it is unreadable or of another format."""
    try:
        with wave.open(src, "rb") as w:
            if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise RescoreError(
                    "16 kHz 16-bit mono WAV", path=where,
                    got=f"{w.getframerate()} Hz, {w.getnchannels()} channels, {8 * w.getsampwidth()} bit",
                )
            return w.readframes(w.getnframes()) if read else b""
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
    """An OptionError naming the option for a value PocketSphinx would misuse, before any work."""
    for option, v in (("--lw", settings.lw), ("--fwdflatlw", settings.fwdflatlw),
                      ("--bestpathlw", settings.bestpathlw)):
        check(math.isfinite(v) and v > 0, "a finite LM weight > 0", option, v)
    check(math.isfinite(settings.wip) and 0 < settings.wip <= 1, "a word insertion probability in (0, 1]",
          "--wip", settings.wip)
    check(settings.maxhmmpf >= 1 or settings.maxhmmpf == -1, "an integer >= 1 (-1: no limit)",
          "--maxhmmpf", settings.maxhmmpf)
    check(isinstance(nbest, int) and nbest >= 1, "an integer >= 1", "--nbest", nbest)
    check(isinstance(nj, int) and nj >= 1, "an integer >= 1", "--nj", nj)


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
    ``lmwt.nolm`` (keys ``<utt>-<rank>``, rank 1..n in PocketSphinx score order), ``words.txt``
    (symbol_table: recognizer_words, with ``extra_words``, e.g. the references'),
    ``ps_1best.txt`` (PocketSphinx's own ``hyp()``, normalized) and ``decode.json`` (settings,
    ``inv_acwt``, ``wip`` and the rank-1 agreement).  Returns the decode.json dict.
    """
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
    lexicon = recognizer_words(settings)  # (a bad dictionary or LM fails before the decoding)
    log.info("decoding %d utterances of %s with %d jobs", len(utts), data_dir, nj)
    results: List[UttResult] = []
    if nj <= 1:
        _init_worker(settings, nbest)
        it: Iterator[UttResult] = map(_decode_one, utts)
        results = list(progress(it, total=len(utts), desc="decode", unit="utt"))
    else:
        ctx = mp.get_context("spawn" if os.name == "nt" else "fork")
        by_reco = sorted(utts, key=lambda u: (u.spec, u.start))
        with ctx.Pool(nj, initializer=_init_worker, initargs=(settings, nbest)) as pool:
            for r in progress(pool.imap(_decode_one, by_reco, chunksize=4), total=len(utts), desc="decode", unit="utt"):
                results.append(r)
        order = {u.utt: k for k, u in enumerate(utts)}
        results.sort(key=lambda r: order[r.utt])
    return write_nbest_dir(results, Path(out_dir), settings, extra_words, lexicon)


def _atomic_write(path: Path, lines: Iterable[str]) -> None:
    with atomic_output(path, "w") as f:
        for line in lines:
            f.write(line + "\n")


NON_WORDS = ("<eps>", "<s>", "</s>", "#0")  # words.txt's symbols that are no words of a sentence


def symbol_table(*word_sets: Iterable[str]) -> List[str]:
    """words.txt's symbols in id order: ``<eps>`` (0), the words of every set sorted (by code
    point, as ``LC_ALL=C sort``), then ``<s>``, ``</s>``, ``#0``, as Kaldi's lang dirs and the dev
    benchmark's lang/words.txt have them. A ``<unk>`` of the words (a reference's) sorts in
    with them; none is added."""
    vocab = {w for words in word_sets for w in words if w} - set(NON_WORDS)
    return [NON_WORDS[0]] + sorted(vocab) + list(NON_WORDS[1:])


def write_nbest_dir(
    results: Sequence[UttResult],
    out_dir: Path,
    settings: DecoderSettings,
    extra_words: Optional[Iterable[str]] = None,
    lexicon: Iterable[str] = (),
) -> Dict[str, object]:
    """Write decoded N-best lists in the Kaldi text layout (see :func:`decode_data_dir`);
    words.txt holds the words of the hypotheses, ``extra_words`` and ``lexicon`` (the
    recognizer's words: recognizer_words), so that a rescoring LM can count the recognizer's
    words it does not know (rescore-nbest --oov-penalty auto)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    symbols = symbol_table((w for r in results for h in r.hyps for w in h[0]), extra_words or (), lexicon)
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
    for r in results:  # a note, not a warning: bestpath may take the LM history across <sil> from a
        if r.rank1_raw != r.ps_raw_hyp:  # Viterbi back-pointer, while rank 1 is best under the lattice's costs
            log.info("%s: rank 1 differs from PocketSphinx's bestpath (%s | %s)",
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
