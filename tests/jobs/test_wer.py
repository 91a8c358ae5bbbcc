"""rescore-wer's job (rescore.jobs.wer.WerJob): checked when built, and the work of the command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rescore.cli.wer import main
from rescore.errors import OptionError
from rescore.jobs.wer import WerJob


def _texts(tmp_path):
    (tmp_path / "ref").write_text("a x y\nb z w\n")
    (tmp_path / "hyp1").write_text("a x\nb z w\n")
    (tmp_path / "hyp2").write_text("a x y\nb z q\n")
    return str(tmp_path / "ref"), str(tmp_path / "hyp1"), str(tmp_path / "hyp2")


def test_the_job_prints_what_the_command_prints(tmp_path):
    ref, h1, h2 = _texts(tmp_path)
    job = WerJob(ref_text=ref, systems=(("one", h1), ("two", h2)), draws=50, report=str(tmp_path / "r.json"))
    text = job.run()
    saved = json.loads((tmp_path / "r.json").read_text())
    r = CliRunner().invoke(main, [ref, f"one={h1}", f"two={h2}", "--bootstrap", "50",
                                  "--report", str(tmp_path / "r2.json")])
    assert r.exit_code == 0, r.output
    assert r.output == text + "\n"
    assert json.loads((tmp_path / "r2.json").read_text()) == saved


@pytest.mark.parametrize("kw, option", [(dict(systems=()), "HYP_TEXT"),
                                        (dict(num_buckets=0), "--buckets"),
                                        (dict(confidence=1.0), "--confidence"),
                                        (dict(report="REF"), "--report"),
                                        (dict(plot="HYP"), "--plot")])
def test_a_bad_job_is_refused_before_any_work(tmp_path, kw, option):
    ref, h1, _ = _texts(tmp_path)
    kw = {k: {"REF": ref, "HYP": h1}.get(v, v) if isinstance(v, str) else v for k, v in kw.items()}
    before = (tmp_path / "ref").read_bytes(), (tmp_path / "hyp1").read_bytes()
    with pytest.raises(OptionError, match=option):
        WerJob(**{"ref_text": ref, "systems": (("one", h1),), **kw})
    assert ((tmp_path / "ref").read_bytes(), (tmp_path / "hyp1").read_bytes()) == before
