"""Any input of rescore-nbest as an interchange table (rescore.io.interchange.NbestTable): a Kaldi
N-best dir (read and checked as rescore.nbest.sets loads it), an interchange file or another
recognizer's decode output (rescore.io.ecosystems)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from rescore.errors import RescoreError
from rescore.io.ecosystems import (FORMATS, KALDI_COLUMNS, PathLike, ReadOptions, input_format, read_espnet,
                                   read_icefall, read_nemo)
from rescore.io.interchange import Hypothesis, NbestTable, Utterance, parse_score, read_nbest_table
from rescore.io.kaldi import read_text_table
from rescore.nbest.sets import find_archive, load_nbest_dir


def _key_parts(key: str) -> Tuple[str, int]:
    utt, _, k = key.rpartition("-")
    return utt, int(k)


def kaldi_to_table(nbest_dir: PathLike, words_txt: Optional[PathLike] = None) -> NbestTable:
    """A Kaldi N-best dir (read and checked by rescore.nbest.sets.load_nbest_dir) as a table with
    columns ac, graph, nolm, in the dir's order; the scores of text archives keep their text."""
    nbest = load_nbest_dir(nbest_dir, words_txt=words_txt)
    texts: Dict[str, Dict[str, str]] = {}
    for col, name in KALDI_COLUMNS.items():
        p = find_archive(nbest_dir, name)
        texts[col] = {}
        if p is None or p.name.endswith(".scp"):
            continue
        try:  # a text archive's number texts; a binary archive fails here, or gives none that match below
            t = read_text_table(p, "tokens")
        except RescoreError:
            continue
        texts[col] = {k: v[0] for k, v in zip(t.keys, t.values) if len(v) == 1 and parse_score(v[0]) is not None}
    utts = []
    for u in nbest.utterances():
        hyps = []
        for h in u.hyps:
            scores = (h.ac, h.withlm, h.nolm)
            own = tuple(texts[c].get(h.key) for c in KALDI_COLUMNS)
            # a kept text must read back to the float the archive reader found
            own = tuple(t if t is not None and float(t) == x else None for t, x in zip(own, scores))
            hyps.append(Hypothesis(_key_parts(h.key)[1], list(h.words), scores, own))
        utts.append(Utterance(u.id, hyps))
    return NbestTable(str(nbest_dir), tuple(KALDI_COLUMNS), utts)


def load_table(path: PathLike, fmt: str = "auto", manifest: Optional[PathLike] = None,
               words_txt: Optional[PathLike] = None, options: ReadOptions = ReadOptions()) -> NbestTable:
    """Read any input of rescore-nbest as a table (FORMATS; manifest: NeMo's; options: the
    readers' own, rescore.io.ecosystems.ReadOptions)."""
    fmt = input_format(path, fmt)
    if fmt == "interchange":
        return read_nbest_table(path)
    if fmt == "kaldi":
        return kaldi_to_table(path, words_txt)
    if fmt == "espnet":
        return read_espnet(path, tokens=options.espnet_tokens, speaker=options.speaker)
    if fmt == "icefall":
        return read_icefall(path)
    if fmt == "nemo":
        if manifest is None:
            raise RescoreError("the NeMo manifest of the decoded set (--manifest)", path=path)
        return read_nemo(path, manifest, options.nemo_beam, options.nemo_text_processing,
                         options.nemo_punctuation_marks)
    raise ValueError(f"format must be one of {FORMATS}")
