"""Building a large structure of plain objects (an N-best set, its encoded hypotheses, the
sentences of a training text) without CPython's cyclic garbage collector running meanwhile,
and keeping the collector off such a structure while a job uses it.

The collector looks for reference cycles. It runs every 700 net new container objects (lists,
dicts, instances) and, each time the objects that survived grow by a quarter, walks every
container of the process. Building a structure of a million objects that all survive therefore
walks the growing structure again and again: on the dev N-best set (62,631 hypotheses, 1.2M
words) that was more CPU time than the reading itself (load_nbest_dir 1.6 CPU-s, 0.6 with the
collector paused). The structures built here hold no cycles (lists of strings, numbers and
dataclasses), so pausing the collector while they are built changes nothing but the time: the
collector runs again afterwards, on whatever it finds then.

It then still walks the structure a few times more (as young objects, and in each later walk of
everything), about 0.5 CPU-s in a rescore-nbest run of the dev set: :func:`gc_frozen` keeps it
off every object that exists when a block starts (the loaded set) until the block ends.

Elsewhere (importing PyTorch, the engine's many small tensors and lists, the report's
alignments) the collector still ran about 700 times in such a run, 1.1 CPU-s in all:
:func:`collect_less` has the commands run it every 20,000 net new containers instead
(17 times, 0.4 CPU-s). Cyclic garbage, which none of these structures makes, waits longer.

At exit, CPython tears the interpreter down: one last collection and every object freed one by
one, about 1 CPU-s after a rescore-nbest run of the dev set. A command that has finished has no
use for that: :func:`exit_now` runs the exit handlers, flushes, and leaves the memory to the
system.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The block runs with the cyclic garbage collector off (module doc); it is on again after
    the block, also when the block raises, where it was on before (nested blocks nest)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """The block runs with every object that exists at its start out of the cyclic garbage
    collector's sight (gc.freeze); they are back in its oldest generation after the block
    (gc.unfreeze), so nothing is kept longer than the block. Objects made in the block are
    collected as usual. Where objects are frozen already (by the program), it does nothing."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


YOUNG_OBJECTS = 20_000  # net new containers between two collections of the youngest generation


def collect_less() -> None:
    """Run the cyclic collector less often in this process (module doc): every YOUNG_OBJECTS
    net new containers instead of CPython's 700; never more often than it was."""
    first, *older = gc.get_threshold()
    if first:  # (0: the program turned it off)
        gc.set_threshold(max(first, YOUNG_OBJECTS), *older)


def exit_now(code: int) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
    """End the process with exit status ``code`` without tearing the interpreter down (module
    doc): threads not marked daemon are waited for and the exit handlers run (logging's,
    temporary files'), as at a normal exit; stdout and stderr are flushed."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (a closed pipe: nothing more can reach it)
            pass
    os._exit(code)
