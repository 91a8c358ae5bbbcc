"""Every file and directory a command writes is written here: whole or not at all, and a rerun
cleans what a killed run left.

* :func:`atomic_output` -- one file: a temporary name beside the target
  (``.NAME.rescore-tmp.PID.RANDOM``), written, flushed and fsynced, then renamed onto the target
  (and the directory fsynced), so a reader never sees half a file (a target that is a device or
  a FIFO, e.g. ``/dev/stdout``, is written as it is). The file gets the permissions
  any ``open()`` would give it (``0666 & ~umask``; ``mkstemp`` alone makes ``0600``). A disk
  that is full or a file-size limit (``ENOSPC``, ``EDQUOT``, ``EFBIG``) and a directory that
  cannot be written are RescoreErrors naming the file.
* :func:`write_json` -- JSON through :func:`atomic_output`; NaN and infinities are refused (JSON
  has no such numbers, and ``Infinity`` in a report hides a bug).
* :class:`DirReplacement` -- a directory written whole (rescore-import-lm's model dir): built in
  a temporary dir beside the target, then put in its place. The target may be absent, an empty
  dir, or an earlier output of the same kind (it holds the command's marker file) that holds
  none of the run's inputs: a dir of other files is never replaced, and an input inside the old
  output is never deleted (both are refused before any work).
* :class:`OutputSet` -- an output dir written file by file as one set (rescore-nbest,
  rescore-convert-nbest into a dir), described below.

Temporary names carry the pid of their writer: each writer first removes the temporaries of
its target whose writer is gone (:func:`remove_leftovers`: a killed run's), never those of a run
still going. ``RESCORE_KILL_AT=POINT[:N]`` (a testing hook) makes a run kill itself (SIGKILL)
the N-th time it reaches POINT: ``write`` (a temporary file written, before its rename) or
``swap`` (a replaced dir's old version moved aside, the new one not yet in its place).

**OutputSet**: one writer, no mix of two runs, a completion mark.
``with OutputSet(out_dir, outputs, inputs, known=...) as out:`` then write each file through
``out.path(name)`` (with any atomic writer) or ``out.open(name)``:

1. before any work (:meth:`OutputSet.check`, also run by the job when it is built): no output
   is an input or would replace one (the same path, a link to it, or a hard link), and OUT_DIR
   is not a file;
2. on entry: OUT_DIR is created and locked (``OUT_DIR/.rescore.lock``, ``flock``, removed at
   the end): a second writer fails at once with the pid of the first; the lock goes with the
   process, so a killed run leaves none held. Temporary files of killed runs are removed;
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
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from rescore.errors import OptionError, RescoreError
from rescore.io.outputs import InputGuard, check_not_input  # noqa: F401 (check_not_input: its users import it here)

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

LOCK_NAME = ".rescore.lock"
MANIFEST_NAME = "manifest.json"

TMP_TAG = "rescore-tmp"  # .NAME.rescore-tmp.PID.RANDOM: a file or dir being written
OLD_TAG = "rescore-old"  # .NAME.rescore-old.PID.RANDOM: a replaced dir, being removed
_LEFTOVER = re.compile(rf"\.(?P<name>.+)\.(?:{TMP_TAG}|{OLD_TAG})\.(?P<pid>\d+)\.[^.]+\Z", re.S)
KILL_ENV = "RESCORE_KILL_AT"
# errors of a write that found no room: a full disk, a quota, the file-size limit (ulimit -f)
NO_ROOM = tuple(e for e in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e is not None)
_reached: Counter = Counter()


def kill_point(name: str) -> None:
    """The testing hook of the module doc: SIGKILL this process at the N-th ``name``."""
    spec = os.environ.get(KILL_ENV)
    if not spec or spec.partition(":")[0] != name:
        return
    _reached[name] += 1
    if _reached[name] == int(spec.partition(":")[2] or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary name of this module (a file or dir being written, or a
    replaced dir being removed)."""
    return _LEFTOVER.match(name) is not None


def _gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # (EPERM: a process of another user)
        return False
    return False


def remove_leftovers(directory: PathLike, name: Optional[str] = None) -> List[str]:
    """Remove the temporaries in ``directory`` (of target ``name`` only, where given) whose
    writer is gone: what a killed run left. Returns their names."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:  # (no such dir yet: nothing left there)
        return removed
    for entry in entries:
        m = _LEFTOVER.match(entry.name)
        if m is None or (name is not None and m.group("name") != name) or not _gone(int(m.group("pid"))):
            continue
        log.info("removing %s, left by a killed run", entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        removed.append(entry.name)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where the system lets a dir be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{TMP_TAG}.{os.getpid()}."


def no_room(path: PathLike, err: OSError) -> RescoreError:
    """The RescoreError of a write to ``path`` that found no room (``err.errno`` in NO_ROOM)."""
    return RescoreError("room to write the file (free disk space, and a file-size limit above its size)",
                        path=path, got=f"{err.strerror or err}")


def cannot_write(path: PathLike, err: OSError) -> RescoreError:
    """The RescoreError of an output that cannot be created (a missing or read-only dir, no permission)."""
    return RescoreError("a path where a file can be written", path=path, got=f"{err.strerror or err}")


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_write(path, e) from None


def _is_special(path: Path) -> bool:
    """An existing target that is not a regular file: a device (/dev/stdout, /dev/null), a FIFO."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


@contextlib.contextmanager
def _open_special(path: Path, mode: str) -> Iterator[IO]:
    try:
        f = open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except OSError as e:
        raise cannot_write(path, e) from None
    try:
        with f:
            yield f
    except OSError as e:
        if e.errno in NO_ROOM:
            raise no_room(path, e) from None
        raise


@contextlib.contextmanager
def atomic_output(path: PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only if the block succeeds
    (module doc). The file ends with mode ``0666 & ~umask``, as a plain ``open(path, "w")``
    would leave it."""
    path = Path(path)
    if _is_special(path):  # /dev/stdout, a FIFO: written as it is (a rename would replace the node)
        with _open_special(path, mode) as f:
            yield f
        return
    _make_parent(path)
    remove_leftovers(path.parent, path.name)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path))
    except OSError as e:
        raise cannot_write(path, e) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            if not f.closed:  # (a wrapper, e.g. wave's, may close it itself)
                f.flush()
                os.fsync(f.fileno())
        kill_point("write")
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if e.errno in NO_ROOM:
            raise no_room(path, e) from None
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _non_finite(obj: Any, where: str = "") -> str:
    """The JSON path of the first NaN or infinity in obj, or ''."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "(top level)"
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _non_finite(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return ""


def dumps_json(obj: Any) -> str:
    """``obj`` as indented JSON text with a final newline; a NaN or infinity is a RescoreError."""
    bad = _non_finite(obj)
    if bad:
        raise RescoreError(f"finite numbers to write as JSON ({bad} is not)")
    return json.dumps(obj, indent=1, allow_nan=False) + "\n"


def write_json(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically; NaN or infinity anywhere is refused (and
    nothing is written)."""
    text = dumps_json(obj)
    with atomic_output(path, "w") as f:
        f.write(text)


class DirReplacement:
    """The directory ``target`` written whole (module doc): ``with DirReplacement(...) as tmp:``
    write every file into ``tmp``; on success it takes ``target``'s place.

    marker: the file name that marks an earlier output of this kind (it must be among the files
    written); inputs: every file the run reads (none may lie in the replaced dir); option: the
    name of the target in errors; kind: what an earlier output is, in errors.
    """

    def __init__(self, target: PathLike, marker: str, inputs: Iterable[PathLike], option: str = "OUT_DIR",
                 kind: str = "an earlier output of this command"):
        self.target = Path(target)
        self.kind = kind
        self.marker = marker
        self.inputs = [Path(p) for p in inputs if p is not None]
        self.option = option
        self.tmp: Optional[Path] = None

    def check(self) -> None:
        """Before any work: the target can be replaced (an OptionError where it cannot)."""
        t = self.target
        for p in (t, *t.parents):
            if p.exists() and not p.is_dir():
                raise OptionError(f"a directory ({p} is a file)", option=self.option, got=str(t))
        if not t.is_dir():
            return
        names = [e.name for e in os.scandir(t)]
        if names and self.marker not in names:
            raise OptionError(f"a new or empty directory, or {self.kind} (with {self.marker}); "
                              f"a directory of other files is never replaced", option=self.option, got=str(t))
        guard = InputGuard(self.inputs)
        for dirpath, _, filenames in os.walk(t):
            for f in filenames:
                inp = guard.input_at(Path(dirpath) / f)
                if inp is not None:
                    raise OptionError(f"an output directory that holds none of the inputs (it holds {inp}, which "
                                      f"replacing it would delete)", option=self.option, got=str(t))

    def __enter__(self) -> Path:
        self.check()
        _make_parent(self.target)
        remove_leftovers(self.target.parent, self.target.name)
        try:
            self.tmp = Path(tempfile.mkdtemp(dir=self.target.parent, prefix=_temp_prefix(self.target)))
        except OSError as e:
            raise cannot_write(self.target, e) from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        tmp = self.tmp
        if exc_type is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in NO_ROOM:  # (a library's writer into tmp)
                raise no_room(self.target, exc) from None
            return
        try:
            self._finish(tmp)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError) and e.errno in NO_ROOM:
                raise no_room(self.target, e) from None
            raise

    def _finish(self, tmp: Path) -> None:
        """Whole files with the umask's modes (mkdtemp's and some writers' are private), then
        the swap: an empty or absent target is replaced by one rename; an earlier output is
        moved aside, the new dir renamed in, the old one removed."""
        mask = _umask()
        for dirpath, dirs, files in os.walk(tmp):
            for f in files:
                p = os.path.join(dirpath, f)
                os.chmod(p, 0o666 & ~mask)
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for d in dirs:
                os.chmod(os.path.join(dirpath, d), 0o777 & ~mask)
        tmp.chmod(0o777 & ~mask)
        if not (tmp / self.marker).is_file():
            raise ValueError(f"{self.marker} must be written into the dir")
        _fsync_dir(tmp)
        t = self.target
        if t.is_dir() and any(t.iterdir()):
            self.check()  # (again, just before the old one goes)
            old = tmp.with_name(tmp.name.replace(f".{TMP_TAG}.", f".{OLD_TAG}.", 1))
            os.rename(t, old)
            kill_point("swap")
            try:
                os.rename(tmp, t)
            except OSError:
                os.rename(old, t)  # (the earlier output back in its place)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, t)  # (rename replaces an empty dir)
        _fsync_dir(t.parent)


def sha256(path: PathLike) -> str:
    """The SHA-256 of a file, hex: the one digest of the package (an output dir's manifest, an
    imported GGUF file, the training text a checkpoint's data position refers to)."""
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
        """Temporaries of killed runs in OUT_DIR and in the subdirs of its outputs (1best_recog/)."""
        for d in dict.fromkeys([self.dir, *((self.dir / n).parent for n in self.known)]):
            remove_leftovers(d)

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
