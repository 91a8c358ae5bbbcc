"""tools/bench/bench_scaling.py: the truncated N-best dirs it scores (the first U utterances in carry
order, the first N hypotheses of each) read back as exactly those entries; its parsing of the
engine's log line; its plan shares a point between sweeps; one tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from rescore.nbest.sets import load_nbest_dir

from tools.bench import bench_scaling  # noqa: E402


@pytest.mark.parametrize("n_utts, n_hyps", [(1, 1), (2, 2), (4, 3), (5, 100)])
def test_write_subset_keeps_the_first_utterances_and_hypotheses(nbest_small, tmp_path, n_utts, n_hyps):
    full = load_nbest_dir(nbest_small, nbest_small / "data")
    out = bench_scaling.write_subset(full, nbest_small / "data", tmp_path / "sub", n_utts, n_hyps,
                                     nbest_small / "words.txt")
    sub = load_nbest_dir(out / "nbest", out / "data")  # words and words_text both written: checked to agree
    want = list(full.utterances())[:n_utts]
    got = list(sub.utterances())
    assert [u.id for u in got] == [u.id for u in want]
    for u, w in zip(got, want):
        assert len(u.hyps) == min(n_hyps, len(w.hyps))
        for h, hw in zip(u.hyps, w.hyps):
            assert (h.key, h.words, h.ac, h.withlm, h.nolm) == (hw.key, hw.words, hw.ac, hw.withlm, hw.nolm)
    # the conversations (carry order) and the references of the kept utterances only
    assert [[u.id for u in c.utterances] for c in sub.conversations] == \
        [ids for ids in ([u.id for u in c.utterances if u.id in {x.id for x in want}] for c in full.conversations)
         if ids]
    assert sub.refs == {u.id: full.refs[u.id] for u in want}
    listed = [u for line in (out / "data" / "spk2utt").read_text().splitlines() for u in line.split()[1:]]
    assert sorted(listed) == sorted(u.id for u in want)


def test_write_subset_refuses_more_utterances_than_the_set(nbest_small, tmp_path):
    full = load_nbest_dir(nbest_small, nbest_small / "data")
    with pytest.raises(ValueError, match="6 utterances"):
        bench_scaling.write_subset(full, nbest_small / "data", tmp_path / "sub", 6, 1)


def test_parse_engine_log():
    log = ("00:01:02 rescore.engine INFO: reading\n"
           "00:01:09 rescore.engine INFO: 9993 hypotheses, 193752 tokens: 71388 rows computed in 323 forward calls\n")
    assert bench_scaling.parse_engine_log(log) == {"hyps": 9993, "tokens": 193752, "rows": 71388, "calls": 323}
    with pytest.raises(ValueError, match="no engine line"):
        bench_scaling.parse_engine_log("00:01:02 rescore.engine INFO: reading\n")


def test_fit_line():
    assert bench_scaling.fit_line([1, 2, 4], [3, 5, 9]) == pytest.approx((1.0, 2.0))
    assert bench_scaling.fit_line([7], [2.5]) == (2.5, 0.0)


def test_plan_runs_a_point_shared_by_two_sweeps_once():
    args = bench_scaling.parse_args(["--out-dir", "x", "--ns", "1,100", "--utts", "50,627",
                                     "--vocab-utts", "100", "--carries", "rescored"])
    points = bench_scaling.plan(args, 627)
    n_top = next(p for p in points if p["sweep"] == "n" and p["n"] == 100)
    u_top = next(p for p in points if p["sweep"] == "utts" and p["model"] == "10k" and p["utts"] == 627)
    assert n_top["runs_as"] == u_top["runs_as"]
    assert {p["utts"] for p in points if p["sweep"] == "utts" and p["model"] != "10k"} == {100}
    assert sorted(p["model"] for p in points if p["sweep"] == "startup") == ["10k", "30k-class", "30k-none"]


@pytest.mark.slow
def test_a_tiny_run_writes_the_table_the_json_and_the_plot(nbest_small, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tools.bench.bench_scaling", "--out-dir", str(out),
           "--nbest-dir", str(nbest_small), "--data-dir", str(nbest_small / "data"),
           "--vocab-text", str(nbest_small / "data" / "text"), "--models", "10k", "--carries", "rescored",
           "--ns", "1,3", "--utts", "1,5", "--n-fixed", "3", "--repeat", "1"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO_ROOT)
    res = json.loads((out / "results.json").read_text())
    assert len(res["results"]) == 3  # u1-n3 (start-up, U sweep), u5-n1 (N sweep), u5-n3 (both sweeps)
    for r in res["results"].values():
        assert r["rows_equal_trie"] and r["cpu_s"] > 0 and r["peak_rss_mib"] > 50
    assert res["results"]["10k-rescored-u5-n1"]["rows"] == res["results"]["10k-rescored-u5-n1"]["tokens"]
    assert "| n | 10k | rescored | 5 | 3 |" in (out / "table.md").read_text()
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"
