"""rescore-wer: agrees with jiwer, bucket table adds up, missing utterances are errors."""

from __future__ import annotations

import json

import jiwer
import pytest
from click.testing import CliRunner

from tests.conftest import shared_data_path
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
    assert sum(x["errors"] for x in b) == rep["errors"]  # S + D + I per bucket
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


def _systems(tmp_path):
    refs = {f"u{i}": f"w{i % 7} the sea is blue and long".split() for i in range(40)}
    a = {u: list(r) for u, r in refs.items()}
    for i, u in enumerate(refs):  # baseline: an error in every other utterance
        if i % 2:
            a[u][1] = "a"
    b = {u: list(r) for u, r in refs.items()}
    b["u1"] = b["u1"] + ["extra"]  # far fewer errors
    for name, rows in (("ref", refs), ("a", a), ("b", b)):
        _write(tmp_path / name, rows)
    (tmp_path / "train").write_text("the sea is blue\nthe the sea and long w1 w2\n")
    (tmp_path / "segments").write_text("".join(f"{u} rec{i // 8} 0 1\n" for i, u in enumerate(refs)))
    return refs


def test_two_systems_side_by_side(tmp_path):
    _systems(tmp_path)
    args = [str(tmp_path / "ref"), f"first-pass={tmp_path / 'a'}", f"rescored={tmp_path / 'b'}",
            "--train-text", str(tmp_path / "train"), "--buckets", "3", "--groups", str(tmp_path / "segments"),
            "--seed", "4", "--report", str(tmp_path / "r.json"), "--plot", str(tmp_path / "c.png")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [s["name"] for s in rep["systems"]] == ["first-pass", "rescored"]
    assert [s["errors"] for s in rep["systems"]] == [20, 1]
    d = rep["differences"][0]
    assert d["wer_diff"] == pytest.approx(100 * (1 - 20) / 280) and d["relative_change"] == pytest.approx(-95.0)
    boot = rep["bootstrap"]
    assert d["ci"][1] < 0 and {k: v for k, v in boot.items() if k != "note"} == {
        "draws": 1000, "seed": 4, "confidence": 0.95, "unit": "group", "grouping": "segments", "units": 5,
        "reliable": False}  # 5 recordings: fewer than 10
    assert boot["note"].startswith("only 5 recordings (by segments)")
    assert sum(b["systems"]["rescored"]["errors"] for b in rep["buckets"]) == 1
    assert "rel.change" in r.output and "-95.0 %" in r.output and "5 recordings (by segments)" in r.output
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same under the same seed; --name names the files given as paths
    r2 = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "a"), str(tmp_path / "b"), "--name",
                                   "first-pass", "--name", "rescored", *args[3:]])
    assert r2.exit_code == 0 and r2.output == r.output


def test_two_systems_bad_names(tmp_path):
    _systems(tmp_path)
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "a"), str(tmp_path / "a")])
    assert r.exit_code == 2 and "--name" in r.output
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "a"), "--name", "x", "--name", "y"])
    assert r.exit_code == 2 and "2 --name options for 1" in r.output
    (tmp_path / "segments").write_text("u0 rec0 0 1\n")
    r = CliRunner().invoke(main, [str(tmp_path / "ref"), str(tmp_path / "a"), str(tmp_path / "b"),
                                  "--groups", str(tmp_path / "segments")])
    assert r.exit_code == 1 and "a group for every utterance" in r.output and "segments" in r.output


def _dev_systems(tmp_path, recordings):
    """The real dev set's references, PocketSphinx's 1-best and the N-best's rank 1 as two
    systems; a segments file putting the utterances into ``recordings`` recordings (None: the
    set's own segments)."""
    d = shared_data_path("tts-wikitext2-dev")
    first = [ln.split(" ", 1) for ln in (d / "nbest" / "words_text").read_text().splitlines()]
    (tmp_path / "rank1").write_text("".join(f"{k[:-2]} {w}\n" for k, w in first if k.endswith("-1")))
    segments = d / "data" / "segments"
    if recordings is not None:
        utts = [ln.split()[0] for ln in (d / "data" / "text").read_text().splitlines()]
        segments = tmp_path / "segments"
        segments.write_text("".join(f"{u} rec{i % recordings} 0 1\n" for i, u in enumerate(utts)))
    return [str(d / "data" / "text"), f"ps={d / 'extra' / 'ps_1best.txt'}", f"rank1={tmp_path / 'rank1'}",
            "--groups", str(segments), "--bootstrap", "200", "--report", str(tmp_path / "r.json")]


@pytest.mark.shared_data
def test_one_recording_gives_no_interval_p_value_or_p_better(tmp_path, caplog):
    r = CliRunner().invoke(main, _dev_systems(tmp_path, 1))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    d = rep["differences"][0]
    assert d["wer_diff"] != 0 and (d["ci"], d["p_value"], d["prob_improvement"]) == (None, None, None)
    assert [s["wer_ci"] for s in rep["systems"]] == [None, None]
    assert rep["bootstrap"]["units"] == 1 and rep["bootstrap"]["reliable"] is False
    assert "no confidence interval, p-value or P(better)" in rep["bootstrap"]["note"]
    row = [ln for ln in r.output.splitlines() if ln.startswith("rank1")][0]
    assert row.split()[-3:] == ["-", "-", "-"] and "<0.001" not in r.output and "100.0 %" not in r.output
    assert "note: one recording (by segments) only" in r.output
    assert any("one recording" in m for m in caplog.messages)


@pytest.mark.shared_data
def test_five_recordings_give_an_interval_marked_unreliable(tmp_path, caplog):
    r = CliRunner().invoke(main, _dev_systems(tmp_path, 5))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    d = rep["differences"][0]
    assert d["ci"][0] < d["ci"][1] and d["p_value"] is not None and d["prob_improvement"] is not None
    assert rep["bootstrap"]["units"] == 5 and rep["bootstrap"]["reliable"] is False
    assert "note: only 5 recordings (by segments): bootstrap intervals, p-values and P(better)" in r.output
    assert "unreliable" in rep["bootstrap"]["note"] and any("only 5 recordings" in m for m in caplog.messages)


@pytest.mark.shared_data
def test_the_dev_sets_own_recordings_are_enough(tmp_path, caplog):
    r = CliRunner().invoke(main, _dev_systems(tmp_path, None))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["bootstrap"]["units"] >= 10 and rep["bootstrap"]["reliable"] is True
    assert rep["bootstrap"]["note"] is None and "note:" not in r.output
    assert not [m for m in caplog.records if m.levelname == "WARNING"]
