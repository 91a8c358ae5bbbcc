"""The one ranking rule (rescore.nbest.tables.ranking_costs): every writer of a recognizer's files
picks the 1-best rescore-nbest picks, for the columns the table has, or names the missing one."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.errors import RescoreError
from rescore.formats.tsv import read_nbest_table
from rescore.formats.base import WriteArgs
from rescore.formats.registry import result_files
from rescore.nbest.tables import kaldi_to_table, ranking_costs


def _one_best(table, costs):
    return {u.id: " ".join(min(u.hyps, key=lambda h: (costs[(u.id, h.rank)], h.rank)).words)
            for u in table.utterances}


def _text(path):
    return dict((line.split(" ", 1) + [""])[:2] for line in path.read_text().splitlines())


def _manifest(tmp_path, table):
    p = tmp_path / "manifest.json"
    p.write_text("".join(json.dumps({"audio_filepath": f"/a/{u.id}.wav", "duration": 1.0, "text": "x"}) + "\n"
                         for u in table.utterances))
    return p


def test_every_writer_ranks_a_kaldi_table_as_rescore_nbest_does(tmp_path):
    run = CliRunner().invoke
    tsv = tmp_path / "n.tsv"
    assert run(convert, [str(NBEST_SMALL), str(tsv)]).exit_code == 0
    table = read_nbest_table(tsv)
    r = run(rescore_nbest, [str(tsv), str(tmp_path / "rescored"), "--data-dir", str(NBEST_SMALL / "data")])
    assert r.exit_code == 0, r.output
    want = _text(tmp_path / "rescored" / "text")
    # the table's own first pass (Kaldi's acwt * ac + graph) is not the sum of its columns
    assert _one_best(table, ranking_costs(table)) == want
    summed = {(u.id, h.rank): sum(h.scores) for u in table.utterances for h in u.hyps}
    assert _one_best(table, summed) != want

    assert run(convert, [str(tsv), str(tmp_path / "e"), "--to", "espnet"]).exit_code == 0
    assert _text(tmp_path / "e" / "text") == want == _text(tmp_path / "e" / "1best_recog" / "text")
    manifest = _manifest(tmp_path, table)
    r = run(convert, [str(tsv), str(tmp_path / "m"), "--to", "nemo", "--manifest", str(manifest)])
    assert r.exit_code == 0, r.output
    preds = [json.loads(x)["pred_text"] for x in (tmp_path / "m" / "manifest_rescored.json").read_text().splitlines()]
    assert preds == [want[u.id] for u in table.utterances]
    refs = {u.id: ["x"] for u in table.utterances}
    files = result_files("icefall", table, ranking_costs(table), WriteArgs(refs=refs, test_set="dev"))
    recogs = files["recogs-dev-rescored.txt"]
    hyps = [line for line in recogs.splitlines() if "\thyp=" in line]
    assert hyps == [f"{u}:\thyp={want[u].split()}" for u in sorted(want)]
    # the rescored scores.tsv ranks by its column total; the TSV file keeps the recognizer's ranks
    scored = read_nbest_table(tmp_path / "rescored" / "scores.tsv")
    assert _one_best(scored, ranking_costs(scored)) == want
    assert run(convert, [str(tsv), str(tmp_path / "again.tsv")]).exit_code == 0
    assert (tmp_path / "again.tsv").read_bytes() == tsv.read_bytes()


def test_the_kaldi_dir_itself_ranks_the_same(tmp_path):
    table = kaldi_to_table(NBEST_SMALL)
    r = CliRunner().invoke(convert, [str(NBEST_SMALL), str(tmp_path / "e"), "--to", "espnet"])
    assert r.exit_code == 0, r.output
    assert _text(tmp_path / "e" / "text") == _one_best(table, ranking_costs(table))


@pytest.mark.parametrize("columns, missing", [("ac\tgraph", "no column 'nolm'"), ("graph", "no column 'ac' or 'nolm'"),
                                              ("ac\tnn", "no column 'total'")])
def test_a_table_missing_a_column_of_the_rule_is_refused_by_every_writer(tmp_path, columns, missing):
    n = len(columns.split("\t"))
    p = tmp_path / "n.tsv"
    p.write_text(f"#nbest-interchange 1\nutt\trank\twords\t{columns}\n"
                 + "".join(f"u1\t{k}\ta{k}\t" + "\t".join(["1"] * n) + "\n" for k in (1, 2)))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"audio_filepath": "u1.wav", "text": "a1"}) + "\n")
    for fmt in ("espnet", "nemo", "icefall"):
        r = CliRunner().invoke(convert, [str(p), str(tmp_path / fmt), "--to", fmt]
                               + (["--manifest", str(manifest)] if fmt == "nemo" else []))
        assert r.exit_code == 1 and f"{p}:2: expected" in r.output and missing in r.output, r.output
        assert not (tmp_path / fmt).exists()
    if "nn" not in columns:  # rescore-nbest refuses it as well (it refuses 'nn' as an input column anyway)
        r = CliRunner().invoke(rescore_nbest, [str(p), str(tmp_path / "o")])
        assert r.exit_code == 1 and missing in r.output, r.output
        with pytest.raises(RescoreError, match="Kaldi's score columns"):
            ranking_costs(read_nbest_table(p))
