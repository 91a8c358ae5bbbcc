"""rescore-tune: tune on one half, report on the other, write params rescore-nbest reads."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import NBEST_SMALL, shared_data_path
from rescore.cli.nbest import main as nbest_main
from rescore.cli.tune import main


def test_split_half_params_out_and_apply(tmp_path):
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--split-half",
                                  "--inv-acwts", "8,10,12", "--wips", "0", "--params-out", str(tmp_path / "p.json"),
                                  "--report", str(tmp_path / "r.json"),
                                  "--apply-to", str(NBEST_SMALL), str(tmp_path / "applied"),
                                  "--apply-data-dir", str(NBEST_SMALL / "data")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["dev_utts"] == 3 and rep["held_out_utts"] == 2 and len(rep["grid"]) == 3
    assert "held out 2 utterances" in r.output
    p = json.loads((tmp_path / "p.json").read_text())
    applied = json.loads((tmp_path / "applied" / "report.json").read_text())
    assert applied["params"] == {k: p[k] for k in ("weight", "inv_acwt", "wip")}
    r = CliRunner().invoke(nbest_main, [str(NBEST_SMALL), str(tmp_path / "again"), "--data-dir",
                                        str(NBEST_SMALL / "data"), "--params", str(tmp_path / "p.json")])
    assert r.exit_code == 0
    assert (tmp_path / "again" / "text").read_text() == (tmp_path / "applied" / "text").read_text()


def test_utt_lists_and_bad_grid(tmp_path):
    (tmp_path / "dev").write_text("rec1-rms-000\nrec1-rms-001\nrec2-awb-000\n")
    (tmp_path / "eval").write_text("rec1-rms-002\nrec2-awb-001\n")
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--dev-utts", str(tmp_path / "dev"), "--eval-utts", str(tmp_path / "eval")])
    assert r.exit_code == 0, r.output
    assert "tuned on 3 utterances" in r.output and "held out 2 utterances" in r.output
    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--wips", "a:b"])
    assert r.exit_code == 2 and "--wips" in r.output


@pytest.mark.shared_data
def test_shared_dev_tuned_on_first_half_reported_on_second(tmp_path):
    d = shared_data_path("tts-wikitext2-dev")
    r = CliRunner().invoke(main, [str(d / "nbest"), "--data-dir", str(d / "data"), "--split-half",
                                  "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["dev_conversations"] == 30 and rep["held_out_conversations"] == 30
    assert rep["dev_utts"] + rep["held_out_utts"] == 627
    # the default grid holds the decoder's own setting, so tuning cannot do worse on the tuned half
    own = next(g for g in rep["grid"] if g["inv_acwt"] == 9.5 and g["wip"] == 0.0)
    assert rep["dev_wer"] <= own["wer"]
