"""rescore.io.outdir, the one home of every write: what may be replaced (an empty dir, an earlier
output that holds no input; never a dir of other files, never a device), which temporaries a
run removes (those of a writer that is gone, never those of a run still going), and the two
commands the rules were missing from (rescore-import-lm, rescore-convert-nbest into a dir)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescore.errors import OptionError
from rescore.io import outdir
from tests.conftest import NBEST_SMALL, dead_pid


def test_leftovers_of_a_writer_that_is_gone_are_removed_and_of_a_live_one_kept(tmp_path):
    gone, live = dead_pid(), os.getppid()
    (tmp_path / f".a.txt.rescore-tmp.{gone}.x1").write_text("half")
    (tmp_path / f".a.txt.rescore-tmp.{live}.x2").write_text("being written")
    (tmp_path / f".b.txt.rescore-tmp.{gone}.x3").write_text("another target's")
    (tmp_path / f".d.rescore-old.{gone}.x4").mkdir()
    (tmp_path / ".a.txt.keep").write_text("not ours")
    with outdir.atomic_output(tmp_path / "a.txt") as f:
        f.write("whole\n")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["a.txt", f".a.txt.rescore-tmp.{live}.x2", f".b.txt.rescore-tmp.{gone}.x3",
                           f".d.rescore-old.{gone}.x4", ".a.txt.keep"])
    assert sorted(outdir.remove_leftovers(tmp_path)) == [f".b.txt.rescore-tmp.{gone}.x3", f".d.rescore-old.{gone}.x4"]
    assert outdir.is_temporary(f".a.txt.rescore-tmp.{live}.x2") and not outdir.is_temporary(".a.txt.keep")


def test_a_device_is_written_as_it_is_never_replaced():
    null = Path("/dev/null")
    if not (null.exists() and stat.S_ISCHR(os.stat(null).st_mode)):
        pytest.skip("needs /dev/null")
    with outdir.atomic_output(null) as f:
        f.write("gone\n")
    assert stat.S_ISCHR(os.stat(null).st_mode)


def _write(tmp: Path, text: str) -> None:
    (tmp / "marker.json").write_text("{}\n")
    (tmp / "data.txt").write_text(text)


def test_a_dir_is_replaced_when_new_empty_or_an_earlier_output_only(tmp_path):
    target = tmp_path / "out"
    for prepare in (lambda: None, target.mkdir):  # absent, then an empty dir
        shutil.rmtree(target, ignore_errors=True)
        prepare()
        with outdir.DirReplacement(target, "marker.json", []) as tmp:
            _write(tmp, "one\n")
        assert (target / "data.txt").read_text() == "one\n"
    with outdir.DirReplacement(target, "marker.json", []) as tmp:  # an earlier output
        _write(tmp, "two\n")
    assert sorted(p.name for p in target.iterdir()) == ["data.txt", "marker.json"]
    assert (target / "data.txt").read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("mine\n")
    with pytest.raises(OptionError, match="never replaced"):
        with outdir.DirReplacement(other, "marker.json", []) as tmp:
            _write(tmp, "x")
    assert sorted(p.name for p in other.iterdir()) == ["mine.txt"]


def test_a_failed_write_leaves_the_earlier_output(tmp_path):
    target = tmp_path / "out"
    with outdir.DirReplacement(target, "marker.json", []) as tmp:
        _write(tmp, "one\n")
    with pytest.raises(RuntimeError):
        with outdir.DirReplacement(target, "marker.json", []) as tmp:
            _write(tmp, "two\n")
            raise RuntimeError("the work failed")
    assert (target / "data.txt").read_text() == "one\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_input_inside_the_earlier_output_is_never_deleted(tmp_path):
    target = tmp_path / "out"
    with outdir.DirReplacement(target, "marker.json", []) as tmp:
        _write(tmp, "one\n")
    (target / "src").mkdir()
    (target / "src" / "model.bin").write_text("the input\n")
    with pytest.raises(OptionError, match="none of the inputs"):
        with outdir.DirReplacement(target, "marker.json", [target / "src" / "model.bin"]):
            pass
    assert (target / "src" / "model.bin").read_text() == "the input\n"


def test_import_lm_into_an_empty_dir_and_never_over_its_own_source(tiny_gpt2, tmp_path):
    """An existing empty OUT_DIR is a valid target; a source that lies inside an earlier import
    in OUT_DIR is refused (exit 2) before any work, and is still there afterwards."""
    from rescore.cli.import_lm import main
    from rescore.models.hf_import import RECORD

    gpt2 = tiny_gpt2
    out = tmp_path / "imported"
    out.mkdir()
    r = CliRunner().invoke(main, [str(gpt2), str(out)])
    assert r.exit_code == 0, r.output
    assert (out / RECORD).is_file()
    shutil.copytree(gpt2, out / "original")
    r = CliRunner().invoke(main, [str(out / "original"), str(out)])
    assert r.exit_code == 2 and "error: OUT_DIR" in r.output and "none of the inputs" in r.output, r.output
    assert sorted(p.name for p in (out / "original").iterdir()) == sorted(p.name for p in gpt2.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imported"]


@pytest.mark.parametrize("to", ["espnet", "kaldi"])
def test_convert_into_an_existing_empty_dir_equals_into_a_new_one(to, tmp_path):
    from rescore.cli.convert import convert

    table = tmp_path / "n.tsv"
    assert CliRunner().invoke(convert, [str(NBEST_SMALL), str(table)]).exit_code == 0
    (tmp_path / "empty").mkdir()
    for d in ("new", "empty"):
        r = CliRunner().invoke(convert, [str(table), str(tmp_path / d), "--to", to])
        assert r.exit_code == 0, r.output
    files = {d: {str(p.relative_to(tmp_path / d)): p.read_bytes() for p in (tmp_path / d).rglob("*")
                 if p.is_file() and p.name != outdir.MANIFEST_NAME} for d in ("new", "empty")}
    assert files["new"] == files["empty"] and files["new"]


def test_an_output_set_removes_the_leftovers_of_its_outputs_in_subdirs(tmp_path):
    """A killed run with --write-format espnet left 1best_recog/.text.rescore-tmp.*: a rerun that
    writes no 1best_recog/text removes it all the same."""
    out = tmp_path / "out"
    (out / "1best_recog").mkdir(parents=True)
    left = out / "1best_recog" / f".text.rescore-tmp.{dead_pid()}.abc"
    left.write_text("half\n")
    with outdir.OutputSet(out, ["text"], [], known=["text", "1best_recog/text"]) as s:
        with s.open("text") as f:
            f.write("utt a b\n")
    assert not left.exists()
    assert (out / "text").read_text() == "utt a b\n"


def test_sha256_is_the_one_file_digest_of_the_package(tmp_path):
    """The digest of a file spanning several read blocks equals hashlib's of its bytes, and no
    other module of the package computes a SHA-256 of its own."""
    import hashlib

    data = os.urandom((1 << 20) * 2 + 123)
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert outdir.sha256(f) == outdir.sha256(str(f)) == hashlib.sha256(data).hexdigest()
    package = Path(outdir.__file__).resolve().parents[1]
    others = [str(p.relative_to(package)) for p in package.rglob("*.py")
              if p != Path(outdir.__file__).resolve() and "hashlib.sha256" in p.read_text(encoding="utf-8")]
    assert others == []
