"""The one registry of N-best formats: their names, which are read and which written as result
files, how an input's format is found, and the readers' options (each format declares its own
in its module: rescore.formats.<name>.FORMAT). The commands (rescore.cli.formats) and the job
(rescore.jobs.nbest) read it; nothing else lists the formats.

* **kaldi** (rescore.formats.kaldi): a Kaldi N-best dir; read as a set by rescore.nbest.sets,
  as a table by rescore.nbest.tables.kaldi_to_table (both need rescore.nbest); written back by
  ``rescore-convert-nbest --to kaldi``.
* **tsv** (rescore.formats.tsv): the N-best TSV file every format converts to, and rescore-nbest's
  scores.tsv.
* **espnet**, **icefall**, **nemo** (rescore.formats.espnet, .icefall, .nemo): another
  recognizer's output, read as a table, and the rescored 1-best written back as that recognizer's
  own result files (``rescore-nbest --write-format``, ``rescore-convert-nbest --to``), so that its
  scoring scripts run on them unchanged.

pyctcdecode's and Hugging Face ``generate()``'s beams are written as TSV files from the user's
own decode loop (rescore.formats.pyctcdecode, rescore.formats.hf_generate): they have no reader
of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Tuple

from rescore.formats import espnet, icefall, kaldi, nemo, tsv
from rescore.formats.base import Format, Option, WriteArgs
from rescore.formats.table import Costs, NbestTable, PathLike

FORMATS: Dict[str, Format] = {f.name: f for f in (kaldi.FORMAT, tsv.FORMAT, espnet.FORMAT, icefall.FORMAT,
                                                   nemo.FORMAT)}
ALIASES = {"interchange": "tsv"}  # the TSV format's first name, still accepted
NAMES = tuple(FORMATS)  # (the formats an input may be in)
RESULT_FORMATS = tuple(n for n, f in FORMATS.items() if f.result_files is not None)
OPTIONS: Tuple[Option, ...] = tuple(o for f in FORMATS.values() for o in f.options)  # the readers' options
# the result files of an earlier run that do not depend on the input's name (icefall's do)
KNOWN_RESULT_FILES = tuple(n for n in espnet.espnet_names() if n != "text") + tuple(nemo.nemo_names())


def canonical(fmt: str) -> str:
    """A format's name, an alias (ALIASES) as the name it stands for; 'auto' stays."""
    return ALIASES.get(fmt, fmt)


def input_format(path: PathLike, fmt: str = "auto") -> str:
    """The format of an input: ``fmt`` unless 'auto' (an alias as its name), else a file is a
    TSV file, a dir a Kaldi dir."""
    if fmt != "auto":
        return canonical(fmt)
    return "tsv" if Path(path).is_file() else "kaldi"


def side_files(path: PathLike, fmt: str) -> List[str]:
    """The files a read of ``path`` in ``fmt`` may open besides it (NeMo's counts)."""
    f = FORMATS[canonical(fmt)]
    return f.side_files(str(path)) if f.side_files is not None else []


def result_files(fmt: str, table: NbestTable, costs: Costs, args: WriteArgs = WriteArgs()) -> Dict[str, str]:
    """The result files ({name: text}) of format ``fmt`` (RESULT_FORMATS) of a table ranked by
    ``costs`` (rescore.formats.table.ranked)."""
    f = FORMATS[fmt]
    if f.result_files is None:
        raise ValueError(f"format must be one of {RESULT_FORMATS}")
    return f.result_files(table, costs, args)


def result_names(fmt: str, args: WriteArgs = WriteArgs()) -> List[str]:
    """The names of result_files' files, known before the table is read."""
    return FORMATS[fmt].result_names(args)


def write_files(out, files: Mapping[str, str]) -> List[str]:
    """Write ``files`` ({name: text}, names relative to the dir) into ``out``, a
    rescore.io.outdir.OutputSet (each file atomically, the dir as one set). Returns the names."""
    for name, text in files.items():
        with out.open(name) as f:
            f.write(text)
    return list(files)
