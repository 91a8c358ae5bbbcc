"""Text to speech: a text file of sentences to a Kaldi data dir of 16 kHz mono recordings.

Uses Debian's ``flite`` (``apt-get install flite``), whose built-in voices rms, awb, slt and kal16
speak 16 kHz 16-bit mono: no resampling needed.  These four gave the lowest PocketSphinx WER
in the tts-wikitext2-dev benchmark (espeak-ng was far worse), so they are the
default voice cycle.

One document is one recording (its sentences in order, ``gap`` seconds of silence between
them) spoken by one voice, voices cycling across documents: ``segments`` then groups the
utterances of a document into one conversation, which is what state carry needs.

With ``snrs``, pink noise (sox's ``synth pinknoise``, ``apt-get install sox``) is added to each
document at a signal-to-noise ratio that cycles across documents like the voices do; the noise
of an utterance is scaled to its own speech power, so every utterance of a document is heard at
the document's SNR.  sox runs in its repeatable mode (``-R``, a fixed seed), so the same text
gives the same audio on every run.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import tempfile
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from rescore.errors import OptionError, RescoreError
from rescore.io.files import atomic_output
from rescore.io.lines import iter_lines  # UTF-8 and gzip errors name the file and line
from rescore.io.outputs import check_output_dir
from rescore.progress import progress

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
DEFAULT_VOICES = ("rms", "awb", "slt", "kal16")
CLEAN = "clean"  # an SNR of snrs that adds no noise


@dataclass
class Document:
    """A document id and its sentences (lists of words)."""

    doc_id: str
    sentences: List[List[str]]


def read_documents(text: Path, docids: Optional[Path] = None) -> List[Document]:
    """Sentences of ``text`` (one a line) grouped into documents.

    With ``docids`` (one document id a line, as ``wikitext2-asr/*.docids``) lines with equal
    ids form a document; without it, blank lines separate documents.
    """
    lines = [line for _, line in iter_lines(text)]
    docs: List[Document] = []
    if docids is not None:
        ids = [w for _, line in iter_lines(docids) for w in line.split()]
        if len(ids) != len(lines):
            raise RescoreError(f"{len(lines)} document ids (one per line of {text})", path=docids, got=str(len(ids)))
        for n, (line, d) in enumerate(zip(lines, ids), 1):
            if "/" in d:
                raise RescoreError("document ids without '/' (they name files)", path=docids,
                                   got=d)
            if not line.strip():
                continue
            if not docs or docs[-1].doc_id != d:
                docs.append(Document(d, []))
            docs[-1].sentences.append(line.split())
    else:
        cur: List[List[str]] = []
        for line in lines + [""]:
            if line.strip():
                cur.append(line.split())
            elif cur:
                docs.append(Document(f"{len(docs):04d}", cur))
                cur = []
    if not docs:
        raise RescoreError("at least one sentence", path=text)
    return docs


def check_flite() -> str:
    """Path of the flite binary, or a clear error naming the install command."""
    exe = shutil.which("flite")
    if exe is None:
        raise RescoreError("the flite text-to-speech program (Debian: apt-get install -y flite)", path="flite")
    return exe


def synthesize(sentence: str, voice: str, flite: str = "flite") -> np.ndarray:
    """Speak one sentence with a flite voice: (T,) int16 samples at 16 kHz."""
    with tempfile.TemporaryDirectory() as tmp:
        txt, wav = os.path.join(tmp, "s.txt"), os.path.join(tmp, "s.wav")
        Path(txt).write_text(sentence + "\n")
        subprocess.run([flite, "-voice", voice, "-f", txt, "-o", wav], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with wave.open(wav, "rb") as w:
            if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise RescoreError(f"a 16 kHz 16-bit mono voice (flite voice {voice})", path=wav,
                                   got=f"{w.getframerate()} Hz, {w.getnchannels()} ch")
            return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()


def _write_wav(path: Path, samples: np.ndarray) -> None:
    with atomic_output(path, "wb") as f, wave.open(f, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.astype("<i2").tobytes())


def _write_table(path: Path, rows: Sequence[str]) -> None:
    with atomic_output(path, "w") as f:
        f.write("".join(r + "\n" for r in rows))


OUTPUTS = ("wav.scp", "segments", "text", "utt2spk", "spk2utt", "utt2dur", "reco2voice", "utt2cond")


def check_sox() -> str:
    """Path of the sox binary, or a clear error naming the install command."""
    exe = shutil.which("sox")
    if exe is None:
        raise RescoreError("the sox audio program for the noise (Debian: apt-get install -y sox)", path="sox")
    return exe


def pink_noise(n: int, sox: str = "sox") -> np.ndarray:
    """(n,) float64 pink noise of unit power from sox's ``synth pinknoise`` (repeatable mode:
    the same n gives the same samples)."""
    if n == 0:
        return np.zeros(0)
    raw = ["-t", "raw", "-r", str(SAMPLE_RATE), "-e", "floating-point", "-b", "32", "-c", "1"]
    r = subprocess.run([sox, "-R", "-r", str(SAMPLE_RATE), "-n", *raw, "-", "synth", f"{n}s", "pinknoise"],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    noise = np.frombuffer(r.stdout, dtype="<f4").astype(np.float64)[:n]
    if len(noise) < n:
        raise RescoreError(f"{n} samples of pink noise from sox", path=sox, got=str(len(noise)))
    return noise / max(float(np.sqrt(np.mean(noise ** 2))), 1e-12)


def add_noise(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """(T,) int16 speech plus ``noise`` (T,) of unit power scaled to ``snr_db`` below the
    speech's power (mean square over the utterance), clipped to int16."""
    x = speech.astype(np.float64)
    power = float(np.mean(x ** 2)) if len(x) else 0.0
    y = x + noise[: len(x)] * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(np.rint(y), -32768, 32767).astype(np.int16)


def parse_snrs(snrs: Sequence[str]) -> List[Optional[float]]:
    """SNRs in dB (None for ``clean``); an OptionError naming --snrs for anything else."""
    out: List[Optional[float]] = []
    for v in snrs:
        if v == CLEAN:
            out.append(None)
            continue
        try:
            db = float(v)
        except ValueError:
            db = math.nan
        if not (math.isfinite(db) and -20 <= db <= 100):
            raise OptionError(f"SNRs in dB in [-20, 100] or {CLEAN}", option="--snrs", got=v)
        out.append(db)
    return out


def flite_voices(flite: str = "flite") -> List[str]:
    """The voices built into flite (``flite -lv``: 'Voices available: kal awb rms ...')."""
    r = subprocess.run([flite, "-lv"], capture_output=True, text=True)
    out = (r.stdout + r.stderr).split(":", 1)
    return out[1].split() if len(out) == 2 else []


def check_options(voices: Sequence[str], gap: float, prefix: str, nj: int) -> None:
    """A RescoreError naming the option for a bad value, before any work."""
    if not voices:
        raise OptionError("at least one voice", option="--voices")
    if not (isinstance(gap, (int, float)) and math.isfinite(gap) and 0 <= gap <= 60):
        raise OptionError("a gap in seconds in [0, 60]", option="--gap", got=str(gap))
    if any(c.isspace() for c in prefix) or "/" in prefix:
        raise OptionError("a prefix of Kaldi ids (no whitespace or '/')", option="--prefix",
                           got=prefix)
    if not (isinstance(nj, int) and nj >= 1):
        raise OptionError("an integer >= 1", option="--nj", got=str(nj))


def check_voices(voices: Sequence[str], flite: str) -> None:
    """An OptionError for a voice the flite program does not list."""
    known = flite_voices(flite)
    bad = [v for v in voices if known and v not in known]
    if bad:
        raise OptionError(f"flite voices among {' '.join(known)}", option="--voices",
                           got=",".join(bad))


def make_tts_data_dir(
    text: Path,
    out_dir: Path,
    docids: Optional[Path] = None,
    voices: Sequence[str] = DEFAULT_VOICES,
    gap: float = 0.3,
    prefix: str = "",
    nj: int = 2,
    snrs: Sequence[str] = (),
) -> Dict[str, int]:
    """Synthesize every sentence of ``text`` and write a Kaldi data dir to ``out_dir``.

    Writes ``wav/<reco>.wav`` (one recording per document), ``wav.scp`` (absolute paths),
    ``segments``, ``text``, ``utt2spk``, ``spk2utt``, ``utt2dur``, ``reco2voice`` and
    ``utt2cond`` (``<utt> voice=flite-<voice> snr=<dB or clean>``).  ``snrs`` (dB values or
    ``clean``) cycle over the documents as the voices do; empty: no noise.
    Recording ids are ``<prefix><doc>``, speakers ``<prefix><doc>-<voice>`` and utterances
    ``<speaker>-<k>`` (k from 000), so sorted utterance ids follow speakers as Kaldi wants.
    Returns counts (documents, utterances, seconds of audio).
    """
    check_options(voices, gap, prefix, nj)
    snr_db = parse_snrs(snrs) or [None]
    out_dir = Path(out_dir)
    check_output_dir(out_dir, "OUT_DIR", names=OUTPUTS, inputs=(text, docids))
    docs = read_documents(text, docids)
    flite = check_flite()  # after the options and the inputs: their errors need no flite
    check_voices(voices, flite)
    sox = check_sox() if any(db is not None for db in snr_db) else "sox"
    (out_dir / "wav").mkdir(parents=True, exist_ok=True)
    jobs: List[Tuple[int, int, str, str]] = []
    for di, doc in enumerate(docs):
        voice = voices[di % len(voices)]
        for si, words in enumerate(doc.sentences):
            jobs.append((di, si, " ".join(words), voice))
    log.info("synthesizing %d sentences of %d documents with flite voices %s", len(jobs), len(docs), ",".join(voices))
    with ThreadPoolExecutor(max(1, nj)) as ex:
        audio = list(progress(ex.map(lambda j: synthesize(j[2], j[3], flite), jobs), total=len(jobs),
                              desc="tts", unit="sentence"))
    silence = np.zeros(int(round(gap * SAMPLE_RATE)), dtype=np.int16)
    wav_scp, segments, text_rows, utt2spk, utt2dur, reco2voice, utt2cond = [], [], [], [], [], [], []
    k = 0
    total = 0.0
    for di, doc in enumerate(docs):
        voice = voices[di % len(voices)]
        reco = f"{prefix}{doc.doc_id}"
        spk = f"{reco}-{voice}"
        db = snr_db[di % len(snr_db)]
        cond = f"voice=flite-{voice} snr={CLEAN if db is None else f'{db:g}'}"
        # One stretch of noise per document, each utterance taking the next piece of it.
        noise = (pink_noise(sum(len(a) for a in audio[k:k + len(doc.sentences)]), sox) if db is not None
                 else np.zeros(0))
        pieces, t, used = [silence], gap, 0
        for si, words in enumerate(doc.sentences):
            a = audio[k]
            k += 1
            if db is not None:
                a = add_noise(a, noise[used:used + len(a)], db)
                used += len(a)
            utt = f"{spk}-{si:03d}"
            start, end = t, t + len(a) / SAMPLE_RATE
            segments.append(f"{utt} {reco} {start:.3f} {end:.3f}")
            text_rows.append(" ".join([utt] + words))
            utt2spk.append(f"{utt} {spk}")
            utt2dur.append(f"{utt} {end - start:.3f}")
            utt2cond.append(f"{utt} {cond}")
            pieces += [a, silence]
            t = end + gap
        path = (out_dir / "wav" / f"{reco}.wav").resolve()
        _write_wav(path, np.concatenate(pieces))
        wav_scp.append(f"{reco} {path}")
        reco2voice.append(f"{reco} flite-{voice}")
        total += t
    _write_table(out_dir / "wav.scp", sorted(wav_scp))
    _write_table(out_dir / "segments", sorted(segments))
    _write_table(out_dir / "text", sorted(text_rows))
    _write_table(out_dir / "utt2spk", sorted(utt2spk))
    _write_table(out_dir / "utt2dur", sorted(utt2dur))
    _write_table(out_dir / "reco2voice", sorted(reco2voice))
    _write_table(out_dir / "utt2cond", sorted(utt2cond))
    spk2utt: Dict[str, List[str]] = {}
    for row in sorted(utt2spk):
        u, s = row.split()
        spk2utt.setdefault(s, []).append(u)
    _write_table(out_dir / "spk2utt", [" ".join([s] + us) for s, us in sorted(spk2utt.items())])
    log.info("wrote %s: %d utterances, %.1f s of audio", out_dir, len(jobs), total)
    return {"documents": len(docs), "utterances": len(jobs), "seconds": int(round(total))}
