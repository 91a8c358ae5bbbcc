"""load_nbest_dir: the fixture, conversation order, and N-best-level bad input (file + line)."""

from __future__ import annotations

import gzip
import shutil

import pytest

from tests.conftest import NBEST_SMALL, shared_data_path
from rescore.errors import RescoreError
from rescore.io.kaldi import read_table, write_table
from rescore.nbest.sets import load_nbest_dir

ARCHIVES = ("words", "words_text", "acwt", "lmwt.withlm", "lmwt.nolm")


def test_small_fixture(nbest_small):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    assert s.grouping == "segments"
    assert [c.id for c in s.conversations] == ["rec1", "rec2"]
    assert [u.id for u in s.conversations[0].utterances] == ["rec1-rms-000", "rec1-rms-001", "rec1-rms-002"]
    assert s.num_utts == 5 and s.num_hyps == 17
    h = s.conversations[0].utterances[0].hyps[1]
    assert h.key == "rec1-rms-000-2" and h.words == "the lobster is blue".split()
    assert (h.ac, h.withlm, h.nolm) == (812.0, 22.3, 0.8)
    assert s.refs["rec2-awb-001"] == ["it", "is", "long"]


def test_words_only_gives_the_same_words(nbest_small):
    full = load_nbest_dir(nbest_small, nbest_small / "data")
    (nbest_small / "words_text").unlink()
    ids_only = load_nbest_dir(nbest_small, nbest_small / "data")
    assert [[h.words for h in u.hyps] for u in ids_only.utterances()] == \
           [[h.words for h in u.hyps] for u in full.utterances()]


def test_words_without_words_txt_is_an_error(nbest_small):
    (nbest_small / "words_text").unlink()
    (nbest_small / "words.txt").rename(nbest_small / "symbols")
    with pytest.raises(RescoreError, match="words.txt"):
        load_nbest_dir(nbest_small)
    assert load_nbest_dir(nbest_small, words_txt=nbest_small / "symbols").num_hyps == 17


def test_binary_gz_and_scp_archives_load_the_same(nbest_small):
    want = load_nbest_dir(nbest_small, nbest_small / "data")
    for name, kind in (("acwt", "float"), ("lmwt.withlm", "float"), ("words", "ints")):
        t = read_table(nbest_small / name, kind)
        (nbest_small / name).unlink()
        if name == "acwt":
            write_table(nbest_small / "acwt.bin.gz", kind, t.as_dict(), binary=True, gz=True)
        else:
            write_table(nbest_small / f"{name}.ark", kind, t.as_dict(), binary=True,
                        scp=nbest_small / f"{name}.scp")
            (nbest_small / f"{name}.ark").rename(nbest_small / f"{name}.data")  # only the scp finds it
            (nbest_small / f"{name}.scp").write_text((nbest_small / f"{name}.scp").read_text()
                                                     .replace(f"{name}.ark:", f"{name}.data:"))
    got = load_nbest_dir(nbest_small, nbest_small / "data")
    for a, b in zip(got.utterances(), want.utterances()):
        for x, y in zip(a.hyps, b.hyps):
            assert (x.key, x.words, x.nolm) == (y.key, y.words, y.nolm)
            # float32 (Kaldi's BaseFloat) in the binary archives
            assert (x.ac, x.withlm) == pytest.approx((y.ac, y.withlm), rel=1e-7)


def test_conversation_order_from_segments_start_times(nbest_small):
    seg = nbest_small / "data" / "segments"
    # rec1's utterance 002 starts first now, and rec0 < rec1 sorts before it
    seg.write_text("rec1-rms-000 rec1 5.0 6.0\nrec1-rms-001 rec1 7.0 8.0\nrec1-rms-002 rec1 1.0 2.0\n"
                   "rec2-awb-000 rec0 0.0 1.0\nrec2-awb-001 rec0 1.5 2.0\n")
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    assert [c.id for c in s.conversations] == ["rec0", "rec1"]
    assert [u.id for u in s.conversations[1].utterances] == ["rec1-rms-002", "rec1-rms-000", "rec1-rms-001"]


def test_conversations_from_utt2spk_then_one_per_utterance(nbest_small):
    (nbest_small / "data" / "segments").unlink()
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    assert s.grouping == "utt2spk" and [c.id for c in s.conversations] == ["rec1-rms", "rec2-awb"]
    s = load_nbest_dir(nbest_small)
    assert s.grouping == "utterance" and s.refs is None
    assert [c.id for c in s.conversations] == [u.id for u in s.utterances()] and len(s.conversations) == 5


def _edit(path, fn):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(fn(lines)))


def _all(nbest_dir, fn):
    for a in ARCHIVES:
        _edit(nbest_dir / a, fn)


def _set(i, text):
    def f(lines):
        lines[i] = text
        return lines
    return f


def _drop(i):
    return lambda lines: lines[:i] + lines[i + 1:]


def _swap(i, j):
    def f(lines):
        lines[i], lines[j] = lines[j], lines[i]
        return lines
    return f


# (name, edit(nbest_dir), file named in the message, line, text the message must hold)
CASES = [
    ("missing key", lambda d: _edit(d / "acwt", _drop(5)), "acwt", 6, "missing key"),
    ("extra key", lambda d: _edit(d / "lmwt.nolm", lambda ls: ls[:3] + ["rec9-1 0.5 \n"] + ls[3:]),
     "lmwt.nolm", 4, "extra key"),
    ("extra key at end", lambda d: _edit(d / "lmwt.withlm", lambda ls: ls + ["rec2-awb-001-4 1 \n"]),
     "lmwt.withlm", 18, "extra key"),
    ("missing key at end", lambda d: _edit(d / "lmwt.withlm", lambda ls: ls[:-1]), "lmwt.withlm", 17, "missing key"),
    ("duplicate key", lambda d: _edit(d / "words_text", _set(2, "rec1-rms-000-1 a b\n")), "words_text", 3,
     "unique key"),
    ("non-contiguous k", lambda d: _all(d, _drop(1)), "words_text", 2, "k contiguous"),
    ("k not starting at 1", lambda d: _all(d, _drop(4)), "words_text", 5, "first hypothesis"),
    ("utterance block split", lambda d: _all(d, _swap(3, 4)), "words_text", 5, "in one block"),
    ("key order differs", lambda d: _edit(d / "acwt", _swap(0, 1)), "acwt", 1, "same keys in the same order"),
    ("bad key", lambda d: _all(d, lambda ls: [ls[0].replace("rec1-rms-000-1", "rec1rms0001x", 1)] + ls[1:]),
     "words_text", 1, "<utt>-<k>"),
    ("word id not in words.txt", lambda d: _edit(d / "words", _set(3, "rec1-rms-000-4 21 14 10 99999 \n")),
     "words", 4, "99999"),
    ("words vs words_text", lambda d: _edit(d / "words_text", _set(6, "rec1-rms-001-3 it turns red when cooked\n")),
     "words_text", 7, "mapped through"),
    ("nan cost", lambda d: _edit(d / "acwt", _set(8, "rec1-rms-002-2 nan \n")), "acwt", 9, "finite"),
    ("inf cost", lambda d: _edit(d / "lmwt.withlm", _set(0, "rec1-rms-000-1 inf \n")), "lmwt.withlm", 1, "finite"),
    ("non-numeric", lambda d: _edit(d / "lmwt.nolm", _set(10, "rec2-awb-000-1 0.5x \n")), "lmwt.nolm", 11, "float"),
    ("non-integer word id", lambda d: _edit(d / "words", _set(2, "rec1-rms-000-3 1 14.0 10 3 \n")), "words", 3,
     "integers"),
    ("empty line", lambda d: _edit(d / "acwt", lambda ls: ls[:2] + ["\n"] + ls[2:]), "acwt", 3, "empty line"),
    ("bad utf-8", lambda d: (d / "words_text").write_bytes(
        (d / "words_text").read_bytes().replace(b"lobsters", b"lob\xffsters", 1)),
     "words_text", 1, "UTF-8"),
]


@pytest.mark.parametrize("name,edit,fname,line,what", CASES, ids=[c[0] for c in CASES])
def test_bad_nbest_dir(nbest_small, name, edit, fname, line, what):
    edit(nbest_small)
    with pytest.raises(RescoreError) as e:
        load_nbest_dir(nbest_small, nbest_small / "data")
    msg = str(e.value)
    assert f"{nbest_small / fname}:{line}:" in msg, msg
    assert what in msg, msg


def test_truncated_gzip_archive_in_nbest_dir(nbest_small):
    body = (nbest_small / "acwt").read_bytes() * 1
    (nbest_small / "acwt").unlink()
    data = gzip.compress(body)
    (nbest_small / "acwt.gz").write_bytes(data[:-12])  # stream cut before its end marker
    with pytest.raises(RescoreError) as e:
        load_nbest_dir(nbest_small, nbest_small / "data")
    assert f"{nbest_small / 'acwt.gz'}:" in str(e.value) and "gzip" in str(e.value)


def test_missing_archive_and_reference(nbest_small):
    shutil.move(nbest_small / "lmwt.nolm", nbest_small / "nolm.bak")
    with pytest.raises(RescoreError, match="lmwt.nolm"):
        load_nbest_dir(nbest_small)
    shutil.move(nbest_small / "nolm.bak", nbest_small / "lmwt.nolm")
    _edit(nbest_small / "data" / "text", _drop(4))
    with pytest.raises(RescoreError, match=r"text: expected a reference for N-best utterance 'rec2-awb-001'"):
        load_nbest_dir(nbest_small, nbest_small / "data")
    _edit(nbest_small / "data" / "text", lambda ls: ls + ["rec2-awb-001 it is long\n", "rec3-x-000 not decoded\n"])
    with pytest.raises(RescoreError, match="rec3-x-000"):
        load_nbest_dir(nbest_small, nbest_small / "data")
    assert "rec3-x-000" not in load_nbest_dir(nbest_small, nbest_small / "data", allow_missing=True).refs


@pytest.mark.shared_data
def test_shared_dev_set_loads():
    d = shared_data_path("tts-wikitext2-dev")
    s = load_nbest_dir(d / "nbest", d / "data")  # words.txt found in ../lang; words checked against words_text
    assert s.num_hyps == 62631 and s.num_utts == 627
    assert len(s.conversations) == 60 and s.grouping == "segments"
    assert sum(len(r) for r in s.refs.values()) == 11122
    first = s.conversations[0].utterances
    assert [u.id for u in first[:3]] == ["dev-a000-rms-000", "dev-a000-rms-001", "dev-a000-rms-002"]


def test_empty_hypothesis(nbest_small):
    # An empty int vector ('key ' in words, bare key in words_text) is an empty hypothesis,
    # and the next line is not swallowed.
    _edit(nbest_small / "words", _set(13, "rec2-awb-000-4 \n"))
    _edit(nbest_small / "words_text", _set(13, "rec2-awb-000-4\n"))
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    u = [u for u in s.utterances() if u.id == "rec2-awb-000"][0]
    assert [h.words for h in u.hyps][3] == [] and len(u.hyps) == 4
    assert s.num_hyps == 17


# --------------------------------------------------------------------------------------------
# A share of the set (rescore-nbest --split K/N): only its entries parsed, the same result


def _share(k, n):
    from rescore.jobs.nbest import split_share

    return lambda ids: split_share(ids, k, n, block=1)


def _binary_and_scp(d):
    """acwt as a gzipped binary archive, words as a binary archive behind an scp."""
    for name, kind in (("acwt", "float"), ("words", "ints")):
        t = read_table(d / name, kind)
        (d / name).unlink()
        if name == "acwt":
            write_table(d / "acwt.bin.gz", kind, t.as_dict(), binary=True, gz=True)
        else:
            write_table(d / "words.ark", kind, t.as_dict(), binary=True, scp=d / "words.scp")


@pytest.mark.parametrize("layout", ["segments", "utt2spk", "no data dir", "binary+scp", "words only"])
def test_a_share_is_the_whole_sets_subset(nbest_small, layout):
    data = nbest_small / "data"
    if layout == "utt2spk":
        (data / "segments").unlink()
    if layout == "binary+scp":
        _binary_and_scp(nbest_small)
    if layout == "words only":
        (nbest_small / "words_text").unlink()
    data = None if layout == "no data dir" else data
    whole = load_nbest_dir(nbest_small, data)
    ids = [c.id for c in whole.conversations]
    for n in (1, 2, 3, len(ids) + 1):
        parts = []
        for k in range(1, n + 1):
            part = load_nbest_dir(nbest_small, data, select=_share(k, n))
            assert part == whole.subset(_share(k, n)(ids)), (n, k)
            parts += part.conversations
        assert parts == whole.conversations  # the shares, in job order, are the whole set


# The CASES whose fault is in a value (the others are in keys, or the container): only the job
# whose share holds the entry reads it.
VALUE_CASES = {"word id not in words.txt", "words vs words_text", "nan cost", "inf cost", "non-numeric",
               "non-integer word id", "bad utf-8"}


@pytest.mark.parametrize("name,edit,fname,line,what", CASES, ids=[c[0] for c in CASES])
def test_bad_nbest_dir_in_a_share(nbest_small, name, edit, fname, line, what):
    """A fault of keys fails every job with the whole set's message (the shares depend on the
    keys); a bad value fails only the job whose share holds it, with the whole set's message,
    and the other job reads its share as from the intact dir."""
    data = nbest_small / "data"
    intact = load_nbest_dir(nbest_small, data)
    edit(nbest_small)
    with pytest.raises(RescoreError) as whole:
        load_nbest_dir(nbest_small, data)
    failed = []
    for k in (1, 2):  # two jobs, one conversation each (rec1, rec2)
        try:
            part = load_nbest_dir(nbest_small, data, select=_share(k, 2))
        except RescoreError as e:
            assert str(e) == str(whole.value), (k, str(e))
            failed.append(k)
        else:
            assert part == intact.subset(_share(k, 2)([c.id for c in intact.conversations]))
    if name in VALUE_CASES:  # the job of the conversation of the entry at the error's line
        utt = (NBEST_SMALL / "words_text").read_text().splitlines()[line - 1].split()[0].rpartition("-")[0]
        owner = 1 + next(i for i, c in enumerate(intact.conversations) if utt in [u.id for u in c.utterances])
        assert failed == [owner], str(whole.value)
    else:
        assert failed == [1, 2], str(whole.value)
