"""rescore-wer: agrees with jiwer, bucket table adds up, missing utterances are errors."""

from __future__ import annotations

import json

import jiwer
import pytest
from click.testing import CliRunner

from conftest import shared_data_path
from rescore.cli.wer import main


def _write(p, rows):
    p.write_text("".join(f"{u} {' '.join(w)}\n" for u, w in rows.items()))


@pytest.mark.shared_data
def test_shared_dev_first_pass_against_jiwer(tmp_path):
    d = shared_data_path("tts-wikitext2-dev")
    train = shared_data_path("wikitext2-asr", "train.txt")
    refs = dict(line.split(" ", 1) for line in (d / "data" / "text").read_text().splitlines())
    # PocketSphinx's own 1-best, a real system output
    hyps = {}
    for line in (d / "extra" / "ps_1best.txt").read_text().splitlines():
        u, _, w = line.partition(" ")
        hyps[u] = w
    r = CliRunner().invoke(main, [str(d / "data" / "text"), str(d / "extra" / "ps_1best.txt"),
                                  "--train-text", str(train), "--report", str(tmp_path / "r.json"),
                                  "--plot", str(tmp_path / "b.png")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    keys = sorted(refs)
    o = jiwer.process_words([refs[u] for u in keys], [hyps[u] for u in keys])
    assert rep["wer"] / 100 == pytest.approx(jiwer.wer([refs[u] for u in keys], [hyps[u] for u in keys]))
    assert (rep["substitutions"], rep["deletions"], rep["insertions"]) == (o.substitutions, o.deletions, o.insertions)
    b = rep["buckets"]
    assert len(b) == 10 and sum(x["ref_tokens"] for x in b) == rep["ref_words"]
    assert sum(x["errors"] for x in b) + sum(x["insertions"] for x in b) == rep["errors"]
    assert (tmp_path / "b.png").stat().st_size > 1000
    assert "%WER" in r.output and "total" in r.output


def test_missing_and_extra_utterances(tmp_path):
    _write(tmp_path / "ref", {"a": ["x", "y"], "b": ["z"]})
    _write(tmp_path / "hyp", {"a": ["x"]})
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "hyp")])
    assert r.exit_code == 1 and "error:" in r.output and "'b'" in r.output
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "hyp"), "--allow-missing"])
    assert r.exit_code == 0 and "%WER 66.67 [ 2 / 3" in r.output
    _write(tmp_path / "hyp", {"a": ["x", "y"], "b": ["z"], "c": ["q"]})
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "hyp")])
    assert r.exit_code == 1 and "'c'" in r.output


def test_duplicate_utterance_names_file_and_line(tmp_path):
    (tmp_path / "ref").write_text("a x y\nb z\na q\n")
    _write(tmp_path / "hyp", {"a": ["x"]})
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "hyp")])
    assert r.exit_code == 1 and f"{tmp_path / 'ref'}:3:" in r.output
