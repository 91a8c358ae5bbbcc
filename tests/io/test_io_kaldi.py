"""Kaldi table readers/writers: round trips, real Kaldi bytes, and loud errors on bad input."""

from __future__ import annotations

import gzip
import os
import random
import struct

import numpy as np
import pytest

from tests.conftest import shared_data_path
from rescore.errors import RescoreError
from rescore.io.kaldi import (
    read_data_dir,
    read_nn_costs,
    read_symbol_table,
    read_table,
    read_text_table,
    write_nn_costs,
    write_table,
)


def _keys(n_utts=3, n=1000):
    return [f"utt{u}-{k}" for u in range(n_utts) for k in range(1, n + 1)]


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("container", ["plain", "gz", "scp"])
@pytest.mark.parametrize("kind", ["float", "ints"])
def test_round_trip_bit_identical(tmp_path, binary, container, kind):
    rng = random.Random(7)
    keys = _keys()
    if kind == "float":
        # float32-representable values so a binary (float32 BaseFloat) archive is exact too.
        vals = [float(np.float32(rng.uniform(-1e4, 1e4))) for _ in keys]
        vals[:3] = [1e-05 if not binary else float(np.float32(1e-05)), 0.0, -0.0]
    else:
        vals = [[rng.randrange(0, 200000) for _ in range(rng.randrange(0, 30))] for _ in keys]
        vals[0] = []  # empty int vector, followed by a non-empty one
    items = dict(zip(keys, vals))
    path = tmp_path / "table"
    scp = tmp_path / "table.scp" if container == "scp" else None
    write_table(path, kind, items, binary=binary, gz=container == "gz", scp=scp)
    back = read_table(scp if scp else path, kind)
    assert back.keys == keys
    if kind == "float":
        # bit-identical: compare the float64 bit patterns, so 0.0 vs -0.0 would show
        assert np.array(back.values).view(np.int64).tolist() == np.array(vals).view(np.int64).tolist()
    else:
        assert back.values == vals
    # writing what we read gives the same bytes again
    path2 = tmp_path / "table2"
    write_table(path2, kind, back.as_dict(), binary=binary, gz=container == "gz")
    assert path2.read_bytes() == path.read_bytes()


def test_text_float_round_trip_is_exact_for_float64(tmp_path):
    vals = {f"u-{k}": random.Random(k).uniform(-1e6, 1e6) / 3 for k in range(1, 101)}
    write_table(tmp_path / "t", "float", vals)
    assert read_table(tmp_path / "t", "float").as_dict() == vals


def test_text_lines_with_and_without_trailing_space(tmp_path):
    p = tmp_path / "a"
    p.write_text("u-1 1e-05 \nu-2 0\nu-3 -3.5 \n")
    assert read_text_table(p, "float").values == [1e-05, 0.0, -3.5]
    assert isinstance(read_text_table(p, "float").values[1], float)
    p.write_text("u-1 \nu-2 3 4\nu-3\n")  # empty vectors with and without the space do not swallow lines
    assert read_text_table(p, "ints").as_dict() == {"u-1": [], "u-2": [3, 4], "u-3": []}


KALDI = ("kaldi-nbest-fixture",)


@pytest.mark.shared_data
@pytest.mark.parametrize("name,kind", [("acwt", "float"), ("lmwt.withlm", "float"), ("words", "ints"), ("ali", "ints")])
def test_real_kaldi_bytes_all_containers_agree(name, kind):
    d = shared_data_path(*KALDI)
    text = read_table(d / name, kind)
    binary_gz = read_table(d / f"{name}.bin.gz", kind)
    ark = read_table(d / f"{name}.ark", kind)
    scp = read_table(d / f"{name}.scp", kind)
    assert len(text) == 793
    assert not text.binary and binary_gz.binary and ark.binary
    for t in (binary_gz, ark, scp):
        assert t.keys == text.keys
    if kind == "ints":
        for t in (binary_gz, ark, scp):
            assert t.values == text.values
        if name == "ali":
            assert all(v == [] for v in text.values)  # every alignment is an empty int vector
    else:
        assert binary_gz.values == ark.values == scp.values  # the same float32 bits
        # text archives print ~7 significant digits of the same float32 values
        np.testing.assert_allclose(text.values, ark.values, rtol=2e-6)


@pytest.mark.shared_data
@pytest.mark.parametrize("name,kind", [("acwt", "float"), ("words", "ints")])
def test_our_binary_writer_reproduces_kaldis_bytes(tmp_path, name, kind):
    d = shared_data_path(*KALDI)
    t = read_table(d / f"{name}.ark", kind)
    write_table(tmp_path / "x.ark", kind, t.as_dict(), binary=True)
    assert (tmp_path / "x.ark").read_bytes() == (d / f"{name}.ark").read_bytes()


@pytest.mark.shared_data
def test_our_text_writer_matches_kaldi_layout():
    d = shared_data_path(*KALDI)
    t = read_table(d / "words", "ints")
    lines = (d / "words").read_text().splitlines(keepends=True)
    ours = [f"{k} {' '.join(map(str, v))} \n" for k, v in zip(t.keys, t.values)]
    assert ours == lines


def test_symbol_table_and_data_dir(nbest_small):
    sym = read_symbol_table(nbest_small / "words.txt")
    assert sym["<eps>"] == 0 and sym["lobster"] > 0
    dd = read_data_dir(nbest_small / "data")
    assert dd.text["rec1-rms-000"] == "the lobster is blue".split()
    assert dd.segments["rec2-awb-001"] == ("rec2", 1.8, 3.9)
    assert dd.utt2spk["rec2-awb-001"] == "rec2-awb"
    assert dd.spk2utt["rec1-rms"] == ["rec1-rms-000", "rec1-rms-001", "rec1-rms-002"]


def test_nn_costs_round_trip(tmp_path):
    costs = {"u-1": [1.5, 2.25, 0.125], "u-2": [7.0]}
    write_nn_costs(tmp_path / "lmwt.nn", costs)
    assert (tmp_path / "lmwt.nn").read_text().startswith("u-1 1.5 2.25 0.125 \n")
    assert read_nn_costs(tmp_path / "lmwt.nn") == costs


SPECIAL_FLOATS = [0.0, -0.0, 1.0, 1e-05, 0.0001, 1e16, 1e15, 123456789012345.6, 5e-324, -5e-324,
                  1.7976931348623157e308, 0.1, float("nan"), float("inf"), float("-inf")]


def test_nn_costs_are_written_as_repr_of_each_cost(tmp_path):
    """The costs are formatted once per distinct value (float_texts): the bytes are still
    repr(float(c)) of each cost, signed zeros, numpy scalars and empty rows included."""
    rng = np.random.default_rng(0)
    costs = {f"u-{k}": [float(x) for x in rng.choice(rng.standard_normal(50) * 10, size=k % 12)]
             for k in range(1, 301)}  # (values repeat, as NN costs of shared prefixes do)
    costs["s-1"] = SPECIAL_FLOATS
    costs["s-2"] = [np.float32(0.1), np.float64(-0.0), 3, True]
    costs["s-3"] = []
    write_nn_costs(tmp_path / "lmwt.nn", costs)
    want = "".join(k + " " + " ".join(repr(float(x)) for x in v) + " \n" for k, v in costs.items())
    assert (tmp_path / "lmwt.nn").read_text() == want


def test_float_table_text_is_repr(tmp_path):
    vals = {f"u-{i}": x for i, x in enumerate(SPECIAL_FLOATS[:12] + [np.float32(0.1), -0.0, 7])}
    write_table(tmp_path / "t", "float", vals)
    assert (tmp_path / "t").read_text() == "".join(f"{k} {float(v)!r} \n" for k, v in vals.items())


@pytest.mark.parametrize("items,message", [
    ({"u-1": 1.0, "u-2": float("nan"), "u 3": 1.0}, "non-finite cost nan"),
    ({"u-1": 1.0, "u 2": float("nan")}, "bad key 'u 2'"),
    ({"u-1": float("inf"), "": 1.0}, "non-finite cost inf"),
    ({"u-1": 1.0, "": 1.0}, "bad key ''"),
])
def test_write_table_names_the_first_bad_entry(tmp_path, items, message):
    """A bad key or a cost that is not finite: the first in the table's order (its key first)."""
    with pytest.raises(ValueError, match=message):
        write_table(tmp_path / "t", "float", items)
    with pytest.raises(ValueError, match="bad key"):
        write_table(tmp_path / "t", "tokens", {"u-1": ["a"], "u\t2": ["b"]})
    assert not (tmp_path / "t").exists()


def test_text_scp_offsets_count_bytes(tmp_path):
    """An scp of a text table points at each value's byte offset (multi-byte UTF-8 before it)."""
    items = {"é-1": ["ça", "va"], "u-2": [], "ü-3": ["x"]}
    write_table(tmp_path / "t.ark", "tokens", items, scp=tmp_path / "t.scp")
    assert read_table(tmp_path / "t.scp", "tokens").as_dict() == items


def test_writer_is_atomic(tmp_path):
    p = tmp_path / "t"
    p.write_text("old\n")
    with pytest.raises(ValueError):
        write_table(p, "float", {"u-1": 1.0, "u-2": float("nan")})
    assert p.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["t"]  # no temporary left behind


# ------------------------------------------------------------------------------------------
# Table-level bad input: each message names the file and the line (or the binary entry).

BAD_TEXT = [
    ("float", "u-1 1.0\nu-2 nan\n", 2, "finite"),
    ("float", "u-1 1.0\nu-2 -inf \n", 2, "finite"),
    ("float", "u-1 abc\n", 1, "float"),
    ("float", "u-1 1.0 2.0\n", 1, "one finite float"),
    ("float", "u-1\n", 1, "one finite float"),
    ("float", "u-1 1_000\n", 1, "float"),
    ("float", "u-1 1.0\n\nu-2 2.0\n", 2, "empty line"),
    ("float", "u-1 1.0\nu-2 2.0\nu-1 3.0\n", 3, "unique key"),
    ("ints", "u-1 1 2\nu-2 3 x4\n", 2, "integers"),
    ("ints", "u-1 1 -2\n", 1, "integers"),
    ("ints", "u-1 [ 1 2 ]\n", 1, "integers"),
]


@pytest.mark.parametrize("kind,content,line,what", BAD_TEXT)
def test_bad_text_table(tmp_path, kind, content, line, what):
    p = tmp_path / "table.txt"
    p.write_text(content)
    with pytest.raises(RescoreError) as e:
        read_table(p, kind)
    assert f"table.txt:{line}:" in str(e.value) and what in str(e.value)


def test_truncated_gzip_names_file_and_line(tmp_path):
    body = "".join(f"u-{k} {k}.5 \n" for k in range(1, 20001)).encode()
    data = gzip.compress(body)
    p = tmp_path / "acwt.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(RescoreError) as e:
        read_table(p, "float")
    msg = str(e.value)
    assert "acwt.gz:" in msg and "gzip" in msg
    assert e.value.line is not None and 1 < e.value.line <= 20000


def test_invalid_utf8_names_line(tmp_path):
    p = tmp_path / "words_text"
    p.write_bytes(b"u-1 a b\nu-2 \xff\xfe c\n")
    with pytest.raises(RescoreError, match=r"words_text:2: expected UTF-8"):
        read_table(p, "tokens")


def test_unreadable_file(tmp_path):
    with pytest.raises(RescoreError, match=r"nothere: expected a readable file"):
        read_table(tmp_path / "nothere", "float")
    p = tmp_path / "secret"
    p.write_text("u-1 1\n")
    p.chmod(0)
    try:
        if os.access(p, os.R_OK):
            pytest.skip("running as a user who can read mode-000 files (root)")
        with pytest.raises(RescoreError, match=r"secret: expected a readable file"):
            read_table(p, "float")
    finally:
        p.chmod(0o644)


def test_truncated_binary_archive_names_entry(tmp_path):
    write_table(tmp_path / "a.ark", "float", {"u-1": 1.0, "u-2": 2.0}, binary=True)
    data = (tmp_path / "a.ark").read_bytes()
    (tmp_path / "a.ark").write_bytes(data[:-2])
    with pytest.raises(RescoreError, match=r"a\.ark \(binary entry 2\)"):
        read_table(tmp_path / "a.ark", "float")
    bad = b"u-1 \0B\x04" + struct.pack("<f", float("nan"))
    (tmp_path / "b.ark").write_bytes(bad)
    with pytest.raises(RescoreError, match=r"b\.ark \(binary entry 1\).*finite"):
        read_table(tmp_path / "b.ark", "float")


def test_scp_pointing_at_missing_archive_names_scp_line(tmp_path):
    (tmp_path / "a.scp").write_text(f"u-1 {tmp_path}/gone.ark:4\n")
    with pytest.raises(RescoreError, match=r"a\.scp:1: expected a readable archive"):
        read_table(tmp_path / "a.scp", "ints")


def test_bad_symbol_table(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("<eps> 0\na 1\nb 2\na 3\n")
    with pytest.raises(RescoreError, match=r"words\.txt:4: expected a unique word"):
        read_symbol_table(p)
    p.write_text("<eps> 0\na one\n")
    with pytest.raises(RescoreError, match=r"words\.txt:2:"):
        read_symbol_table(p)


def test_symbol_table_read_again_only_when_unchanged(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("<eps> 0\na 1\nb 2\n")
    first = read_symbol_table(p)
    first["zz"] = 9  # each call gets its own dict
    assert read_symbol_table(p) == {"<eps>": 0, "a": 1, "b": 2}
    p.write_text("<eps> 0\nc 1\nd 2\n")  # the same size: the modification time tells
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert read_symbol_table(p) == {"<eps>": 0, "c": 1, "d": 2}


def test_bad_nn_costs(tmp_path):
    p = tmp_path / "lmwt.nn"
    p.write_text("u-1 1.0 2.0 \nu-2 inf \n")
    with pytest.raises(RescoreError, match=r"lmwt\.nn:2:"):
        read_nn_costs(p)
    p.write_text("u-1 1.0 \nu-2 \n")
    with pytest.raises(RescoreError, match=r"lmwt\.nn:2:"):
        read_nn_costs(p)


def test_bad_segments(nbest_small):
    seg = nbest_small / "data" / "segments"
    lines = seg.read_text().splitlines()
    lines[2] = "rec1-rms-002 rec1 6.0 4.6"  # ends before it starts
    seg.write_text("\n".join(lines) + "\n")
    with pytest.raises(RescoreError, match=r"segments:3: expected 'utt reco start end'"):
        read_data_dir(nbest_small / "data")


# --------------------------------------------------------------------------------------------
# keep: every key read, only the kept keys' values parsed (rescore-nbest --split)


@pytest.mark.parametrize("container", ["plain", "gz", "binary", "binary-gz", "scp", "text-scp"])
@pytest.mark.parametrize("kind", ["float", "ints"])
def test_keep_parses_only_kept_values(tmp_path, container, kind):
    rng = random.Random(3)
    keys = _keys(n_utts=4, n=5)
    vals = ([float(np.float32(rng.uniform(-100, 100))) for _ in keys] if kind == "float" else
            [[rng.randrange(0, 9999) for _ in range(rng.randrange(0, 6))] for _ in keys])
    path, scp = tmp_path / "t", tmp_path / "t.scp" if container.endswith("scp") else None
    write_table(path, kind, dict(zip(keys, vals)), binary=container.startswith("binary") or container == "scp",
                gz=container.endswith("gz"), scp=scp)
    keep = lambda key: key.startswith(("utt1-", "utt3-"))  # noqa: E731
    whole = read_table(scp or path, kind)
    part = read_table(scp or path, kind, keep=keep)
    assert part.keys == whole.keys == keys and part.binary == whole.binary
    assert part.values == [v if keep(k) else None for k, v in zip(keys, whole.values)]
    if kind == "float" and container in ("plain", "binary"):
        # a bad value of a key not kept is not read; of a kept key it fails as in a full read
        data = path.read_bytes()
        if container == "plain":
            lines = data.splitlines(keepends=True)
            lines[0] = b"utt0-1 nan \n"
            path.write_bytes(b"".join(lines))
        else:
            nan = struct.pack("<f", float("nan"))
            path.write_bytes(data.replace(struct.pack("<f", vals[0]), nan, 1))
        assert read_table(path, kind, keep=keep).values == part.values
        with pytest.raises(RescoreError) as full:
            read_table(path, kind)
        with pytest.raises(RescoreError) as kept:
            read_table(path, kind, keep=lambda key: True)
        assert str(kept.value) == str(full.value) and "finite" in str(full.value)


def test_keep_still_finds_faults_of_keys_and_containers(tmp_path):
    """Only values are skipped: a duplicate key, an empty line, a broken binary entry or scp
    line fail as in a full read, whatever keep says."""
    never = lambda key: False  # noqa: E731
    cases = {"dup": b"u-1 1 \nu-2 2 \nu-1 3 \n", "empty": b"u-1 1 \n\nu-2 2 \n", "blank": b"u-1 1 \n \x1c\n"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(RescoreError) as full:
            read_table(tmp_path / name, "float")
        with pytest.raises(RescoreError) as part:
            read_table(tmp_path / name, "float", keep=never)
        assert str(part.value) == str(full.value), name
    # where str.split() (the full read) and bytes.split() differ, the keys are still the same
    (tmp_path / "odd").write_bytes("u\u00a0x-1 a\nw\x1cy-1 b\nv-1 c\n".encode())
    assert read_table(tmp_path / "odd", "tokens", keep=never).keys == ["u", "w", "v-1"] == \
        read_text_table(tmp_path / "odd", "tokens").keys
    write_table(tmp_path / "a.ark", "ints", {"u-1": [1, 2], "u-2": [3]}, binary=True)
    (tmp_path / "a.ark").write_bytes((tmp_path / "a.ark").read_bytes()[:-3])  # u-2 cut short
    with pytest.raises(RescoreError) as full:
        read_table(tmp_path / "a.ark", "ints")
    with pytest.raises(RescoreError) as part:
        read_table(tmp_path / "a.ark", "ints", keep=never)
    assert str(part.value) == str(full.value) and "binary entry 2" in str(full.value)
    # an scp: its lines are checked whole, an archive is opened only for a kept entry
    (tmp_path / "a.scp").write_text(f"u-1 {tmp_path}/gone.ark:4\nu-2 {tmp_path}/b.ark\n")
    with pytest.raises(RescoreError, match=r"a\.scp:2: expected 'key file.ark:offset'"):
        read_table(tmp_path / "a.scp", "ints", keep=never)
    (tmp_path / "a.scp").write_text(f"u-1 {tmp_path}/gone.ark:4\n")
    assert read_table(tmp_path / "a.scp", "ints", keep=never).values == [None]
    with pytest.raises(RescoreError, match=r"a\.scp:1: expected a readable archive"):
        read_table(tmp_path / "a.scp", "ints", keep=lambda key: True)


def test_keep_gives_the_full_reads_message_for_a_bad_kept_line(tmp_path):
    """The bulk read of kept lines names the line and quotes it as the line-by-line read does,
    also for a last line without a newline."""
    for data in (b"u-1 1 \nu-2 x\xff \n", b"u-1 1 \nu-2 x\xff", b"u-1 1 \nu-2 2x \n", b"u-1 1 \nu-2 2x"):
        (tmp_path / "t").write_bytes(data)
        with pytest.raises(RescoreError) as full:
            read_table(tmp_path / "t", "float")
        with pytest.raises(RescoreError) as kept:
            read_table(tmp_path / "t", "float", keep=lambda key: key == "u-2")
        assert str(kept.value) == str(full.value) and ":2:" in str(full.value), data
        assert read_table(tmp_path / "t", "float", keep=lambda key: key == "u-1").values == [1.0, None]


@pytest.mark.parametrize("keep", [None, lambda k: k != "u2"])
@pytest.mark.parametrize("gz", [False, True])
def test_byte_order_mark_is_not_part_of_the_first_key(tmp_path, keep, gz):
    """A UTF-8 byte order mark first in a text table (as Windows editors write) is dropped by
    every reader path: bulk, a kept share, and line by line (a bad later line forces it)."""
    from rescore.io.text_tables import _read_text_lines, read_text_table as read
    from rescore.vocab import read_sentences

    body = "u1 a b\nu2 c\n"
    p = tmp_path / ("t.gz" if gz else "t")
    raw = b"\xef\xbb\xbf" + body.encode()
    p.write_bytes(gzip.compress(raw) if gz else raw)
    t = read(p, "tokens", keep=keep)
    assert t.keys == ["u1", "u2"] and t.values[0] == ["a", "b"]
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xef\xbb\xbfu1 a\n\n")  # an empty line: the line reader names it
    with pytest.raises(RescoreError, match=r"bad:2: .*empty line"):
        read(bad, "tokens", keep=keep)
    assert read_sentences(p) == [["u1", "a", "b"], ["u2", "c"]]
    only = tmp_path / "only"
    only.write_bytes(b"\xef\xbb\xbf")  # a signature and nothing else: an empty table either way
    assert read(only, "tokens", keep=keep).keys == []
    assert _read_text_lines(only, "tokens", True, keep).keys == []
