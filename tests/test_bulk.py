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


def test_a_command_run_as_a_program_ends_without_teardown_but_with_its_exit_handlers(tmp_path):
    """A command run as a program (click reads sys.argv) ends by rescore.bulk.exit_now: its exit
    status, its output flushed, the exit handlers run (here one that writes a file); run with
    explicit arguments (as tests and callers do) it raises SystemExit as click's commands do."""
    import subprocess
    import sys
    import textwrap


    from rescore.cli.common import command

    script = textwrap.dedent(f"""
        import atexit, sys
        import click
        from rescore.cli.common import command
        atexit.register(lambda: open({str(tmp_path / 'handler-ran')!r}, 'w').close())

        @command()
        @click.argument("n", type=int)
        def main(n):
            print("printed " * 1000, end="")  # (buffered: a pipe)
            sys.stderr.write("to stderr")
            return n

        main()
    """)
    p = subprocess.run([sys.executable, "-c", script, "3"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and p.stdout == "printed " * 1000 and p.stderr == "to stderr"
    assert (tmp_path / "handler-ran").exists()

    @command()
    def quiet():
        return 0

    with pytest.raises(SystemExit) as e:
        quiet.main(args=[])
    assert e.value.code == 0
