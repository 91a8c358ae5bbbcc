"""rescore.io.files: the one atomic write (it follows the umask) and the strict JSON writer/reader."""

from __future__ import annotations

import math
import os
import stat

import pytest

from rescore.errors import RescoreError
from rescore.io.files import atomic_output, read_json, write_json


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_output_follows_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        with atomic_output(tmp_path / "f.txt") as f:
            f.write("x\n")
        write_json(tmp_path / "f.json", {"a": 1})
        with open(tmp_path / "plain.txt", "w") as f:  # what a plain open() gives, for comparison
            f.write("x\n")
    finally:
        os.umask(old)
    for name in ("f.txt", "f.json", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_atomic_output_leaves_nothing_on_error(tmp_path):
    (tmp_path / "keep.txt").write_text("old\n")
    with pytest.raises(ZeroDivisionError):
        with atomic_output(tmp_path / "keep.txt") as f:
            f.write("half")
            1 / 0
    assert (tmp_path / "keep.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("obj", [{"wip": math.inf}, {"wer": -math.inf}, {"grid": [{"wer": math.nan}]}, math.nan])
def test_json_never_holds_nan_or_infinity(tmp_path, obj):
    with pytest.raises(RescoreError, match="finite"):
        write_json(tmp_path / "r.json", obj)
    assert not (tmp_path / "r.json").exists()


def test_json_reader_is_strict(tmp_path):
    write_json(tmp_path / "ok.json", {"weight": 0.5, "notes": ["é"]})
    assert read_json(tmp_path / "ok.json") == {"weight": 0.5, "notes": ["é"]}
    cases = {"nan.json": (b'{"a": NaN}', "NaN"), "inf.json": (b'{"a": -Infinity}', "Infinity"),
             "big.json": (b'{"a": 1e400}', "too large"), "bad.json": (b'{"a": 1,\n "b": }', ":2: expected JSON"),
             "latin1.json": (b'{"a": "\xe9"}', "UTF-8")}
    for name, (body, msg) in cases.items():
        (tmp_path / name).write_bytes(body)
        with pytest.raises(RescoreError, match=msg):
            read_json(tmp_path / name)
    with pytest.raises(RescoreError, match="readable"):
        read_json(tmp_path / "absent.json")


def test_checkpoints_go_through_the_one_atomic_write(tmp_path):
    """save_checkpoint uses atomic_output: mode 0666 & ~umask, no temporary left."""
    from rescore.models import ModelConfig, build_model, load_checkpoint, save_checkpoint
    from rescore.vocab import Vocabulary

    model = build_model(ModelConfig(hidden=8, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>", "a"]))
    old = os.umask(0o027)
    try:
        save_checkpoint(model, tmp_path / "m.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.pt").stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
    assert load_checkpoint(tmp_path / "m.pt").vocab.words == ["<eos>", "<unk>", "a"]


def test_old_checkpoints_with_retired_config_fields_still_load(tmp_path):
    """ModelConfig.cache_theta / cache_lambda are gone; a checkpoint that has them loads."""
    import torch

    from rescore.models import ModelConfig, build_model, load_checkpoint, save_checkpoint
    from rescore.vocab import Vocabulary

    model = build_model(ModelConfig(hidden=8, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>", "a"]))
    save_checkpoint(model, tmp_path / "m.pt")
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    ckpt["config"].update(cache_theta=0.3, cache_lambda=0.1)  # as older checkpoints
    torch.save(ckpt, tmp_path / "old.pt")
    assert not hasattr(ModelConfig(), "cache_theta")
    loaded = load_checkpoint(tmp_path / "old.pt")
    for a, b in zip(loaded.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_tools_write_json_through_the_one_writer():
    """tools/*.py write JSON results with write_json (atomic, finite numbers only): no
    json.dump into an open file and no write_text/write of json.dumps(...), which a Ctrl-C or a
    NaN leaves half-written or unreadable. (json.dumps for a printed line is fine.)"""
    import ast
    from pathlib import Path

    bad = []
    for p in sorted((Path(__file__).resolve().parents[2] / "tools").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            f = node.func
            if isinstance(f.value, ast.Name) and f.value.id == "json" and f.attr == "dump":
                bad.append(f"{p.name}:{node.lineno}: json.dump")
            if f.attr in ("write_text", "write") and any(
                    isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "dumps"
                    for arg in node.args for a in ast.walk(arg)):
                bad.append(f"{p.name}:{node.lineno}: {f.attr}(json.dumps(...))")
    assert not bad, bad
