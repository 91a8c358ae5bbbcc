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


def test_collect_less_raises_the_young_threshold_and_never_lowers_it():
    """The commands' processes run the collector every YOUNG_OBJECTS new containers, not 700;
    a higher threshold, or the collector's automatic runs turned off (0), stay as they were."""
    import gc

    from rescore.bulk import YOUNG_OBJECTS, collect_less

    before = gc.get_threshold()
    try:
        for first, want in ((700, YOUNG_OBJECTS), (10 * YOUNG_OBJECTS, 10 * YOUNG_OBJECTS), (0, 0)):
            gc.set_threshold(first, 7, 9)
            collect_less()
            assert gc.get_threshold() == (want, 7, 9)
    finally:
        gc.set_threshold(*before)
