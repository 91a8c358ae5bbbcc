"""An N-best dir as conversations of utterances of hypotheses, checked line by line.

The dir's files (its archives, text or binary, gzipped or indexed by an scp, and its words.txt)
are found by rescore.formats.kaldi, the Kaldi format's home. Keys are ``<utt>-<k>`` with
k = 1..n in one contiguous block per utterance, and every archive lists the same keys in the
same order: Kaldi's own scripts join archives with ``paste`` and never check, so we do.

Conversations (the engine carries LM state along them, in this order):

* with ``segments``: one conversation per recording, recordings sorted by id, utterances by start
  time (then id);
* else with ``utt2spk``: one conversation per speaker, speakers sorted by id, utterances by id;
* else (no data dir, or one without either file): each utterance is its own conversation, in
  N-best file order -- we will not invent context that nobody vouched for.

A share of the set (``load_nbest_dir(select=...)``, a ``rescore-nbest --split K/N`` job): the
conversations come from the keys of the reference archive (``words_text``, else ``words``) and
the data dir, as for the whole set, so every job cuts the same conversations; then only the
share's entries are parsed (rescore.io.kaldi's ``keep``). What is checked where:

* everywhere, by every job, with the whole set's message: the keys of every archive (form,
  order, k contiguous, the same keys in every archive, empty lines, duplicates), the containers
  (gzip stream, binary entries, scp lines), and the data dir (references, segments, speakers of
  every N-best utterance) -- a fault there changes what the shares are, so no job may go on;
* in the share only: the values (costs, word ids, words against words.txt, UTF-8 of a line
  whose key is plain ASCII). A bad value is the error of the one job that owns its
  conversation, with the whole set's message and line; the other jobs do not read it and
  succeed. ``$cmd JOB=1:N`` fails when one job fails, so the run as a whole finds every fault
  the whole-set read finds (with several faults a job may name a data-dir one first: it reads
  the data dir before the archives).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from rescore.bulk import gc_paused
from rescore.errors import RescoreError
from rescore.formats.kaldi import ARCHIVE_KINDS as _KIND, KaldiDir, kaldi_dir
from rescore.io.kaldi import (DataDir, Table, read_data_dir, read_table, table_container, text_table_fields,
                              text_table_lines)
from rescore.io.symbols import read_symbol_table
from rescore.metrics.compare import NbestWords

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

@dataclass
class Hypothesis:
    """One N-best entry. Costs are Kaldi costs (negated natural-log scores).

    key: ``<utt>-<k>``; words: the hypothesis' words (no sentence boundaries);
    ac: acoustic cost (unscaled); withlm: graph cost incl. the first-pass LM;
    nolm: graph cost with that LM removed (so withlm - nolm is the n-gram LM cost).
    """

    __slots__ = ("key", "words", "ac", "withlm", "nolm")
    key: str
    words: List[str]
    ac: float
    withlm: float
    nolm: float


@dataclass
class Utterance:
    """An utterance's hypotheses in rank order (hyps[0] is k = 1)."""

    id: str
    hyps: List[Hypothesis]


@dataclass
class Conversation:
    """Utterances in the order the LM state is carried along them."""

    id: str
    utterances: List[Utterance]


@dataclass
class NbestSet:
    """A loaded N-best dir. refs is utt -> reference words, or None without a data/text."""

    path: str
    conversations: List[Conversation]
    refs: Optional[Dict[str, List[str]]] = None
    grouping: str = "utterance"  # how conversations were formed: segments | utt2spk | utterance
    # a set read from a table (rescore.nbest.tables.to_nbest_set): (the table's file,
    # hypothesis key -> its line, cost -> the column it comes from), where an overflow of the
    # interpolation names its input (rescore.nbest.combine.CostArrays); None: a Kaldi N-best dir
    source_table: Optional[Tuple[str, Dict[str, int], Dict[str, str]]] = None
    kaldi: Optional[KaldiDir] = None  # a Kaldi N-best dir's files (rescore.formats.kaldi); None: a table's set

    def utterances(self) -> Iterator[Utterance]:
        """All utterances, conversation by conversation, in carry order."""
        for c in self.conversations:
            yield from c.utterances

    @property
    def num_utts(self) -> int:
        return sum(len(c.utterances) for c in self.conversations)

    def words(self) -> NbestWords:
        """The set as the metrics read it (its words, references and conversations; no costs)."""
        return NbestWords(self.path, {u.id: [h.words for h in u.hyps] for u in self.utterances()}, self.refs,
                          self.grouping, {u.id: c.id for c in self.conversations for u in c.utterances})

    @property
    def num_hyps(self) -> int:
        return sum(len(u.hyps) for u in self.utterances())

    def subset(self, conversation_ids: Sequence[str]) -> "NbestSet":
        """The same set restricted to some conversations (kept in this set's order)."""
        keep = set(conversation_ids)
        convs = [c for c in self.conversations if c.id in keep]
        refs = None
        if self.refs is not None:
            utts = {u.id for c in convs for u in c.utterances}
            refs = {k: v for k, v in self.refs.items() if k in utts}
        return NbestSet(self.path, convs, refs, self.grouping, self.source_table, self.kaldi)

    def subset_utts(self, utt_ids: Sequence[str]) -> "NbestSet":
        """The same set restricted to some utterances (conversations keep their order)."""
        keep = set(utt_ids)
        convs = []
        for c in self.conversations:
            us = [u for u in c.utterances if u.id in keep]
            if us:
                convs.append(Conversation(c.id, us))
        refs = None if self.refs is None else {k: v for k, v in self.refs.items() if k in keep}
        return NbestSet(self.path, convs, refs, self.grouping, self.source_table, self.kaldi)


def _split_key(t: Table, i: int) -> tuple:
    key = t.keys[i]
    utt, sep, k = key.rpartition("-")
    if not sep or not utt or not (k.isascii() and k.isdigit()) or int(k) < 1:
        raise t.error(i, "a key '<utt>-<k>' with k >= 1", got=key)
    return utt, int(k)


def _utterance_blocks(t: Table) -> List[tuple]:
    """[(utt, first index, count)] in file order; checks k = 1..n in one contiguous block."""
    blocks = _utterance_blocks_in_bulk(t.keys)
    if blocks is not None:
        return blocks
    blocks = []  # a fault somewhere: key by key, to name it
    seen: Dict[str, int] = {}
    for i in range(len(t)):
        utt, k = _split_key(t, i)
        if blocks and blocks[-1][0] == utt:
            u, start, n = blocks[-1]
            if k != n + 1:
                raise t.error(i, f"key '{utt}-{n + 1}' (k contiguous from 1)", got=t.keys[i])
            blocks[-1] = (u, start, n + 1)
        else:
            if utt in seen:
                raise t.error(i, f"the hypotheses of '{utt}' in one block (it already started at "
                                 f"line {t.lines[seen[utt]]})", got=t.keys[i])
            if k != 1:
                raise t.error(i, f"key '{utt}-1' (first hypothesis of a new utterance)", got=t.keys[i])
            seen[utt] = i
            blocks.append((utt, i, 1))
    return blocks


def _utterance_blocks_in_bulk(keys: List[str]) -> Optional[List[tuple]]:
    """_utterance_blocks of well-formed keys, a block at a time instead of a key at a time;
    None at the first irregularity (the key-by-key loop then names it)."""
    parts = [k.rpartition("-") for k in keys]
    utts = [p[0] for p in parts]
    ks = [p[2] for p in parts]
    digits = "".join(ks)
    if "" in utts or "" in ks or not (digits.isascii() and digits.isdigit()):
        return None
    nums = list(map(int, ks))
    blocks, start = [], 0
    for utt, run in itertools.groupby(utts):
        n = sum(1 for _ in run)
        if nums[start:start + n] != list(range(1, n + 1)):
            return None
        blocks.append((utt, start, n))
        start += n
    if len({b[0] for b in blocks}) != len(blocks):  # an utterance in two blocks
        return None
    return blocks


def check_same_keys(ref: Table, other: Table) -> None:
    """Raise a RescoreError at the first place other's keys differ from ref's (same order)."""
    if other.keys == ref.keys:
        return
    ref_set, other_set = set(ref.keys), set(other.keys)
    for i in range(min(len(ref), len(other))):
        if ref.keys[i] != other.keys[i]:
            got = other.keys[i]
            if got not in ref_set:
                raise other.error(i, f"key '{ref.keys[i]}' as at line {ref.lines[i]} of {ref.path} "
                                     f"(this key is not in {ref.path}: extra key)", got=got)
            if ref.keys[i] not in other_set:
                raise other.error(i, f"key '{ref.keys[i]}' as at line {ref.lines[i]} of {ref.path} "
                                     f"(missing key)", got=got)
            raise other.error(i, f"key '{ref.keys[i]}' as at line {ref.lines[i]} of {ref.path} "
                                 f"(same keys in the same order)", got=got)
    if len(other) > len(ref):
        i = len(ref)
        raise other.error(i, f"end of archive ({ref.path} has {len(ref)} entries): extra key", got=other.keys[i])
    # other is shorter: point just past its last entry.
    missing = ref.keys[len(other)]
    line = (other.lines[-1] + 1) if other.lines else 1
    where = f"{other.path} (binary entry {line})" if other.binary else other.path
    raise RescoreError(f"key '{missing}' as at line {ref.lines[len(other)]} of {ref.path} (missing key)",
                       path=where, line=None if other.binary else line, got="end of archive")


def _words_from_ids(words: Table, words_txt: Path, indices: Sequence[int]) -> List[Optional[List[str]]]:
    """The words (through words_txt) of the entries ``indices`` of ``words`` (ids), by entry
    (None for the others); ``words`` already mapped (kind "tokens", _words_through): its values."""
    if words.kind == "tokens":
        return words.values
    sym = read_symbol_table(words_txt)
    id2w = {i: w for w, i in sym.items()}
    out: List[Optional[List[str]]] = [None] * len(words)
    for i in indices:
        ids = words.values[i]
        try:
            out[i] = list(map(id2w.__getitem__, ids))
        except KeyError:
            bad = next(x for x in ids if x not in id2w)
            raise words.error(i, f"word ids of {words_txt}", got=f"id {bad} (not in {words_txt})") from None
    return out


def _words_through(path: Path, words_txt: Path, words_text: Optional[Table]) -> Optional[Table]:
    """The ``words`` archive at path with its ids mapped through words_txt (as int2sym.pl maps
    them), in bulk: a Table of kind "tokens", its keys checked as read_table checks them.
    None unless it is a text archive without a fault whose every id is in words_txt, written
    as Kaldi writes ids (str(id): no sign, no leading zero); read_table and _words_from_ids
    then read it as ids, each at its point of load_nbest_dir, and name any fault as before.
    words_text: the ``words_text`` archive where there is one (_words_as_in)."""
    try:
        if table_container(path) != "text":
            return None
        symbols = read_symbol_table(words_txt)
    except RescoreError:  # (raised again where the ids are read and mapped)
        return None
    if words_text is not None:
        same = _words_as_in(path, symbols, words_text)
        if same is not None:
            return same
    split = text_table_fields(path)
    if split is None:
        return None
    keys, rows = split
    word_of = {str(i): w for w, i in symbols.items()}  # each id as Kaldi writes it -> its word
    try:
        words = [list(map(word_of.__getitem__, r)) for r in rows]
    except KeyError:
        return None
    t = Table(path=str(path), kind="tokens", keys=keys, values=words)
    t.check_unique_keys()
    return t


def _words_as_in(path: Path, symbols: Dict[str, int], words_text: Table) -> Optional[Table]:
    """_words_through of the common case, text against text: where every line of the ``words``
    archive is ``key id id ...`` (trailing spaces aside) made of the same line of words_text
    through symbols (a one-to-one map), its ids map to words_text's words, line for line: a
    Table of words_text's keys and words. None otherwise (the ids are then split and mapped)."""
    id_text = {w: str(i) for w, i in symbols.items()}
    try:
        made = [" ".join([k, *map(id_text.__getitem__, v)]) for k, v in zip(words_text.keys, words_text.values)]
    except KeyError:  # a word that is not in words.txt
        return None
    lines = text_table_lines(path)
    if lines is None or [ln.rstrip(" ") for ln in lines] != made:
        return None
    return Table(path=str(path), kind="tokens", keys=list(words_text.keys), values=words_text.values)


Select = Callable[[List[str]], Sequence[str]]  # conversation ids in carry order -> those to keep


def load_nbest_dir(
    nbest_dir: Union[PathLike, KaldiDir],
    data_dir: Optional[PathLike] = None,
    words_txt: Optional[PathLike] = None,
    *,
    allow_missing: bool = False,
    select: Optional[Select] = None,
) -> NbestSet:
    """Read and check an N-best dir (+ its data dir) into conversations; see the module doc.

    nbest_dir: the dir, or its files as found already (rescore.formats.kaldi.kaldi_dir, which
    then holds the words.txt: words_txt must be None).
    words_txt: needed to read ``words`` (int ids); when ``words_text`` is present too, every
    line of the two must agree. Defaults to NBEST_DIR/words.txt, NBEST_DIR/lang/words.txt or
    NBEST_DIR/../lang/words.txt when one exists.
    allow_missing: references in data/text without an N-best are dropped with a warning instead
    of being an error.
    select: for a job that scores a share of the set (``rescore-nbest --split``): a function of
    every conversation id, in carry order, that returns the ids to keep. The result is the
    whole set's ``subset(select(ids))``, but only the kept conversations' entries are parsed
    (module doc, "A share of the set").
    """
    if isinstance(nbest_dir, KaldiDir):
        if words_txt is not None:
            raise ValueError("words_txt is the KaldiDir's")
        files = nbest_dir
    else:
        files = kaldi_dir(nbest_dir, words_txt)
    with gc_paused():  # (a million objects that all survive: rescore.bulk)
        return _load(files, data_dir, allow_missing, select)


def _load(files: KaldiDir, data_dir: Optional[PathLike], allow_missing: bool, select: Optional[Select]) -> NbestSet:
    """load_nbest_dir's work."""
    _check_files(files)
    nd, paths, words_txt = files.path, files.archives, files.words_txt
    log.info("reading N-best dir %s", nd)
    ref_name = "words_text" if paths["words_text"] is not None else "words"
    share = None if select is None else _choose_share(paths[ref_name], _KIND[ref_name], data_dir, select)
    keep = None if share is None else share.keep

    tables: Dict[str, Table] = {}
    for n in ("words_text", "words"):
        if paths[n] is None:
            continue
        # the ids mapped to words at once where they can be (_words_through), else read as ids
        t = (_words_through(paths[n], Path(words_txt), tables.get("words_text"))
             if n == "words" and keep is None and words_txt else None)
        tables[n] = t if t is not None else read_table(paths[n], _KIND[n], keep=keep)
    ref = tables[ref_name]
    if share is None or ref.keys != share.ref_keys.keys:  # (changed between the two reads: check again)
        blocks = _utterance_blocks(ref)
    else:
        blocks = share.blocks
    for n in ("acwt", "lmwt.withlm", "lmwt.nolm", "ali"):
        if paths[n] is not None:
            tables[n] = read_table(paths[n], _KIND[n], keep=keep)
    for n, t in tables.items():
        if t is not ref:
            check_same_keys(ref, t)
    kept_blocks = blocks if share is None else [b for b in blocks if b[0] in share.utts]
    indices = (range(len(ref)) if share is None else
               [i for _, start, n in kept_blocks for i in range(start, start + n)])
    words = _hypothesis_words(tables, paths, words_txt, indices)

    ac, withlm, nolm = (tables[n].values for n in ("acwt", "lmwt.withlm", "lmwt.nolm"))
    utts: Dict[str, Utterance] = {}
    for utt, start, n in kept_blocks:
        hyps = [Hypothesis(ref.keys[i], words[i], ac[i], withlm[i], nolm[i]) for i in range(start, start + n)]
        utts[utt] = Utterance(utt, hyps)
    return _nbest_set(files, data_dir, share, utts, [u for u, _, _ in blocks], len(ref), len(indices),
                      allow_missing)


def _check_files(files: KaldiDir) -> None:
    """An N-best dir's files checked: the dir, the three cost archives, one of the word
    archives, a words.txt for ``words`` alone."""
    nd, paths = files.path, files.archives
    if not nd.is_dir():
        raise RescoreError("an N-best directory", path=nd, got="no such directory")
    for n in ("acwt", "lmwt.withlm", "lmwt.nolm"):
        if paths[n] is None:
            raise RescoreError(f"archive '{n}' (or {n}.gz / {n}.scp ...)", path=nd, got="not found")
    if paths["words"] is None and paths["words_text"] is None:
        raise RescoreError("archive 'words' or 'words_text'", path=nd, got="neither found")
    if files.ids_only and files.words_txt is None:
        raise RescoreError("words.txt to map 'words' ids (give --words-txt)", path=paths["words"])


@dataclass
class _Share:
    """The share of the set a ``select`` keeps, cut from the keys of every job's set."""

    data: Optional[DataDir]  # the data dir, read
    groups: list  # the kept [(conversation id, its utterance ids)], in carry order
    grouping: str  # what the conversations come from (segments, utt2spk, utterance)
    utts: set  # the kept utterances
    keep: Callable[[str], bool]  # whether an archive key is the share's
    ref_keys: Table  # the reference archive's keys (no values)
    blocks: list  # its (utterance, first index, count) blocks


def _choose_share(ref_path: Path, kind: str, data_dir: Optional[PathLike], select: Select) -> _Share:
    """The conversations from every key of the reference archive and the data dir (the same in
    every job); only the share's values are parsed afterwards."""
    ref_keys = read_table(ref_path, kind, keep=lambda key: False)
    blocks = _utterance_blocks(ref_keys)
    data = read_data_dir(data_dir) if data_dir is not None else None
    groups, grouping = _conversation_groups(data, [u for u, _, _ in blocks])
    chosen = set(select([g for g, _ in groups]))
    groups = [(g, us) for g, us in groups if g in chosen]
    share = {u for _, us in groups for u in us}
    # the share's keys (a key of another archive that is not in the reference archive is not
    # read: check_same_keys names it)
    kept_keys = {ref_keys.keys[i] for u, start, n in blocks if u in share for i in range(start, start + n)}
    return _Share(data, groups, grouping, share, kept_keys.__contains__, ref_keys, blocks)


def _hypothesis_words(tables: Dict[str, Table], paths: Dict[str, Optional[Path]],
                      words_txt: Optional[PathLike], indices: Sequence[int]) -> List[List[str]]:
    """The words of every hypothesis (those at ``indices`` filled in): ``words_text``, checked
    against ``words`` mapped through words.txt, or against words.txt alone; else ``words``
    mapped."""
    if "words_text" not in tables:
        return _words_from_ids(tables["words"], Path(words_txt), indices)  # type: ignore[arg-type]
    wt = tables["words_text"]
    words = wt.values
    if "words" in tables:
        if words_txt is None:
            log.warning("no words.txt: cannot check %s against %s", paths["words"], paths["words_text"])
        else:
            from_ids = _words_from_ids(tables["words"], Path(words_txt), indices)
            for i in indices if from_ids != words else ():  # (equal, as a rule: one C-level test)
                if from_ids[i] != words[i]:
                    raise wt.error(i, f"the words of line {tables['words'].lines[i]} of "
                                      f"{tables['words'].path} mapped through {words_txt}: "
                                      f"'{' '.join(from_ids[i])}'", got=" ".join(words[i]))
    elif words_txt is not None:
        # words_text alone: its words come from int2sym.pl over words.txt, so a word missing
        # there is a mismatch of the two (the wrong words.txt, or an edited archive)
        known = read_symbol_table(words_txt)
        every = known.keys() >= set(itertools.chain.from_iterable(map(words.__getitem__, indices)))
        for i in indices if not every else ():  # (a word not in words.txt: find the first)
            bad = next((w for w in words[i] if w not in known), None)
            if bad is not None:
                raise wt.error(i, f"words of {words_txt}", got=f"{bad!r} (not in {words_txt})")
    return words


def _nbest_set(files: KaldiDir, data_dir: Optional[PathLike], share: Optional[_Share], utts: Dict[str, Utterance],
               all_utts: List[str], n_hyps: int, n_kept: int, allow_missing: bool) -> NbestSet:
    """The set of the read utterances: references and conversations from the data dir."""
    data = share.data if share is not None else None
    if data is None and data_dir is not None:
        data = read_data_dir(data_dir)
    refs = None
    if data is not None:
        refs = _references(data, all_utts, allow_missing)
        if refs is not None and share is not None:
            refs = {u: r for u, r in refs.items() if u in share.utts}
    if share is None:
        groups, grouping = _conversation_groups(data, list(utts))
    else:
        groups, grouping = share.groups, share.grouping
    convs = [Conversation(g, [utts[u] for u in us]) for g, us in groups]
    if share is None:
        log.info("%d hypotheses, %d utterances, %d conversations (grouped by %s)",
                 n_hyps, len(utts), len(convs), grouping)
    else:
        log.info("%d of the %d hypotheses, %d of the %d utterances, %d conversations (grouped by %s)",
                 n_kept, n_hyps, len(utts), len(all_utts), len(convs), grouping)
    return NbestSet(str(files.path), convs, refs, grouping, kaldi=files)


def _references(data: DataDir, utts: Sequence[str], allow_missing: bool) -> Optional[Dict[str, List[str]]]:
    """utt -> reference words for the N-best utterances ``utts`` (file order), checked both ways."""
    if data.text is None:
        return None
    text_path = str(Path(data.path) / "text")
    for u in utts:
        if u not in data.text:
            raise RescoreError(f"a reference for N-best utterance '{u}'", path=text_path, got="none")
    known = set(utts)
    extra = [u for u in data.text if u not in known]
    if extra and not allow_missing:
        raise RescoreError(f"an N-best for every reference (or allow missing ones); {len(extra)} have none, "
                           f"e.g. '{extra[0]}'", path=text_path)
    if extra:
        log.warning("%d references have no N-best and are left out, e.g. %s", len(extra), extra[0])
    return {u: data.text[u] for u in utts}


def _conversation_groups(data: Optional[DataDir], order: List[str]) -> tuple:
    """([(conversation id, its utterance ids in carry order)] in carry order, grouping) of the
    N-best utterances ``order`` (file order); see the module doc."""
    if data is not None and data.segments is not None:
        seg_path = str(Path(data.path) / "segments")
        groups: Dict[str, list] = {}
        for u in order:
            if u not in data.segments:
                raise RescoreError(f"a segment for N-best utterance '{u}'", path=seg_path, got="none")
            reco, start, _ = data.segments[u]
            groups.setdefault(reco, []).append((start, u))
        return [(r, [u for _, u in sorted(groups[r])]) for r in sorted(groups)], "segments"
    if data is not None and data.utt2spk is not None:
        u2s_path = str(Path(data.path) / "utt2spk")
        groups = {}
        for u in order:
            if u not in data.utt2spk:
                raise RescoreError(f"a speaker for N-best utterance '{u}'", path=u2s_path, got="none")
            groups.setdefault(data.utt2spk[u], []).append(u)
        return [(s, sorted(groups[s])) for s in sorted(groups)], "utt2spk"
    return [(u, [u]) for u in order], "utterance"


def assemble_set(path: PathLike, utts: Sequence[Utterance], data_dir: Optional[PathLike] = None, *,
                 refs: Optional[Dict[str, List[str]]] = None, allow_missing: bool = False) -> NbestSet:
    """An NbestSet of utterances read from another format (rescore.formats), in their
    order, with references and conversations from the data dir as load_nbest_dir forms them
    (``refs``: the input's own references, used without a data dir 'text')."""
    data = read_data_dir(data_dir) if data_dir is not None else None
    order = [u.id for u in utts]
    if data is not None and data.text is not None:
        refs = _references(data, order, allow_missing)
    groups, grouping = _conversation_groups(data, order)
    by_id = {u.id: u for u in utts}
    return NbestSet(str(path), [Conversation(g, [by_id[u] for u in us]) for g, us in groups], refs, grouping)
