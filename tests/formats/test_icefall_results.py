"""icefall's result files from any input: references from a data dir (rescore-convert-nbest
--data-dir) and the names of a current zipformer decode.py (--icefall-suffix)."""

from __future__ import annotations

import shutil

from click.testing import CliRunner

from tests.conftest import NBEST_SMALL
from tests.formats.test_ecosystems import ICEFALL, tiny_lm  # noqa: F401 (a fixture)
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest


def test_a_rescored_table_to_icefall_with_a_data_dirs_references(tmp_path):
    run = CliRunner().invoke
    data = tmp_path / "test-clean"
    shutil.copytree(NBEST_SMALL / "data", data)
    assert run(convert, [str(NBEST_SMALL), str(tmp_path / "n.tsv")]).exit_code == 0
    r = run(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "o"), "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    scores = tmp_path / "o" / "scores.tsv"
    r = run(convert, [str(scores), str(tmp_path / "i"), "--to", "icefall"])
    assert r.exit_code == 1 and "expected references for icefall's recogs/errs files" in r.output
    assert "--data-dir" in r.output
    r = run(convert, [str(scores), str(tmp_path / "i"), "--to", "icefall", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "i").iterdir())
    assert names == ["errs-test-clean-rescored.txt", "manifest.json", "recogs-test-clean-rescored.txt",
                     "wer-summary-test-clean.txt"]
    # icefall's recogs hold rescore-nbest's 1-best (text), by its column total
    best = dict(line.split(" ", 1) for line in (tmp_path / "o" / "text").read_text().splitlines())
    recogs = (tmp_path / "i" / "recogs-test-clean-rescored.txt").read_text().splitlines()
    assert [x for x in recogs if "\thyp=" in x] == [f"{u}:\thyp={best[u].split()}" for u in sorted(best)]
    r = run(convert, [str(scores), str(tmp_path / "s"), "--to", "icefall", "--data-dir", str(data),
                      "--icefall-suffix", "rescored-epoch-30-avg-9"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "errs-test-clean-rescored-epoch-30-avg-9.txt", "manifest.json", "recogs-test-clean-rescored-epoch-30-avg-9.txt",
        "wer-summary-test-clean-rescored-epoch-30-avg-9.txt"]
    for bad in (["--to", "espnet", "--data-dir", str(data)], ["--to", "espnet", "--icefall-suffix", "x"],
                ["--to", "icefall", "--data-dir", str(data), "--icefall-suffix", "a/b"]):
        r = run(convert, [str(scores), str(tmp_path / "bad"), *bad])
        assert r.exit_code == 2 and not (tmp_path / "bad").exists(), r.output
    (data / "text").unlink()
    r = run(convert, [str(scores), str(tmp_path / "bad"), "--to", "icefall", "--data-dir", str(data)])
    assert r.exit_code == 2 and "expected a data dir with a 'text'" in r.output


def test_rescore_nbest_names_icefall_files_with_the_suffix(tmp_path, tiny_lm):  # noqa: F811
    out = tmp_path / "o"
    r = CliRunner().invoke(rescore_nbest, [str(ICEFALL), str(out), "--format", "icefall", "--model", str(tiny_lm),
                                           "--device", "cpu", "--write-format", "icefall", "--icefall-suffix",
                                           "modified_beam_search"])
    assert r.exit_code == 0, r.output
    assert (out / "recogs-test-clean-modified_beam_search.txt").is_file()
    assert (out / "wer-summary-test-clean-modified_beam_search.txt").read_text().startswith("settings\tWER\n")
    r = CliRunner().invoke(rescore_nbest, [str(ICEFALL), str(tmp_path / "e"), "--format", "icefall",
                                           "--icefall-suffix", "x"])
    assert r.exit_code == 2 and "--icefall-suffix: expected --write-format icefall" in r.output
