"""The one registry of N-best formats (rescore.formats.registry): every format declared once, in
its own module; the commands' choices and the readers' options made from it; the TSV format also
by its former name, 'interchange', with the same outputs."""

from __future__ import annotations

import dataclasses

from click.testing import CliRunner

from tests.conftest import NBEST_SMALL
from rescore.cli.convert import convert
from rescore.cli.formats import FORMAT_CHOICES
from rescore.cli.nbest import main as rescore_nbest
from rescore.formats import espnet, icefall, kaldi, nemo, tsv
from rescore.formats.base import ReadOptions
from rescore.formats.registry import ALIASES, FORMATS, OPTIONS, RESULT_FORMATS, input_format


def test_each_format_is_declared_once_in_its_own_module():
    modules = {"kaldi": kaldi, "tsv": tsv, "espnet": espnet, "icefall": icefall, "nemo": nemo}
    assert list(FORMATS) == list(modules)
    for name, module in modules.items():
        assert FORMATS[name] is module.FORMAT
    assert RESULT_FORMATS == ("espnet", "icefall", "nemo")
    assert FORMATS["kaldi"].read is None  # (read by rescore.nbest: it needs the N-best set's checks)
    assert all(FORMATS[n].read is not None for n in ("tsv", "espnet", "icefall", "nemo"))


def test_every_reader_option_sets_a_field_of_read_options_once():
    fields = [f.name for f in dataclasses.fields(ReadOptions)]
    assert sorted(o.field for o in OPTIONS) == sorted(fields)
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)


def test_the_commands_take_their_choices_and_options_from_the_registry():
    assert FORMAT_CHOICES == ("auto", *FORMATS, *ALIASES)
    for command in (rescore_nbest, convert):
        names = {o for p in command.params for o in p.opts}
        assert {o.flag for o in OPTIONS} <= names
    choices = {p.name: p.type.choices for p in rescore_nbest.params if p.name in ("input_format", "write_format")}
    assert choices == {"input_format": FORMAT_CHOICES, "write_format": RESULT_FORMATS}


def test_the_former_name_interchange_reads_and_writes_as_tsv(tmp_path):
    assert input_format(NBEST_SMALL, "interchange") == "tsv"
    assert input_format(tmp_path, "auto") == "kaldi"
    runner = CliRunner()
    for to, name in (("tsv", "a.tsv"), ("interchange", "b.tsv")):
        r = runner.invoke(convert, [str(NBEST_SMALL), str(tmp_path / name), "--to", to])
        assert r.exit_code == 0, r.output
    assert (tmp_path / "a.tsv").read_bytes() == (tmp_path / "b.tsv").read_bytes()
    for fmt, out in (("tsv", "ka"), ("interchange", "kb")):
        r = runner.invoke(convert, [str(tmp_path / "a.tsv"), str(tmp_path / out), "--from", fmt, "--to", "kaldi"])
        assert r.exit_code == 0, r.output
    assert (tmp_path / "ka" / "acwt").read_bytes() == (tmp_path / "kb" / "acwt").read_bytes()
