"""An output directory written as one set: one writer, no mix of two runs, a completion mark.

``with OutputSet(out_dir, outputs, inputs, known=...) as out:`` then write each file through
``out.path(name)`` (with any atomic writer) or ``out.open(name)``:

1. before any work (:meth:`OutputSet.check`, also run by the job when it is built): no output
   is an input or would replace one (the same path, a link to it, or a hard link), and OUT_DIR
   is not a file;
2. on entry: OUT_DIR is created and locked (``OUT_DIR/.rescore.lock``, ``flock``, removed at
   the end): a second writer fails at once with the pid of the first; the lock goes with the
   process, so a killed run leaves none held. Temporary files of killed runs (``.name.*.tmp``) are removed;
3. before the first output (a run that fails on its input leaves an older set as it was):
   ``manifest.json`` is written with ``"complete": false`` and every file an older run may have
   written (``known``) is removed, unless it is an input of this run: after a kill, the dir
   holds only files of the killed run, and a manifest that says it is incomplete;
4. on success ``manifest.json`` gets ``"complete": true``, the settings, and the size and
   SHA-256 of every input and output. On an error the outputs written so far are removed and
   the manifest says why the set is incomplete; a dir this run created and never wrote to is
   removed again.

A ``--split K/N`` job refuses a dir that holds another job's outputs (its manifest says which):
Kaldi gives each job its own dir (``archives.JOB``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import IO, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from rescore.errors import OptionError, RescoreError
from rescore.io.files import atomic_output, dumps_json, is_temporary
from rescore.io.outputs import InputGuard, check_not_input  # noqa: F401 (check_not_input: its users import it here)

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

LOCK_NAME = ".rescore.lock"
MANIFEST_NAME = "manifest.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _describe(paths: Iterable[Path]) -> List[dict]:
    out = []
    for p in paths:
        if p.is_file():
            out.append({"path": str(p), "bytes": p.stat().st_size, "sha256": sha256(p)})
    return out


def read_manifest(out_dir: PathLike) -> Optional[dict]:
    """OUT_DIR's manifest, or None when there is none (or it cannot be read)."""
    try:
        return json.loads((Path(out_dir) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def acquire_lock(directory: PathLike) -> IO:
    """Lock ``directory`` (an existing dir) for this process: ``DIR/.rescore.lock`` under flock,
    holding our pid. Returns the open lock file; :func:`release_lock` removes and releases it
    (the lock also goes with the process, so a killed run leaves none held). A dir another
    process holds is a RescoreError naming that process."""
    import fcntl  # (lazy: POSIX only; the module stays importable where there is no fcntl)

    lock_path = Path(directory) / LOCK_NAME
    while True:
        try:
            f = open(lock_path, "a+", encoding="utf-8")
        except OSError as e:
            raise RescoreError("a writable directory", path=directory, got=e.strerror or str(e)) from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                f.close()
                raise
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise RescoreError(f"an output directory that no other run is writing ({holder} holds "
                               f"{lock_path}; wait for it, or give each run its own directory)",
                               path=directory) from None
        # The holder before us removes the file as it releases it: a lock on a removed file
        # locks nothing, so lock the file that is at the path now.
        try:
            if os.fstat(f.fileno()).st_ino == os.stat(lock_path).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f


def release_lock(f: IO) -> None:
    """Remove the lock file (while still holding it) and release the lock."""
    with contextlib.suppress(OSError):
        os.unlink(f.name)
    f.close()


@contextlib.contextmanager
def dir_lock(directory: PathLike) -> Iterator[Path]:
    """Hold the lock of ``directory`` (created when missing) for the block: one writer at a
    time. Under torchrun only rank 0 takes it (the other ranks write nothing there). A dir the
    block created and left empty is removed again."""
    d = Path(directory)
    if int(os.environ.get("RANK", "0") or 0) != 0:
        yield d
        return
    for p in (d, *d.parents):
        if p.exists() and not p.is_dir():
            raise OptionError(f"a directory ({p} is a file)", option=str(d), got=str(d))
    created = not d.exists()
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RescoreError("a directory that can be created", path=d, got=e.strerror or str(e)) from None
    f = acquire_lock(d)
    try:
        yield d
    finally:
        release_lock(f)
        if created and not any(d.iterdir()):
            with contextlib.suppress(OSError):
                d.rmdir()


class OutputSet:
    """OUT_DIR as one set of ``outputs`` (file names) written by one run; see the module doc.

    inputs: every file the run reads (none may be replaced by an output; the ones inside
    OUT_DIR are kept); known: every name a run of this kind may write (an older run's are
    removed first); settings: recorded in the manifest; split: (K, N) of a --split job.
    """

    def __init__(self, out_dir: PathLike, outputs: Sequence[str], inputs: Iterable[PathLike], *,
                 known: Sequence[str] = (), settings: Optional[dict] = None,
                 split: Optional[Tuple[int, int]] = None, option: str = "OUT_DIR"):
        self.dir = Path(out_dir)
        self.outputs = list(outputs)
        self.inputs = [Path(p) for p in inputs]
        self.known = list(dict.fromkeys([*known, *outputs]))
        self.settings = settings or {}
        self.split = split
        self.option = option
        self.written: List[str] = []
        self._lock: Optional[IO] = None
        self._writing = False  # outputs begun (the old set removed, the manifest incomplete)
        self._created = False  # OUT_DIR made by this run
        self._input_guard: Optional[InputGuard] = None

    # -- checks before any work

    def check(self) -> None:
        """OptionError when OUT_DIR cannot be a directory or an output would replace an input."""
        for p in (self.dir, *self.dir.parents):
            if p.exists() and not p.is_dir():
                raise OptionError(f"a directory ({p} is a file)", option=self.option, got=str(self.dir))
        guard = self._guard()
        for name in [*self.outputs, MANIFEST_NAME]:
            check_not_input(self.dir / name, (), self.option)
            guard.check(self.dir / name, self.option)

    def _guard(self) -> InputGuard:
        if self._input_guard is None:
            self._input_guard = InputGuard(self.inputs)
        return self._input_guard

    def _is_input(self, p: Path) -> bool:
        return self._guard().input_at(p) is not None

    # -- writing

    def path(self, name: str) -> Path:
        """Where output ``name`` goes (it must be one of the outputs)."""
        if name not in self.outputs:
            raise ValueError(f"{name} is not an output of this set ({self.outputs})")
        if not self._writing:
            self._begin_writing()
        if name not in self.written:
            self.written.append(name)
        return self.dir / name

    def _begin_writing(self) -> None:
        """Before the first output: mark the set incomplete, remove an older run's outputs."""
        self._writing = True
        self._write_manifest(False, note="being written (or the run was killed): incomplete")
        self._clean_outputs()

    @contextlib.contextmanager
    def open(self, name: str, mode: str = "w") -> Iterator[IO]:
        with atomic_output(self.path(name), mode) as f:
            yield f

    def _write_manifest(self, complete: bool, **extra) -> None:
        m = {"complete": complete, "written_by": f"pid {os.getpid()}", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "settings": self.settings, "split": list(self.split) if self.split else None, **extra}
        text = dumps_json(m)
        with atomic_output(self.dir / MANIFEST_NAME, "w") as f:
            f.write(text)

    def _acquire(self) -> None:
        self._lock = acquire_lock(self.dir)

    def _release(self) -> None:
        if self._lock is not None:
            release_lock(self._lock)
            self._lock = None

    def _check_split(self) -> None:
        old = read_manifest(self.dir)
        if old is None or self.split is None:
            return
        old_split = old.get("split")
        if old_split and tuple(old_split) != tuple(self.split):
            raise RescoreError(f"a directory of its own for --split {self.split[0]}/{self.split[1]} (it holds "
                               f"the outputs of job {old_split[0]}/{old_split[1]}; Kaldi gives each job one, "
                               f"e.g. archives.JOB)", path=self.dir)

    def _clean_temporary(self) -> None:
        for entry in os.scandir(self.dir):
            if entry.is_file() and is_temporary(entry.name):
                log.info("removing %s, left by a killed run", entry.path)
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    def _clean_outputs(self) -> None:
        for name in self.known:
            p = self.dir / name
            if (p.is_file() or p.is_symlink()) and not self._is_input(p):
                if name not in self.outputs:
                    log.info("removing %s: an output of an older run that this run does not write", p)
                os.unlink(p)

    def __enter__(self) -> "OutputSet":
        self.check()
        self._created = not self.dir.exists()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RescoreError("a directory that can be created", path=self.dir, got=e.strerror or str(e)) from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise RescoreError("a writable directory", path=self.dir, got="permission denied")
        self._acquire()
        try:
            self._check_split()
            self._clean_temporary()
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                if not self._writing:
                    self._begin_writing()  # a run that writes nothing still replaces the old set
                self._write_manifest(True, inputs=_describe(self.inputs),
                                     outputs=_describe(self.dir / n for n in self.written))
                return
            if not self._writing:  # failed before writing: the dir is as it was
                return
            for name in self.written:
                with contextlib.suppress(OSError):
                    (self.dir / name).unlink()
            reason = str(exc) if isinstance(exc, RescoreError) else (exc_type.__name__ if exc_type else "")
            with contextlib.suppress(Exception):
                self._write_manifest(False, note=f"the run failed: {reason}; its outputs were removed")
        finally:
            self._release()
            if self._created and not any(self.dir.iterdir()):
                with contextlib.suppress(OSError):
                    self.dir.rmdir()
