"""Every console script of setup.cfg ends its --help with an example that runs it, as Kaldi's
steps end their usage message with one (`e.g.: ...`)."""

from __future__ import annotations

import configparser
import importlib

import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from rescore.cli.examples import EXAMPLES


def console_scripts() -> dict:
    """name -> (module, attribute) of every console script in setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    scripts = {}
    for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = (part.strip() for part in line.partition("="))
        module, _, attr = target.partition(":")
        scripts[name] = (module, attr)
    return scripts


SCRIPTS = console_scripts()


def help_text(name: str, sub: list) -> str:
    module, attr = SCRIPTS[name]
    command = getattr(importlib.import_module(module), attr)
    result = CliRunner().invoke(command, sub + ["--help"], prog_name=name, terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def assert_ends_with_example(text: str, command_line: str) -> None:
    lines = text.rstrip("\n").splitlines()
    assert "e.g.:" in [line.strip() for line in lines], f"no 'e.g.:' example in:\n{text}"
    example = lines[[line.strip() for line in lines].index("e.g.:") + 1:]
    assert example, f"nothing after 'e.g.:' in:\n{text}"
    assert example[0].strip().startswith(command_line + " "), \
        f"the example should start with '{command_line}', got: {example[0].strip()}"
    # The example is the last thing: no option or paragraph after it.
    assert all(line.startswith("    ") or line.strip().startswith(command_line.split()[0])
               for line in example), f"the help goes on after its example:\n{text}"


def test_every_console_script_is_listed():
    assert len(SCRIPTS) >= 9 and all(name.startswith("rescore-") for name in SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_ends_with_an_example(name):
    assert_ends_with_example(help_text(name, []), name)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_subcommands_end_with_their_example(name):
    module, attr = SCRIPTS[name]
    command = getattr(importlib.import_module(module), attr)
    for sub in sorted(getattr(command, "commands", {})):
        assert_ends_with_example(help_text(name, [sub]), f"{name} {sub}")


def option_names(command) -> set:
    return {opt for p in command.params for opt in list(p.opts) + list(p.secondary_opts)}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_use_only_real_options(name):
    """Every --option of an example is one of its command's (so the examples cannot rot)."""
    script, *sub = name.split()
    module, attr = SCRIPTS[script]
    command = getattr(importlib.import_module(module), attr)
    for line in EXAMPLES[name].splitlines():
        words = line.replace("\\", " ").split()
        if words[0] == script:  # a line of its own names the command (and its subcommand)
            target = command.commands[words[1]] if hasattr(command, "commands") else command
        used = {w.split("=", 1)[0] for w in words if w.startswith("--")}
        assert used <= option_names(target), f"{name}: not options of it: {sorted(used - option_names(target))}"
