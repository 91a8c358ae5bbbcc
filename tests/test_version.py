"""One version: rescore.__version__ is the only place it is written; the package metadata reads it
(setup.cfg `attr:`), every command's --version prints it, and the changelog's newest release and
the citation file name it."""

from __future__ import annotations

import configparser
import re

import pytest
from click.testing import CliRunner

import rescore
from tests.conftest import REPO_ROOT
from tests.cli.test_help import SCRIPTS


def test_setup_cfg_reads_the_version_from_the_package():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    assert cfg["metadata"]["version"].strip() == "attr: rescore.__version__"


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", rescore.__version__)


def test_changelog_newest_release_is_the_version():
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert releases, "CHANGELOG.md: no '## [X.Y.Z] - YYYY-MM-DD' release heading"
    assert releases[0][0] == rescore.__version__


def test_citation_file_names_the_version():
    import yaml

    cff = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text())
    assert str(cff["version"]) == rescore.__version__
    assert cff["license"] == "Apache-2.0"
    titles = {r["title"] for r in cff["references"]}
    assert "Neural Language Modeling with Implicit Cache Pointers" in titles
    assert "Get To The Point: Summarization with Pointer-Generator Networks" in titles


def test_license_file_is_the_license_setup_cfg_names():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    assert cfg["metadata"]["license"].strip() == "Apache-2.0"
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_prints_the_version(name):
    import importlib

    module, attr = SCRIPTS[name]
    r = CliRunner().invoke(getattr(importlib.import_module(module), attr), ["--version"], prog_name=name)
    assert r.exit_code == 0, r.output
    # "NAME (rescore) VERSION"; click resolves NAME once per process for the option all commands
    # share, so in one test process only the version part is compared
    assert r.output.strip().endswith(f" (rescore) {rescore.__version__}"), r.output
