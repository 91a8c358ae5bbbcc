"""What every command shares (rescore.cli.common): --version, and `error: ...` with exit 2 for a
bad option, the same way in every command."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from click.testing import CliRunner

import rescore
import rescore.cli

COMMANDS = sorted(m.name for m in pkgutil.iter_modules(rescore.cli.__path__)
                  if hasattr(importlib.import_module(f"rescore.cli.{m.name}"), "main"))


def test_every_command_is_found():
    assert {"nbest", "tune", "wer", "ppl", "train_lm", "make_nbest", "tts_data"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_version(name):
    main = importlib.import_module(f"rescore.cli.{name}").main
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and rescore.__version__ in r.output and "rescore" in r.output


@pytest.mark.parametrize("name", COMMANDS)
def test_unknown_option_is_error_exit_2(name):
    main = importlib.import_module(f"rescore.cli.{name}").main
    r = CliRunner().invoke(main, ["--no-such-option"])
    assert r.exit_code == 2
    assert r.output.startswith("error: ") and "--no-such-option" in r.output and "--help" in r.output
    assert "Traceback" not in r.output
