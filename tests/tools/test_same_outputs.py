"""tools/bench/same_outputs.py's comparison: byte for byte, with its named allowances only (a
manifest.json's writer and time; a renamed format's name as a ``format`` value, and so the
report.json hash in a manifest.json)."""

from __future__ import annotations

import json

from tools.bench.same_outputs import compare


def _put(d, name, obj):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps(obj) if not isinstance(obj, str) else obj)


def test_only_the_named_differences_pass(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    out = [{"path": "/o/report.json", "bytes": 10, "sha256": "x"}, {"path": "/o/text", "bytes": 3, "sha256": "t"}]
    _put(a, "manifest.json", {"written_by": "pid 1", "time": "t1", "settings": {"format": "interchange"},
                              "outputs": out})
    _put(b, "manifest.json", {"written_by": "pid 2", "time": "t2", "settings": {"format": "tsv"},
                              "outputs": [dict(out[0], bytes=9, sha256="y"), out[1]]})
    _put(a, "report.json", {"extra": {"format": "interchange", "wer": 1.0}})
    _put(b, "report.json", {"extra": {"format": "tsv", "wer": 1.0}})
    _put(a, "text", "u a\n")
    _put(b, "text", "u a\n")
    assert compare(a, b) == []
    _put(b, "report.json", {"extra": {"format": "tsv", "wer": 2.0}})  # another value
    _put(b, "text", "u b\n")
    assert compare(a, b) == ["report.json", "text"]
    _put(b, "report.json", {"extra": {"format": "tsv", "wer": 1.0}, "input": "interchange"})  # not a format key
    _put(b, "manifest.json", {"written_by": "pid 2", "time": "t2", "settings": {"format": "tsv"},
                              "outputs": [out[0], dict(out[1], sha256="u")]})  # another output's hash
    assert compare(a, b) == ["manifest.json", "report.json", "text"]
