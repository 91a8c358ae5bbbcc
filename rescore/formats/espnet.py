"""ESPnet: its decode dirs as a table (``--format espnet``), and a rescored table back as the
files of a decode dir (``--write-format espnet``, ``--to espnet``).

Reading (:func:`read_espnet`): a decode dir of ``espnet2/bin/asr_inference.py`` run with
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
files in ``<n>best_recog/`` (multi-speaker ASR, as ``asr.sh`` merges and scores them; current
ESPnet writes the latter for enhancement + ASR too): ``speaker`` = k reads speaker k's.
ESPnet writes no per-scorer scores; where a patched ``asr_inference.py`` also writes
``score_<name>`` files of the same form (``hyp.scores``: ``score_decoder``, ``score_ctc``,
``score_lm``, ...; docs/ecosystems.md), each becomes column ``<name>`` = -score.
ESPnet1 (:func:`read_espnet1`): ``asr_recog.py --nbest N``'s result JSON (``data.json`` of a
decode dir, or a ``data.JOB.json``): each utterance's ``output`` list in rank order, its
``rec_text`` (the tokens joined; ``▁`` of BPE or a space between words; ``<eos>`` last) and
``score`` (log-probability; column ``pass1`` = -score); ``text`` gives the references.

Writing (:func:`espnet_files`): what ``asr.sh`` leaves in a decode dir for its scoring
stage: ``text`` and ``score`` (the 1-best, merged) and ``1best_recog/{text,score}``, lines
``utt value`` as ESPnet's ``DatadirWriter`` writes them; ``score`` is the log-probability form
of the cost (-cost). ``asr.sh --stage 13`` scores ``<decode dir>/text``. Speaker k of a
multi-speaker decode: ``text_spk<k>``, ``score_spk<k>`` and ``1best_recog/{text,score}_spk<k>``,
the files ``asr.sh``'s multi-speaker scoring reads.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from rescore.errors import RescoreError
from rescore.formats.base import Format, Option
from rescore.formats.table import (FIRST_PASS, Costs, Hypothesis, NbestTable, PathLike, Utterance, check_columns,
                                   parse_printed, print_score, ranked)

log = logging.getLogger(__name__)


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
    from rescore.io.text_tables import read_text_table  # (rescore.io: not at a command's --help)

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
    from rescore.io.text_tables import read_text_table  # (rescore.io: not at a command's --help)

    t = read_text_table(path, "tokens", allow_empty_value=False)
    out = {}
    for key, v, line in zip(t.keys, t.values, t.lines):
        x = parse_printed(" ".join(v))
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
    from rescore.io.files import read_json  # (rescore.io: not at a command's --help)

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
# the result files


def espnet_names(speaker: Optional[int] = None) -> List[str]:
    """The files of :func:`espnet_files`; speaker k: ``text_spk<k>``, ``score_spk<k>``, as
    ``asr.sh`` merges and scores a multi-speaker decode."""
    sfx = f"_spk{speaker}" if speaker is not None else ""
    return [f"text{sfx}", f"score{sfx}", f"1best_recog/text{sfx}", f"1best_recog/score{sfx}"]


def espnet_files(table, costs: Costs, speaker: Optional[int] = None) -> Dict[str, str]:
    """The 1-best as ESPnet's decode dir holds it (module doc); speaker k: as speaker k's files."""
    text, score = [], []
    for u, hyps in ranked(table, costs):
        best = hyps[0]
        text.append(f"{u.id} {' '.join(best.words)}\n")  # DatadirWriter: f"{key} {value}\n"
        score.append(f"{u.id} {print_score(-costs[(u.id, best.rank)])}\n")
    text, score = "".join(text), "".join(score)
    return dict(zip(espnet_names(speaker), (text, score, text, score)))


MAX_SPEAKERS = 1_000  # speakers of a multi-speaker decode (--speaker)


def _read(path: PathLike, manifest, options) -> NbestTable:
    return read_espnet(path, tokens=options.espnet_tokens, speaker=options.speaker)


FORMAT = Format(
    "espnet", "an ESPnet decode dir (<n>best_recog/, or ESPnet1's data.json)", read=_read,
    result_files=lambda table, costs, args: espnet_files(table, costs, args.speaker),
    result_names=lambda args: espnet_names(args.speaker),
    options=(
        Option("--espnet-tokens", "espnet_tokens", kind="choice", choices=ESPNET_TOKEN_TYPES,
               acts_on="ESPnet's decode dir",
               help="With --format espnet: take the words from 'token' (ESPnet writes no 'text' without a "
                    "tokenizer), joined as ESPnet's tokenizer of that --token_type joins them: bpe ('\u2581' "
                    "starts a word), char ('<space>' between words), word."),
        Option("--speaker", "speaker", kind="count", low=1, high=MAX_SPEAKERS, metavar="K",
               acts_on="ESPnet's multi-speaker decode dir",
               help="With --format espnet: speaker K of a multi-speaker decode (<n>best_recog_spk<K>/ "
                    "folders); one run per speaker."),
    ))
