"""rescore.bulk: the cyclic garbage collector paused while a structure is built, kept off it while a job uses it."""

from __future__ import annotations

import gc

import pytest

from rescore.bulk import gc_frozen, gc_paused


def test_gc_paused_and_frozen_blocks_restore_the_collector():
    """The collector is back as it was after each block, also after an error."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError):
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                pass
            assert not gc.isenabled()
            raise RuntimeError
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_frozen():
            assert gc.get_freeze_count() > 0
            raise RuntimeError
    assert gc.get_freeze_count() == 0
