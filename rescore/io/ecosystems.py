"""N-best lists of other recognizers into the interchange format (rescore.io.interchange), and
Kaldi N-best dirs to it and back.

What each reader takes (docs/ecosystems.md has the commands; tests/fixtures/ecosystems has one
small example of each, in the recognizer's own layout):

* **Kaldi** (rescore.nbest.tables.kaldi_to_table, :func:`table_to_kaldi`): an N-best dir (rescore.nbest.sets).
  Columns ``ac`` = ``acwt``, ``graph`` = ``lmwt.withlm``, ``nolm`` = ``lmwt.nolm``; rank k is key
  ``<utt>-<k>``. Scores of text archives keep their text, so dir -> file -> dir gives the same
  bytes (``kaldi_style``: every line of ``words``/``acwt``/``lmwt.*`` ends in a space as Kaldi's
  binaries write them, ``words_text`` without as ``int2sym.pl`` writes it; False: no line does).
* **ESPnet** (:func:`read_espnet`): a decode dir of ``espnet2/bin/asr_inference.py`` run with
  ``--nbest N``: ``<dir>/<n>best_recog/{text,score}`` for n = 1..N (or, under ``asr.sh``, its
  ``<dir>/logdir/output.<job>/<n>best_recog/``, jobs in number order; ``asr.sh`` merges only the
  1-best into ``<dir>``). ``text`` is ``utt words``; ``score`` is ``utt <hyp.score>``, the beam
  search's weighted total log-probability as ``str()`` of a tensor (``tensor(-3.1416)``, with
  ``, device='cuda:0'`` when decoded on a GPU) or of a float. Column ``pass1`` = -score.
  Without a tokenizer (``token_type`` none, or bpe without a model) ``asr_inference.py`` writes no
  ``text``, only ``token``: ``espnet_tokens`` joins the tokens as ESPnet's tokenizer would
  (:func:`espnet_tokens2text`). An utterance too short to decode has the placeholder text
  ``' '``, token ``<space>`` and score 0.0 at every rank (ESPNET_TOO_SHORT): an empty hypothesis,
  0 in every per-scorer column (it has no per-scorer scores). A multi-speaker decode writes
  ``<n>best_recog_spk<k>/`` folders (``--enh_s2t_task true``) or ``text_spk<k>``/``score_spk<k>``
  files in ``<n>best_recog/`` (multi-speaker ASR, as ``asr.sh`` merges and scores them; current ESPnet writes the latter
  for enhancement + ASR too): ``speaker`` = k reads speaker k's.
  ESPnet writes no per-scorer scores; where a patched ``asr_inference.py`` also writes
  ``score_<name>`` files of the same form (``hyp.scores``: ``score_decoder``, ``score_ctc``,
  ``score_lm``, ...; docs/ecosystems.md), each becomes column ``<name>`` = -score.
  ESPnet1 (:func:`read_espnet1`): ``asr_recog.py --nbest N``'s result JSON (``data.json`` of a
  decode dir, or a ``data.JOB.json``): each utterance's ``output`` list in rank order, its
  ``rec_text`` (the tokens joined; ``▁`` of BPE or a space between words; ``<eos>`` last) and
  ``score`` (log-probability; column ``pass1`` = -score); ``text`` gives the references.
* **icefall** (:func:`read_icefall`): icefall's decode scripts keep only each method's 1-best
  (``recogs-*.txt`` from ``store_transcripts``, no scores), so the N-best is dumped from the
  ``k2`` ``Nbest`` object of an n-best decoding method (docs/ecosystems.md has the lines): a
  JSON-lines file, one object per cut: ``{"cut_id": ..., "hyps": ["w w ...", ...], "am_scores":
  [...], "lm_scores": [...], "ref": "w w ..."}`` (``ref`` optional; ``hyps`` also as lists of
  words), as :func:`rescore.io.icefall.write_nbest` writes it. Every ``<name>_scores`` list
  (one log-probability per hypothesis, as ``Nbest.compute_am_scores()``/``compute_lm_scores()``
  give per path) becomes column ``<name>`` = -score. The first pass is their sum; a cut whose
  first hypothesis is not the best by it (k2's ``Nbest`` keeps the paths in the order of a hash
  of their words, not of their scores) is put in that order, with a warning.
* **NeMo** (:func:`read_nemo`): with ``preds_output_folder``, NeMo's
  ``scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram_ctc.py`` writes
  ``preds_out_width{W}_alpha{a}_beta{b}.tsv`` and ``eval_beamsearch_ngram_transducer.py``
  ``preds_out_{strategy}_bw{W}[_ma.._mg..[_ba..[_hat_ilmw..]]].tsv``: per utterance of the
  manifest, in manifest order, its beam candidates as lines ``text<TAB>score`` (score: the beam
  search's total, e.g. pyctcdecode's combined score with alpha x LM + beta x words; ``str()`` of
  a float or of a tensor; no utterance id). W is the beam width (``--nemo-beam`` for a renamed
  file). An utterance may have fewer than W candidates (pyctcdecode prunes by
  ``beam_prune_logp`` and merges beams of the same text): the manifest gives the utterances,
  the file their candidates. ``<file>.counts`` beside it (NeMo's script patched with
  NEMO_PATCH: the number of candidates of each manifest line) gives the split exactly. Without
  it: with W x utterances lines every utterance has W; with fewer, the split is taken where the
  file allows exactly one (:func:`nemo_splits`: blocks of 1 to W lines, scores best first in
  each, one block per utterance), and refused where it allows none or several (the error names
  the first utterance whose number of candidates is not certain, and the remedy).
  The manifest (JSON lines, ``audio_filepath``, ``text``, optional ``offset``) gives the ids:
  the audio file's name without extension, and where one audio file is cut into segments (it
  occurs more than once) ``<name>-<offset in 1/100 s, 7 digits>`` for every line. References
  are the manifest's ``text``, optionally normalised as the script normalises predictions and
  references (``text_processing``: :func:`nemo_text_processing`). Column ``pass1`` = -score.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.io.files import read_json
from rescore.io.interchange import Hypothesis, NbestTable, Utterance, check_columns, format_score, parse_score
from rescore.io.kaldi import read_symbol_table, read_text_table, write_table

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

FORMATS = ("kaldi", "interchange", "espnet", "icefall", "nemo")
KALDI_COLUMNS = {"ac": "acwt", "graph": "lmwt.withlm", "nolm": "lmwt.nolm"}  # column -> archive
FIRST_PASS = "pass1"  # the column of ESPnet's and NeMo's beam-search total (as a cost)

# NeMo's names of the predictions file: the CTC script's and the transducer script's
_NEMO_CTC_NAME = re.compile(r"preds_out_width(\d+)_alpha(.+)_beta(.+)\.tsv\Z")
_NEMO_RNNT_NAME = re.compile(r"preds_out_(greedy_batch|beam|tsd|alsd|maes)_bw(\d+)(_.*)?\.tsv\Z")
NEMO_TEXT_PROCESSING = ("lowercase", "rm_punctuation", "separate_punctuation")  # NeMo's order


def _number(text: str) -> Optional[float]:
    """A finite number from str() of a float or of a 0-dim tensor: '-3.25', 'tensor(-3.25)',
    "tensor(-3.25, device='cuda:0')"; None otherwise."""
    text = text.strip()
    if text.startswith("tensor(") and text.endswith(")"):
        text = text[len("tensor("):-1].split(",")[0].strip()
    return parse_score(text)


def table_to_kaldi(table: NbestTable, out_dir: PathLike, words_txt: Optional[PathLike] = None,
                   kaldi_style: bool = True, place: Optional[Callable[[str], Path]] = None) -> List[Path]:
    """Write a table with columns ac, graph, nolm as a Kaldi N-best dir: words_text, acwt,
    lmwt.withlm, lmwt.nolm (text archives, keys ``<utt>-<rank>``) and, with words_txt, words
    (ids). place: where each file goes (rescore.io.outdir.OutputSet.path, the dir written as one
    set; default: ``out_dir / name``). Returns the files written."""
    idx = [table.column(c) for c in KALDI_COLUMNS]
    out = Path(out_dir)
    place = place or (lambda name: out / name)
    hyps = [(f"{u.id}-{h.rank}", h) for u in table.utterances for h in u.hyps]
    sym = read_symbol_table(words_txt) if words_txt is not None else None
    ids = {}
    if sym is not None:
        for key, h in hyps:
            bad = next((w for w in h.words if w not in sym), None)
            if bad is not None:
                raise RescoreError(f"words of {words_txt}", path=table.path, line=h.line or None,
                                   got=f"{bad!r} (hypothesis {key})")
            ids[key] = [sym[w] for w in h.words]
    written = [place("words_text")]
    write_table(written[0], "tokens", {k: h.words for k, h in hyps}, trailing_space=False)
    for col, i in zip(KALDI_COLUMNS, idx):
        vals = {}
        for k, h in hyps:
            t = h.texts[i] if len(h.texts) == len(table.columns) else None
            vals[k] = [t if t is not None else format_score(h.scores[i])]
        written.append(place(KALDI_COLUMNS[col]))
        write_table(written[-1], "tokens", vals, trailing_space=kaldi_style)
    if sym is not None:
        written.append(place("words"))
        write_table(written[-1], "ints", ids, trailing_space=kaldi_style)
    return written


# --------------------------------------------------------------------------------------------
# ESPnet


def _espnet_dirs(decode_dir: Path, speaker: Optional[int] = None) -> Tuple[List[Tuple[str, Dict[int, Path]]], str]:
    """([(job name, {n: <n>best_recog dir})] in job order, the suffix of the file names). Speaker
    k: the <n>best_recog_spk<k> dirs (enh_s2t_task), else the files text_spk<k>, score_spk<k>
    of the <n>best_recog dirs (multi-speaker ASR, as asr.sh merges and scores them)."""
    def nbest_dirs(d: Path, suffix: str) -> Dict[int, Path]:
        out = {}
        for p in d.glob(f"*best_recog{suffix}"):
            m = re.fullmatch(rf"(\d+)best_recog{suffix}", p.name)
            if m and p.is_dir() and int(m.group(1)) >= 1:
                out[int(m.group(1))] = p
        return out

    jobs = sorted((p for p in (decode_dir / "logdir").glob("output.*") if p.is_dir() and p.suffix[1:].isdigit()),
                  key=lambda p: int(p.suffix[1:]))

    def find(suffix: str):
        found = [(str(j), nbest_dirs(j, suffix)) for j in jobs]
        found = [(j, d) for j, d in found if d]
        if not found and nbest_dirs(decode_dir, suffix):
            found = [(str(decode_dir), nbest_dirs(decode_dir, suffix))]
        return found

    spk = f"_spk{speaker}" if speaker is not None else ""
    found, file_suffix = find(spk), ""
    if not found and speaker is not None:
        found, file_suffix = find(""), spk
        if found and not any((d / f"score{spk}").is_file() for _, dirs in found for d in dirs.values()):
            raise RescoreError(f"speaker {speaker}'s output: <n>best_recog_spk{speaker}/ folders or "
                               f"<n>best_recog/score_spk{speaker} files", path=decode_dir, got="none")
    if not found:
        spks = sorted({p.name.rpartition("_spk")[2] for d in (decode_dir, *jobs) for p in d.glob("*best_recog_spk*")})
        if speaker is None and spks:
            raise RescoreError(f"a single-speaker decode dir; this one is multi-speaker (<n>best_recog_spk<k>/, "
                               f"speakers {', '.join(spks)}): choose one with --speaker", path=decode_dir)
        raise RescoreError(f"an ESPnet decode dir: <n>best_recog{spk}/ folders (asr_inference.py --nbest N) in it "
                           "or in its logdir/output.*/", path=decode_dir, got="none")
    return found, file_suffix


ESPNET_TOKEN_TYPES = ("bpe", "char", "word")
# asr_inference.py's hypothesis of an utterance too short to decode (TooShortUttError): text " ",
# token "<space>", score 0.0, no per-scorer scores
ESPNET_TOO_SHORT = ["<space>"]
SP_UNKNOWN = " \u2047 "  # sentencepiece's kDefaultUnknownSymbol: what DecodePieces makes of <unk>
SP_CONTROL = ("<s>", "</s>")  # invisible in DecodePieces


def espnet_tokens2text(tokens: Sequence[str], token_type: str) -> str:
    """The text ESPnet's tokenizer makes of tokens (``tokens2text`` of espnet2/text/):
    bpe: sentencepiece's DecodePieces (DecodeSentencePiece of sentencepiece_processor.cc: '<unk>'
    its surface ' ⁇ ', '<s>'/'</s>' nothing, '▁' a space, none at the start), as ESPnet's
    ``text`` holds it with the BPE model; char: CharTokenizer (``<space>`` a space, the rest
    joined); word: WordTokenizer (a space between). The too-short placeholder (``<space>`` alone,
    ESPNET_TOO_SHORT) is the empty text for every type."""
    if list(tokens) == ESPNET_TOO_SHORT:
        return ""
    if token_type == "bpe":
        out = []
        for t in tokens:
            if t == "<unk>":
                out.append(SP_UNKNOWN)
            elif t not in SP_CONTROL:
                out.append((t[1:] if not "".join(out) and t.startswith("\u2581") else t).replace("\u2581", " "))
        return "".join(out)
    if token_type == "char":
        return "".join(" " if t == "<space>" else t for t in tokens)
    if token_type == "word":
        return " ".join(tokens)
    raise ValueError(f"token_type must be one of {ESPNET_TOKEN_TYPES}")


def _espnet_words(d: Path, tokens: Optional[str], sfx: str = ""):
    """(keys, words, lines, path) of an <n>best_recog folder: its 'text', or its 'token' joined
    (sfx: the files' suffix, _spk<k>)."""
    if tokens is None:
        p = d / f"text{sfx}"
        if not p.is_file():
            spks = sorted(q.name[len("text_spk"):] for q in d.glob("text_spk*"))
            hint = (" (ESPnet writes only 'token' without a tokenizer: --espnet-tokens bpe|char|word joins them)"
                    if (d / f"token{sfx}").is_file() else
                    f" (this is a multi-speaker decode, speakers {', '.join(spks)}: choose one with --speaker)"
                    if spks and not sfx else "")
            raise RescoreError(f"a file 'text{sfx}'" + hint, path=d, got="none")
        t = read_text_table(p, "tokens")
        return t.keys, t.values, t.lines, p
    p = d / f"token{sfx}"
    if not p.is_file():
        raise RescoreError(f"a file 'token{sfx}' (--espnet-tokens)", path=d, got="none")
    t = read_text_table(p, "tokens")
    return t.keys, [espnet_tokens2text(v, tokens).split() for v in t.values], t.lines, p


def _espnet_scores(path: Path) -> Dict[str, Tuple[float, int]]:
    """utt -> (score, line) of an ESPnet ``score`` file."""
    t = read_text_table(path, "tokens", allow_empty_value=False)
    out = {}
    for key, v, line in zip(t.keys, t.values, t.lines):
        x = _number(" ".join(v))
        if x is None:
            raise RescoreError("'utt score' with a finite score (a number or tensor(number))", path=path,
                               line=line, got=" ".join([key, *v]))
        out[key] = (x, line)
    return out


def _espnet_score_files(d: Path, sfx: str = "") -> List[str]:
    """``score`` and the optional per-scorer ``score_<name>`` files of an <n>best_recog folder
    (sfx: a speaker's ``score_spk<k>`` alone)."""
    if not (d / f"score{sfx}").is_file():
        raise RescoreError(f"a file 'score{sfx}'", path=d, got="none")
    if sfx:
        return [f"score{sfx}"]
    return ["score", *sorted(p.name for p in d.glob("score_*") if p.is_file() and not re.fullmatch(r"score_spk\d+",
                                                                                                      p.name))]


def read_espnet(decode_dir: PathLike, tokens: Optional[str] = None, speaker: Optional[int] = None) -> NbestTable:
    """An ESPnet decode dir's N-best (module doc) as a table with column pass1 (= -score), and
    a column <name> (= -score) for each optional per-scorer file ``score_<name>``. tokens:
    bpe|char|word, the words from ``token`` (espnet_tokens2text) instead of ``text``; speaker:
    k of a multi-speaker decode."""
    decode_dir = Path(decode_dir)
    if decode_dir.is_file() or (not any(decode_dir.glob("*best_recog*")) and (decode_dir / "data.json").is_file()
                                and not (decode_dir / "logdir").is_dir()):
        return read_espnet1(decode_dir if decode_dir.is_file() else decode_dir / "data.json")
    utts: Dict[str, Utterance] = {}
    files: Optional[List[str]] = None
    found_dirs, sfx = _espnet_dirs(decode_dir, speaker)
    for job, dirs in found_dirs:
        if 1 not in dirs:
            raise RescoreError("a 1best_recog folder", path=job, got=f"only {min(dirs)}best_recog and on")
        for n in sorted(dirs):
            d = dirs[n]
            keys, values, lines, source = _espnet_words(d, tokens, sfx)
            found = _espnet_score_files(d, sfx)
            if files is None:
                files, first = found, d
                check_columns([f[len("score_"):] for f in files[1:]], path=d, line=None)
            if found != files:
                raise RescoreError(f"the score files of {first} ({', '.join(files)})", path=d, got=", ".join(found))
            scores = [_espnet_scores(d / f) for f in files]
            for key, words, line in zip(keys, values, lines):
                for f, sc in zip(files, scores):
                    if key not in sc and f != files[0] and not words and scores[0].get(key, (None,))[0] == 0.0:
                        sc[key] = (0.0, None)  # too short to decode: no scorer ran (ESPNET_TOO_SHORT)
                    if key not in sc:
                        raise RescoreError(f"a score for '{key}' (as in {source})", path=d / f, got="none")
                u = utts.setdefault(key, Utterance(key, [])) if n == 1 else utts.get(key)
                if u is None or len(u.hyps) != n - 1:
                    raise RescoreError(f"hypotheses 1..{n - 1} of '{key}' before this one (in the lower "
                                       f"<n>best_recog folders of {job})", path=source, line=line, got=key)
                u.hyps.append(Hypothesis(n, list(words), tuple(-sc[key][0] for sc in scores), (None,) * len(files),
                                         line))
            for f, sc in zip(files, scores):
                extra = set(sc) - set(keys)
                if extra:
                    raise RescoreError(f"only utterances of {source}", path=d / f, got=sorted(extra)[0])
    log.info("%s: %d utterances, %d hypotheses (ESPnet)", decode_dir, len(utts),
             sum(len(u.hyps) for u in utts.values()))
    columns = (FIRST_PASS, *(f[len("score_"):] for f in (files or ["score"])[1:]))
    return NbestTable(str(decode_dir), columns, list(utts.values()))


def _espnet1_words(rec_text: str) -> List[str]:
    """The words of an ESPnet1 ``rec_text``: the tokens joined, '<eos>' last, '▁' (BPE) or a
    space between words."""
    if rec_text.endswith("<eos>"):
        rec_text = rec_text[: -len("<eos>")]
    return rec_text.replace("\u2581", " ").split()


def read_espnet1(path: PathLike) -> NbestTable:
    """ESPnet1's result JSON (``asr_recog.py --nbest N --result-label data.JOB.json``, merged into
    ``data.json`` by ``concatjson.py``): ``{"utts": {utt: {"output": [{"name": "target1[n]",
    "rec_text": ..., "score": log-probability, "text": reference, ...}, ...]}}}`` in rank order.
    Column pass1 = -score; the references from ``text``."""
    path = Path(path)
    js = read_json(path)
    utts_js = js.get("utts") if isinstance(js, dict) else None
    if not isinstance(utts_js, dict) or not utts_js:
        raise RescoreError("ESPnet's result JSON: an object with 'utts' (utterance -> results)", path=path)
    utts, refs = [], {}
    for utt, entry in utts_js.items():
        outs = entry.get("output") if isinstance(entry, dict) else None
        if not utt or any(c.isspace() for c in utt) or not isinstance(outs, list) or not outs:
            raise RescoreError(f"utts.{utt}: an utterance id without whitespace and a non-empty 'output' list",
                               path=path)
        hyps = []
        for k, out in enumerate(outs, 1):
            ok = isinstance(out, dict) and isinstance(out.get("rec_text"), str) and \
                isinstance(out.get("score"), (int, float)) and not isinstance(out.get("score"), bool)
            if not ok:
                raise RescoreError(f"utts.{utt}.output[{k - 1}]: 'rec_text' (a string) and 'score' (a number)",
                                   path=path)
            name = out.get("name")
            if isinstance(name, str) and name.endswith("]") and not name.endswith(f"[{k}]"):
                raise RescoreError(f"utts.{utt}.output[{k - 1}]: the hypotheses in rank order (name '...[{k}]')",
                                   path=path, got=name)
            hyps.append(Hypothesis(k, _espnet1_words(out["rec_text"]), (-float(out["score"]),), (None,)))
        utts.append(Utterance(utt, hyps))
        if isinstance(outs[0].get("text"), str):
            refs[utt] = outs[0]["text"].split()
    return NbestTable(str(path), (FIRST_PASS,), utts, refs if len(refs) == len(utts) else None)


# --------------------------------------------------------------------------------------------
# icefall


def _json_lines(path: Path) -> List[Tuple[int, object]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RescoreError("a readable JSON-lines file", path=path, got=e.strerror or str(e)) from None
    except UnicodeDecodeError:
        raise RescoreError("UTF-8 text", path=path) from None
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line, parse_constant=lambda c: None)))
        except json.JSONDecodeError as e:
            raise RescoreError("one JSON object per line", path=path, line=lineno, got=e.msg) from None
    return out


def _words(v, path: Path, line: int, what: str) -> List[str]:
    if isinstance(v, str):
        return v.split()
    if isinstance(v, list) and all(isinstance(w, str) and w and not any(c.isspace() for c in w) for w in v):
        return list(v)
    raise RescoreError(f"{what} as a string of words or a list of words", path=path, line=line, got=str(v)[:60])


def read_icefall(path: PathLike) -> NbestTable:
    """An icefall N-best dump (module doc) as a table: a column per ``<name>_scores`` (negated)."""
    path = Path(path)
    columns: Optional[Tuple[str, ...]] = None
    utts, refs, seen, reordered = [], {}, {}, []
    for line, obj in _json_lines(path):
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
                                                      "rescore.io.icefall.write_nbest drops or clamps those)"
                                                      if inf else ""))
            cols.append([-float(x) for x in v])
        hyps = [Hypothesis(k + 1, _words(h, path, line, "a hypothesis"), tuple(col[k] for col in cols),
                           (None,) * len(cols), line) for k, h in enumerate(obj["hyps"])]
        first_pass = [sum(h.scores) for h in hyps]
        if first_pass[0] > min(first_pass):
            order = sorted(range(n), key=first_pass.__getitem__)  # stable: ties keep the dump's order
            hyps = [replace(hyps[k], rank=r + 1) for r, k in enumerate(order)]
            reordered.append(cut)
        utts.append(Utterance(cut, hyps))
        if "ref" in obj:
            refs[cut] = _words(obj["ref"], path, line, "'ref'")
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
# NeMo


def nemo_text_processing(text: str, steps: Sequence[str] = (), marks: str = ".,?") -> str:
    """NeMo's ``apply_text_processing`` (eval_beamsearch_ngram_ctc.py, with
    ``PunctuationCapitalization`` of transcribe_utils.py) on one text: ``steps`` among
    NEMO_TEXT_PROCESSING (``text_processing.do_lowercase``, ``rm_punctuation``,
    ``separate_punctuation``), applied in NeMo's order; ``marks``: ``punctuation_marks``."""
    bad = [x for x in steps if x not in NEMO_TEXT_PROCESSING]
    if bad:
        raise ValueError(f"text processing steps are {NEMO_TEXT_PROCESSING}, got {bad}")
    punct = re.compile(f"([{''.join(marks)}])") if marks else None
    extra_space = re.compile(r"\s{2,}")
    if "lowercase" in steps:
        text = text.lower()
    if "rm_punctuation" in steps and punct is not None:
        text = extra_space.sub(" ", punct.sub(" ", text)).strip()
    if "separate_punctuation" in steps and punct is not None:
        text = extra_space.sub(" ", punct.sub(r" \1 ", text)).strip()
    return text


def nemo_manifest(manifest: PathLike) -> List[Tuple[str, dict, int]]:
    """[(utterance id, entry, line)] of a NeMo manifest in its order (module doc: the ids)."""
    manifest = Path(manifest)
    entries = []
    for line, obj in _json_lines(manifest):
        if not isinstance(obj, dict) or not isinstance(obj.get("audio_filepath"), str):
            raise RescoreError("a manifest object with 'audio_filepath'", path=manifest, line=line)
        off = obj.get("offset", 0) or 0
        if not isinstance(off, (int, float)) or isinstance(off, bool) or not off >= 0:
            raise RescoreError("'offset': a number of seconds >= 0", path=manifest, line=line, got=str(off))
        entries.append((Path(obj["audio_filepath"]).stem, obj, line))
    stems = [stem for stem, _, _ in entries]
    segmented = len(set(stems)) < len(stems)
    out, seen = [], {}
    for stem, obj, line in entries:
        utt = f"{stem}-{round(100 * (obj.get('offset', 0) or 0)):07d}" if segmented else stem
        if not utt or any(c.isspace() for c in utt) or utt in seen:
            what = ("audio file names (the utterance ids) without whitespace, each once, or segments of one "
                    "file at different offsets")
            raise RescoreError(what + (f" (also at line {seen[utt]})" if utt in seen else ""), path=manifest,
                               line=line, got=obj["audio_filepath"])
        seen[utt] = line
        out.append((utt, obj, line))
    return out


def nemo_beam_width(preds_tsv: PathLike) -> Optional[int]:
    """W of a NeMo predictions file's name (module doc), None for another name; 1 for the
    transducer script's greedy_batch."""
    name = Path(preds_tsv).name
    m = _NEMO_CTC_NAME.match(name)
    if m is not None:
        return int(m.group(1))
    m = _NEMO_RNNT_NAME.match(name)
    if m is not None:
        return 1 if m.group(1) == "greedy_batch" else int(m.group(2))
    return None


NEMO_COUNTS_SUFFIX = ".counts"  # <predictions file>.counts: NeMo's script, patched (docs/ecosystems.md)
NEMO_PATCH = "recipes/patches/nemo/eval_beamsearch_ngram.patch"


def _composition_count(length: int, blocks: int, width: int) -> int:
    """The number of ways, capped at 2, to cut ``length`` lines into ``blocks`` blocks of 1 to
    ``width`` lines in order: 1 for one block, one line each or width lines each; 0 where none
    fits; else 2 (at least two: a line moves between two neighbouring blocks)."""
    if not -(-length // width) <= blocks <= length:
        return 0
    return 1 if blocks in (1, length) or blocks * width == length else 2


def nemo_splits(scores: Sequence[float], num_utts: int, width: int):
    """How the candidates of a predictions file split into utterances (module doc): every split
    into ``num_utts`` blocks of 1 to ``width`` lines, each block's scores best first (never
    rising). Returns (count, found): count the number of splits capped at 2; found the block sizes
    of the one split where count is 1, with count 2 the index of the first utterance whose number
    of candidates differs between splits, else None.

    A score rising above the one before it starts a block; a run of n lines between rises is cut
    anywhere, into m blocks with ceil(n / width) <= m <= n, in _composition_count(n, m) ways.
    The count is the sum over the runs' m (adding up to num_utts) of the product of those ways;
    as every way is 1 or 2, it is 1 only where each run has one choice of m, and that choice one
    way: every run at its fewest blocks, each cut one way, or every line its own utterance. With
    more blocks than the fewest to share out, any run that can take more is free."""
    total = len(scores)
    cuts = [i for i in range(1, total) if scores[i] > scores[i - 1]]
    runs = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
    lo = [-(-n // width) for n in runs]  # the fewest blocks a run can make; the most: n
    extra = num_utts - sum(lo)  # blocks beyond the fewest, to share out
    spare = sum(runs) - sum(lo)  # the most that the runs can take
    if not 0 <= extra <= spare:
        return 0, None
    if extra == spare:  # one line per block
        return 1, [1] * total
    first = 0  # the first utterance of run r
    for n, m, room in zip(runs, lo, (n - m for n, m in zip(runs, lo))):
        # the blocks this run takes in some split: m + at least what the others cannot take
        least = m + max(0, extra - (spare - room))
        most = m + min(room, extra)
        if least < most or _composition_count(n, least, width) > 1:
            return 2, first
        first += least
    sizes = []
    for n, m in zip(runs, lo):  # (extra == 0: every run at its fewest blocks, each one way)
        sizes += [n] if m == 1 else [1] * n if m == n else [width] * m
    return 1, sizes


def _nemo_counts(path: Path, num_utts: int, total: int, manifest: Path) -> List[int]:
    """The candidates of each utterance from ``<predictions file>.counts`` (NeMo's script patched)."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise RescoreError("a readable UTF-8 file", path=path, got=str(e)) from None
    if lines and lines[-1] == "":
        lines.pop()
    sizes = []
    for lineno, line in enumerate(lines, 1):
        if not (line.isascii() and line.isdigit()) or int(line) < 1:
            raise RescoreError("the number of candidates of one manifest line (an integer >= 1)", path=path,
                               line=lineno, got=line[:60])
        sizes.append(int(line))
    if len(sizes) != num_utts or sum(sizes) != total:
        raise RescoreError(f"one line per utterance of {manifest} ({num_utts}) whose numbers add up to the "
                           f"{total} lines of the predictions file", path=path,
                           got=f"{len(sizes)} lines adding up to {sum(sizes)}")
    return sizes


def _nemo_blocks(scores: List[float], ids: Sequence[Tuple[str, dict, int]], width: Optional[int], path: Path,
                 manifest: Path) -> List[int]:
    """The number of candidates of each utterance (module doc)."""
    total, num_utts = len(scores), len(ids)
    counts = path.with_name(path.name + NEMO_COUNTS_SUFFIX)
    if counts.is_file():
        log.info("%s: the candidates of each utterance from %s", path, counts)
        return _nemo_counts(counts, num_utts, total, manifest)
    if width is not None and width < 1:
        raise RescoreError("a beam width >= 1", path=path, got=str(width))
    if width is not None and total == width * num_utts:
        return [width] * num_utts
    if total == num_utts:
        return [1] * num_utts
    most = f"at most {width * num_utts} (" if width is not None else "("
    if total < num_utts or (width is not None and total > width * num_utts):
        raise RescoreError(f"1 to {width or 'W'} candidates for each of the {num_utts} utterances of {manifest} "
                           f"({num_utts} to {most}beam width {width or 'W'}) lines)", path=path,
                           got=f"{total} lines")
    count, found = nemo_splits(scores, num_utts, width or total)
    if count == 1:
        return found
    remedy = (f"; for an exact split, run NeMo's script with {NEMO_PATCH} applied (it writes "
              f"{path.name}{NEMO_COUNTS_SUFFIX} beside the file), or write the beams with "
              "rescore.io.pyctcdecode.write_beams (docs/ecosystems.md, NeMo)")
    if count == 0:
        raise RescoreError(
            f"lines that split into the {num_utts} utterances of {manifest}, each 1 to {width or 'W'} (the beam "
            f"width) candidates best first: NeMo writes no utterance ids, and no such split exists" + remedy,
            path=path, got=f"{total} lines")
    utt, _, line = ids[found]
    raise RescoreError(
        f"lines that split into the {num_utts} utterances of {manifest} in one way only: NeMo writes no utterance "
        f"ids, and with fewer than {width or 'W'} (the beam width) candidates for some utterances these lines split "
        f"in more than one way, from utterance {found + 1} on ('{utt}', line {line} of the manifest), whose number "
        "of candidates differs between them" + remedy, path=path, got=f"{total} lines")


def read_nemo(preds_tsv: PathLike, manifest: PathLike, beam_size: Optional[int] = None,
              text_processing: Sequence[str] = (), punctuation_marks: str = ".,?") -> NbestTable:
    """NeMo's beam-search candidates (module doc) as a table with column pass1 (= -score);
    beam_size: W, by default from the file name (nemo_beam_width); text_processing: NeMo's
    normalisation of the references (nemo_text_processing)."""
    preds_tsv, manifest = Path(preds_tsv), Path(manifest)
    if beam_size is None:
        beam_size = nemo_beam_width(preds_tsv)
    log.info("%s: beam width %s (NeMo)", preds_tsv, beam_size if beam_size is not None else "unknown")
    ids = nemo_manifest(manifest)
    try:
        lines = preds_tsv.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise RescoreError("a readable UTF-8 file", path=preds_tsv, got=str(e)) from None
    if lines and lines[-1] == "":
        lines.pop()
    parsed = []
    for lineno, line in enumerate(lines, 1):
        text, sep, score = line.rpartition("\t")
        x = _number(score) if sep else None
        if x is None:
            raise RescoreError("'text<TAB>score' with a finite score", path=preds_tsv, line=lineno, got=line[:60])
        parsed.append((text.split(), x, lineno))
    sizes = _nemo_blocks([x for _, x, _ in parsed], ids, beam_size, preds_tsv, manifest)
    utts, k = [], 0
    for (utt, _, _), n in zip(ids, sizes):
        utts.append(Utterance(utt, [Hypothesis(r + 1, w, (-x,), (None,), ln)
                                    for r, (w, x, ln) in enumerate(parsed[k:k + n])]))
        k += n
    if len(set(sizes)) > 1:
        log.info("%s: %d to %d candidates per utterance", preds_tsv, min(sizes), max(sizes))
    refs = {u: nemo_text_processing(e["text"], text_processing, punctuation_marks).split()
            for u, e, _ in ids if isinstance(e.get("text"), str)}
    return NbestTable(str(preds_tsv), (FIRST_PASS,), utts, refs if len(refs) == len(ids) else None)


# --------------------------------------------------------------------------------------------


def input_format(path: PathLike, fmt: str = "auto") -> str:
    """The format of an input: ``fmt`` unless 'auto', else a file is interchange, a dir Kaldi."""
    if fmt != "auto":
        return fmt
    return "interchange" if Path(path).is_file() else "kaldi"


@dataclass(frozen=True)
class ReadOptions:
    """How to read another recognizer's output (the readers' own options; docs/ecosystems.md)."""

    nemo_beam: Optional[int] = None  # W where the file name does not give it
    nemo_text_processing: Tuple[str, ...] = ()  # NeMo's normalisation of the references
    nemo_punctuation_marks: str = ".,?"
    espnet_tokens: Optional[str] = None  # bpe | char | word: join ESPnet's 'token' without a 'text'
    speaker: Optional[int] = None  # ESPnet multi-speaker: read speaker k's <n>best_recog_spk<k>

