"""NeMo: its beam-search predictions file as a table (``--format nemo``), and a rescored table
back as NeMo's files (``--write-format nemo``, ``--to nemo``).

Reading (:func:`read_nemo`): with ``preds_output_folder``, NeMo's
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

Writing (:func:`nemo_files`): ``preds_rescored.tsv``, the candidates of each utterance of
the manifest, in manifest order, best first by the cost, as ``'{}\\t{}\\n'.format(text, -cost)``
(the lines of ``eval_beamsearch_ngram_ctc.py``); ``manifest_rescored.json``, the manifest's
entries, each with ``pred_text`` (the 1-best) added: the manifest that NeMo's
``speech_to_text_eval.py`` scores (``text`` against ``pred_text``).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from rescore.errors import RescoreError
from rescore.formats.base import Format, Option
from rescore.formats.table import (FIRST_PASS, Costs, Hypothesis, NbestTable, PathLike, Utterance, parse_printed,
                                   print_score, ranked)

log = logging.getLogger(__name__)

# NeMo's names of the predictions file: the CTC script's and the transducer script's
_NEMO_CTC_NAME = re.compile(r"preds_out_width(\d+)_alpha(.+)_beta(.+)\.tsv\Z")
_NEMO_RNNT_NAME = re.compile(r"preds_out_(greedy_batch|beam|tsd|alsd|maes)_bw(\d+)(_.*)?\.tsv\Z")
NEMO_TEXT_PROCESSING = ("lowercase", "rm_punctuation", "separate_punctuation")  # NeMo's order


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
    from rescore.io.files import read_json_lines  # (rescore.io: not at a command's --help)

    manifest = Path(manifest)
    entries = []
    for line, obj in read_json_lines(manifest):
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
              "rescore.formats.pyctcdecode.write_beams (docs/ecosystems.md, NeMo)")
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
        x = parse_printed(score) if sep else None
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
# the result files


def nemo_names() -> List[str]:
    return ["preds_rescored.tsv", "manifest_rescored.json"]


def nemo_files(table, costs: Costs, manifest: PathLike) -> Dict[str, str]:
    """The rescored candidates and the manifest with ``pred_text`` (module doc); the table's
    utterances are the manifest's (read_nemo), in its order."""
    entries = nemo_manifest(manifest)
    by_id = {u.id: hyps for u, hyps in ranked(table, costs)}
    missing = [utt for utt, _, _ in entries if utt not in by_id]
    if missing or len(entries) != len(by_id):
        raise RescoreError(f"the utterances of {manifest} (a NeMo input of that manifest)", path=table.path,
                           got=f"{len(by_id)} utterances, {len(missing)} of the manifest's missing")
    preds, lines = [], []
    for utt, entry, _ in entries:
        for h in by_id[utt]:
            preds.append("{}\t{}\n".format(" ".join(h.words), print_score(-costs[(utt, h.rank)])))
        item = dict(entry, pred_text=" ".join(by_id[utt][0].words))
        lines.append(json.dumps(item, ensure_ascii=False) + "\n")
    return {"preds_rescored.tsv": "".join(preds), "manifest_rescored.json": "".join(lines)}


MAX_BEAM = 100_000  # a beam width (its file holds W hypotheses per utterance)


def _read(path: PathLike, manifest: Optional[PathLike], options) -> NbestTable:
    if manifest is None:
        raise RescoreError("the NeMo manifest of the decoded set (--manifest)", path=path)
    return read_nemo(path, manifest, options.nemo_beam, options.nemo_text_processing, options.nemo_punctuation_marks)


def _files(table, costs: Costs, args) -> Dict[str, str]:
    if args.manifest is None:
        raise RescoreError("the NeMo manifest (--manifest) to write NeMo's files", path=table.path)
    return nemo_files(table, costs, args.manifest)


FORMAT = Format(
    "nemo", "a NeMo beam-search TSV (preds_out_width*_alpha*_beta*.tsv, with --manifest)", read=_read,
    result_files=_files, result_names=lambda args: nemo_names(), manifest=True,
    side_files=lambda path: [str(Path(path).with_name(Path(path).name + NEMO_COUNTS_SUFFIX))],
    options=(
        Option("--nemo-beam", "nemo_beam", kind="count", low=1, high=MAX_BEAM, metavar="W",
               acts_on="NeMo's predictions file",
               help="With --format nemo: the beam width of a predictions file whose name does not give it "
                    "(NeMo's names: preds_out_width{W}_alpha*_beta*.tsv, preds_out_{strategy}_bw{W}*.tsv)."),
        Option("--nemo-text-processing", "nemo_text_processing", kind="steps", choices=NEMO_TEXT_PROCESSING,
               metavar="STEPS", acts_on="NeMo's manifest",
               help="With --format nemo: normalise the manifest's references as NeMo's beam-search script "
                    "normalised its predictions (its text_processing config): comma-separated among "
                    f"{', '.join(NEMO_TEXT_PROCESSING)} (applied in that order), e.g. lowercase,rm_punctuation."),
        Option("--nemo-punctuation-marks", "nemo_punctuation_marks", default=".,?", acts_on="NeMo's manifest",
               needs=("nemo_text_processing", "--nemo-text-processing (the punctuation it strips)"),
               help="With --nemo-text-processing: text_processing.punctuation_marks."),
    ))
