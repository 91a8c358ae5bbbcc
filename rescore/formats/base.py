"""What a format declares (rescore.formats.registry collects the declarations): its name, its
reader and its writer of result files, and the readers' own options, which the commands turn
into their options (rescore.cli.formats). Plain data: no click, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class ReadOptions:
    """How to read another recognizer's output: the values of the readers' options (each
    declared by its format as an :class:`Option` naming its field; docs/ecosystems.md)."""

    nemo_beam: Optional[int] = None  # W where the file name does not give it
    nemo_text_processing: Tuple[str, ...] = ()  # NeMo's normalisation of the references
    nemo_punctuation_marks: str = ".,?"
    espnet_tokens: Optional[str] = None  # bpe | char | word: join ESPnet's 'token' without a 'text'
    speaker: Optional[int] = None  # ESPnet multi-speaker: read speaker k's <n>best_recog_spk<k>


@dataclass(frozen=True)
class WriteArgs:
    """What the writers of result files may need besides the table and its costs."""

    manifest: Optional[str] = None  # NeMo's manifest (its files follow it)
    refs: Optional[Mapping[str, Sequence[str]]] = None  # references (icefall's errs file), else the table's
    test_set: str = ""  # icefall's test set name in its file names (default: from the input's name)
    speaker: Optional[int] = None  # ESPnet's speaker k of a multi-speaker decode
    suffix: Optional[str] = None  # icefall's params.suffix in its file names


@dataclass(frozen=True)
class Option:
    """An option of a format's reader, as the commands offer it (rescore.cli.formats).

    kind: ``count`` an integer in [low, high]; ``choice`` one of ``choices``; ``steps``
    comma-separated names among ``choices`` (a tuple, in the order given); ``text`` a string.
    ``acts_on``: what it reads, for the error when given for another format; ``needs``: the
    field of another option (of the same format) it needs to act, and what to say then."""

    flag: str  # e.g. '--nemo-beam'
    field: str  # the ReadOptions field it sets
    help: str
    acts_on: str
    kind: str = "text"
    choices: Tuple[str, ...] = ()
    low: int = 1
    high: Optional[int] = None
    metavar: Optional[str] = None
    default: Optional[str] = None
    needs: Optional[Tuple[str, str]] = None  # (field, what)


@dataclass(frozen=True)
class Format:
    """One recognizer's format: ``read(path, manifest, options)`` gives its table (None: Kaldi,
    read by rescore.nbest.tables, which needs rescore.nbest); ``result_files(table, costs, args)``
    its result files ({name: text}) and ``result_names(args)`` their names, where it has result
    files; ``options`` its reader's options; ``side_files(path)`` the files a read may open
    besides ``path`` (an input of the run, never an output); ``manifest``: it needs one, to read
    and to write its result files (which follow it); ``refs``: its result files need references."""

    name: str
    what: str  # what an input of the format is, for --help and errors
    read: Optional[Callable[..., object]] = None
    result_files: Optional[Callable[..., Dict[str, str]]] = None
    result_names: Optional[Callable[[WriteArgs], List[str]]] = None
    options: Tuple[Option, ...] = ()
    side_files: Optional[Callable[[str], List[str]]] = None
    manifest: bool = False
    refs: bool = False
