"""Progress of long work: a tqdm bar on a terminal, a log line every few seconds in a log file.

tqdm draws only when stderr is a terminal (``disable=None``), so a job under Kaldi's run.pl or
queue.pl, nohup or a CI runner would log nothing between its start and end lines, minutes
apart. :func:`progress` returns a tqdm bar that does exactly what tqdm does on a terminal; when
stderr is not a terminal it logs instead, from a timer thread, every ``RESCORE_PROGRESS_SECONDS``
seconds (default 20, so a line at least every 30 s even while one step is slow)::

    12:01:07 rescore.progress INFO: decode: 412/627 utt (66%), 1.9 utt/s, elapsed 03:36, ETA 01:53

and one line when the work ends: ``done``, or ``interrupted`` when Ctrl-C (SIGINT, a
KeyboardInterrupt) stops it; :func:`close_interrupted` closes every bar still open that way
(the command wrapper, rescore.cli.common, calls it before it exits with status 130). On a
terminal the bar keeps ``interrupted`` as its postfix. Use it like tqdm::

    for batch in progress(batches, desc="epoch 1", unit="batch"):
        ...
    bar = progress(total=n, desc="fast", unit="hyp"); bar.update(k); bar.close()

Libraries draw bars of their own, with tqdm's default ``disable=False``: in a log that is not a
terminal each update is a frame ending in ``\r``, hundreds on one line. :func:`library_bars` is
the one place that decides theirs (the code that loads with transformers calls it first).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from typing import Iterable, Optional

from tqdm import tqdm

ENV_SECONDS = "RESCORE_PROGRESS_SECONDS"
DEFAULT_SECONDS = 20.0

log = logging.getLogger("rescore.progress")
_open: "weakref.WeakSet[Progress]" = weakref.WeakSet()  # bars not closed yet


def log_interval() -> float:
    """Seconds between progress lines in a log: $RESCORE_PROGRESS_SECONDS (> 0), else 20."""
    v = os.environ.get(ENV_SECONDS)
    if v:
        try:
            s = float(v)
            if s > 0 and s == s and s != float("inf"):
                return s
        except ValueError:
            pass
        log.warning("%s=%r is not a number of seconds > 0: using %g", ENV_SECONDS, v, DEFAULT_SECONDS)
    return DEFAULT_SECONDS


def _zero_size_terminal() -> bool:
    """stderr is a terminal that reports 0 columns (a size never set)."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns == 0
    except (OSError, ValueError, AttributeError):
        return False


class Progress(tqdm):
    """tqdm that, where tqdm stays silent because stderr is not a terminal, logs its state
    every log_interval() seconds (see the module doc). ``enabled=False`` silences both."""

    def __init__(self, iterable: Optional[Iterable] = None, *, enabled: bool = True,
                 logger: Optional[logging.Logger] = None, interval: Optional[float] = None, **kw):
        kw.setdefault("disable", None if enabled else True)
        if enabled and _zero_size_terminal():
            # a pty without a size (script under a non-terminal, some CI runners): tqdm would
            # draw a bar of 0 columns, hidden below row -1
            kw.setdefault("ncols", 80)
            kw.setdefault("nrows", 24)
        super().__init__(iterable, **kw)
        self._interrupted = False
        _open.add(self)
        # tqdm has turned itself off: no terminal (and not silenced by the caller)
        self.log_mode = bool(enabled and self.disable)
        if not self.log_mode:
            return
        self._log = logger or log
        self._desc = kw.get("desc") or "progress"
        self._unit = kw.get("unit", "it")
        self._count = kw.get("initial", 0)
        self._initial = self._count
        self._t0 = time.monotonic()
        self._closed = False
        self._stop = threading.Event()
        ref = weakref.ref(self)  # the thread must not keep an abandoned bar alive

        def tick(stop=self._stop, every=interval or log_interval()):
            while not stop.wait(every):
                bar = ref()
                if bar is None:
                    return
                bar.log_state()
                del bar

        threading.Thread(target=tick, name=f"progress {self._desc}", daemon=True).start()

    def __iter__(self):
        if not self.log_mode:
            yield from super().__iter__()
            return
        for x in self.iterable:
            yield x
            self._count += 1
        self.close()

    def update(self, n=1):
        if self.log_mode:
            self._count += n
        return super().update(n)

    def log_state(self, done: bool = False, interrupted: bool = False) -> None:
        """Log one line: count, total and percent, rate, elapsed and remaining time (or done,
        or interrupted), postfix."""
        n, total = self._count, self.total
        elapsed = time.monotonic() - self._t0
        rate = (n - self._initial) / elapsed if elapsed > 0 else 0.0
        line = f"{self._desc}: {n}" + (f"/{total}" if total else "") + f" {self._unit}"
        if total:
            line += f" ({100.0 * n / total:.0f}%)"
        line += f", {rate:.3g} {self._unit}/s, elapsed {tqdm.format_interval(elapsed)}"
        if interrupted:
            line += ", interrupted"
        elif done:
            line += ", done"
        elif total and rate > 0:
            line += f", ETA {tqdm.format_interval((total - n) / rate)}"
        if getattr(self, "postfix", None):
            line += f"; {self.postfix}"
        self._log.info("%s", line)

    def close(self):
        # closed while Ctrl-C unwinds the work (a finally, a with block), or by close_interrupted
        interrupted = getattr(self, "_interrupted", False) or isinstance(sys.exc_info()[1], KeyboardInterrupt)
        _open.discard(self)
        if getattr(self, "log_mode", False) and not self._closed:
            self._closed = True
            self._stop.set()
            if interrupted:
                self.log_state(interrupted=True)
            elif time.monotonic() - self._t0 >= 1.0:  # only work long enough to matter
                self.log_state(done=True)
        elif interrupted and not self.disable:
            self.set_postfix_str("interrupted", refresh=False)  # tqdm draws it as it closes
        super().close()


def close_interrupted() -> None:
    """Close every bar still open, its last line saying ``interrupted`` (not ``done``): what a
    command does when Ctrl-C stops it (a bar that a loop or the GC would close later, after the
    command has said it was interrupted)."""
    for bar in list(_open):
        bar._interrupted = True
        bar.close()


def progress(iterable: Optional[Iterable] = None, *, enabled: bool = True, **kw) -> Progress:
    """A :class:`Progress` bar (tqdm's arguments: total, desc, unit, initial, leave, ...)."""
    return Progress(iterable, enabled=enabled, **kw)


def _library_bar(iterable: Optional[Iterable] = None, *args, **kw) -> Progress:
    """tqdm's signature, this module's rule: a bar on a terminal, log lines in a log."""
    return progress(iterable, *args, **kw)


def library_bars() -> None:
    """The bars of the libraries rescore loads models with, by this module's rule:

    - transformers' own bars (weights and shards loading) and huggingface_hub's (downloads): off,
      on a terminal too; the commands log what they load.
    - transformers' conversion of a GGUF file (a minute for a 135M model, no other sign of life):
      its tqdm is replaced by :func:`progress`, a bar on a terminal and a log line every
      log_interval() seconds in a log (the module reads ``tqdm`` from its globals at each call).

    A no-op where transformers is not installed."""
    try:
        from transformers.utils import logging as tf_logging
    except ImportError:
        return
    tf_logging.disable_progress_bar()  # (and huggingface_hub's)
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_loading
    except ImportError:
        return
    if hasattr(gguf_loading, "tqdm"):
        gguf_loading.tqdm = _library_bar
