"""Property-based fuzzing of every input parser: on any bytes, a parser either returns or raises
RescoreError naming the file; never another exception (no traceback reaches a user).

Two kinds of input per parser: arbitrary bytes, and near-valid text (lines of the right shape with
random tokens: bad numbers, missing fields, control characters, duplicates), which reaches the
checks past the first line. Gzip is exercised too: valid gzip of random text, and truncated gzip.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rescore.errors import RescoreError
from rescore.io import kaldi
from rescore.io.symbols import read_vocabulary
from rescore.vocab import Vocabulary, read_sentences

from tests.conftest import NBEST_SMALL

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# tokens a Kaldi file could hold, and the near misses that break parsers
TOKENS = st.one_of(
    st.sampled_from(["0", "1", "12", "-3", "1.5", "1e-05", "nan", "inf", "-inf", "1_0", "0x10",
                     "", "a", "<eps>", "#0", "<unk>", "utt1", "utt1-1", "utt1-2", "\u00e9", "\u0663",
                     "\x00", "\x7f", "\ufeff", "[", "]", "ark:", "x.ark:0", "x.ark:99999"]),
    st.text(min_size=1, max_size=6),
    st.integers(-2**40, 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
LINE = st.lists(TOKENS, min_size=0, max_size=6).map(" ".join)
TEXT = st.lists(LINE, min_size=0, max_size=12).map(lambda ls: "\n".join(ls) + "\n")


def _contents():
    """bytes: random, near-valid UTF-8 text, gzip of text, truncated gzip, non-UTF-8."""
    text = TEXT.map(lambda s: s.encode("utf-8", "surrogatepass"))
    return st.one_of(
        st.binary(max_size=300),
        text,
        text.map(gzip.compress),
        text.map(lambda b: gzip.compress(b)[: max(2, len(gzip.compress(b)) // 2)]),
        text.map(lambda b: b + b"\xff\xfe line\n"),
        st.just(b"\x1f\x8b"),  # gzip magic and nothing else
    )


CONTENTS = _contents()


def _check(fn, name: str, data: bytes, *args) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            fn(path, *args)
        except RescoreError as e:
            assert name in str(e), str(e)  # the message names the file


@pytest.mark.parametrize("kind", ["float", "ints", "tokens"])
@FUZZ
@given(data=CONTENTS)
def test_text_table(kind, data):
    _check(kaldi.read_text_table, "table", data, kind)


@pytest.mark.parametrize("kind", ["float", "ints", "tokens"])
@FUZZ
@given(data=CONTENTS, key=st.sampled_from([b"utt1 ", b"a b ", b" ", b""]),
       body=st.binary(max_size=40))
def test_any_table(kind, data, key, body):
    """read_table guesses the container: binary archives (``key \\0B ...``) too."""
    _check(kaldi.read_table, "ark", data, kind)
    _check(kaldi.read_table, "ark", key + b"\0B" + body, kind)
    _check(kaldi.read_table, "ark", key + b"\0B\x04" + body + b"utt2 \0B\x04\x01\x00", kind)


# Tables of well-formed lines with near misses in them: 'key value...' with Kaldi's and other
# whitespace, so that the readers' success paths are reached as often as their faults.
SEPARATOR = st.sampled_from([" ", " ", "\t", "  ", " \r", "\x0b", "\x1c", "\u00a0"])
NUMBER = st.one_of(st.sampled_from(["0", "7", "12", "007", "1.5", "-2.25", "1e-05"]), st.integers(0, 10**6).map(str),
                   st.floats(allow_nan=False, allow_infinity=False).map(repr))
TABLE_LINE = st.builds(lambda key, toks, sep, end: sep.join([key, *toks]) + end,
                       st.one_of(st.integers(1, 99).map("u-{}".format), st.sampled_from(["a", "é-1", "k"])),
                       st.one_of(st.lists(NUMBER, min_size=1, max_size=1),
                                 st.lists(st.one_of(NUMBER, TOKENS), max_size=4)),
                       SEPARATOR, st.sampled_from(["", " ", "\r"]))
TABLES = st.lists(TABLE_LINE, max_size=8).map(lambda ls: "\n".join(ls)).flatmap(
    lambda text: st.sampled_from([text, text + "\n"])).map(lambda s: s.encode("utf-8", "surrogatepass"))


def _outcome(fn, *args):
    """What a reader gives: ("table", keys, values) or ("error", its message)."""
    try:
        t = fn(*args)
    except RescoreError as e:
        return "error", str(e)
    return ("value", t) if isinstance(t, dict) else ("table", t.keys, t.values)


@pytest.mark.parametrize("kind", ["float", "ints", "tokens"])
@pytest.mark.parametrize("allow_empty_value", [True, False])
@settings(FUZZ, max_examples=100)
@given(data=st.one_of(TABLES, CONTENTS), gz=st.booleans())
def test_text_table_in_bulk_is_read_as_line_by_line(kind, allow_empty_value, data, gz):
    """read_text_table reads a file in bulk (rescore.io.text_tables): it gives what the line by
    line reader gives, the same table or the same error."""
    from rescore.io import text_tables

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "table"
        path.write_bytes(gzip.compress(data) if gz else data)
        assert _outcome(text_tables.read_text_table, path, kind, allow_empty_value) == \
            _outcome(text_tables._read_text_lines, path, kind, allow_empty_value, None)


@settings(FUZZ, max_examples=100)
@given(data=st.one_of(TABLES, CONTENTS))
def test_nn_costs_in_bulk_are_read_as_line_by_line(data):
    """read_nn_costs parses all costs at once: the same costs, or the same error, as cost by cost."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "lmwt.nn"
        path.write_bytes(data)
        bulk = _outcome(kaldi.read_nn_costs, path)
        with mock.patch.object(kaldi, "parse_floats", lambda toks: None):  # (no bulk parse: row by row)
            assert bulk == _outcome(kaldi.read_nn_costs, path)


@FUZZ
@given(index=TEXT, ark=CONTENTS, kind=st.sampled_from(["float", "ints", "tokens"]))
def test_scp_table(index, ark, kind):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "x.ark").write_bytes(ark)
        (Path(d) / "t.scp").write_text(index.replace("x.ark:99999", "x.ark:3"), errors="replace")
        try:
            kaldi.read_scp_table(Path(d) / "t.scp", kind)
        except RescoreError as e:
            assert "t.scp" in str(e), str(e)


@FUZZ
@given(data=CONTENTS)
def test_symbol_tables(data):
    _check(kaldi.read_symbol_table, "words.txt", data)
    _check(read_vocabulary, "words.txt", data)


@FUZZ
@given(data=CONTENTS)
def test_nn_costs(data):
    _check(kaldi.read_nn_costs, "lmwt.nn", data)


@FUZZ
@given(data=CONTENTS)
def test_text_corpus(data):
    _check(read_sentences, "train.txt", data)
    _check(Vocabulary.from_text, "train.txt", data)


JSONISH = st.one_of(
    st.binary(max_size=100),
    st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(
                     st.sampled_from(["weight", "inv_acwt", "wip", "x"]), c, max_size=4),
                 max_leaves=8).map(lambda o: __import__("json").dumps(o).encode()),
    st.fixed_dictionaries({"weight": st.floats() | st.text(max_size=3),
                           "inv_acwt": st.floats() | st.integers(),
                           "wip": st.floats() | st.none()}).map(
        lambda o: __import__("json").dumps(o).encode()),
)


@FUZZ
@given(data=JSONISH)
def test_params_json(data):
    from rescore.nbest.combine import Params

    _check(Params.from_json, "params.json", data)


DATA_FILES = ["text", "utt2spk", "spk2utt", "segments"]


@FUZZ
@given(name=st.sampled_from(DATA_FILES), data=CONTENTS)
def test_data_dir(name, data):
    with tempfile.TemporaryDirectory() as d:
        dd = Path(d) / "data"
        shutil.copytree(NBEST_SMALL / "data", dd)
        (dd / name).write_bytes(data)
        try:
            kaldi.read_data_dir(dd)
        except RescoreError as e:
            assert name in str(e), str(e)


NBEST_FILES = ["words", "words_text", "acwt", "lmwt.withlm", "lmwt.nolm", "words.txt"]


def _mutate(lines, op, i, j, token):
    lines = list(lines)
    if not lines:
        return [token]
    i, j = i % len(lines), j % len(lines)
    if op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "token":
        fields = lines[i].split(" ")
        fields[j % len(fields)] = token
        lines[i] = " ".join(fields)
    elif op == "append":
        lines[i] += " " + token
    elif op == "truncate":
        lines = lines[:i]
    return lines


@FUZZ
@given(name=st.sampled_from(NBEST_FILES + ["data/" + n for n in DATA_FILES]),
       ops=st.lists(st.tuples(st.sampled_from(["drop", "dup", "swap", "token", "append", "truncate"]),
                              st.integers(0, 100), st.integers(0, 100), TOKENS), min_size=1, max_size=3),
       gz=st.booleans())
def test_nbest_dir_mutations(name, ops, gz):
    """The whole N-best dir reader on line-level mutations of the small fixture."""
    from rescore.nbest.sets import load_nbest_dir

    with tempfile.TemporaryDirectory() as d:
        nd = Path(d) / "nbest"
        shutil.copytree(NBEST_SMALL, nd)
        lines = (nd / name).read_text().splitlines()
        for op in ops:
            lines = _mutate(lines, *op)
        data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
        if gz and not name.startswith("data/") and name != "words.txt":
            (nd / name).unlink()
            (nd / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (nd / name).write_bytes(data)
        try:
            load_nbest_dir(nd, nd / "data")
        except RescoreError as e:
            assert str(nd) in str(e) or Path(name).name in str(e), str(e)


@settings(FUZZ, max_examples=60)
@given(name=st.sampled_from(["words", "words", "words.txt", "words_text"]),
       ops=st.lists(st.tuples(st.sampled_from(["drop", "dup", "swap", "token", "append", "truncate"]),
                              st.integers(0, 100), st.integers(0, 100),
                              st.one_of(TOKENS, st.sampled_from(["21", "021", "99999", "+3", "٣", "14.0"]))),
                    min_size=1, max_size=3),
       words_only=st.booleans())
def test_words_mapped_in_bulk_load_as_ids_mapped(name, ops, words_only):
    """load_nbest_dir maps the ``words`` archive through words.txt in bulk where it can
    (rescore.nbest.sets._words_through): the same set, or the same error, as reading the ids and
    mapping them."""
    from rescore.nbest import sets as nbest

    with tempfile.TemporaryDirectory() as d:
        nd = Path(d) / "nbest"
        shutil.copytree(NBEST_SMALL, nd)
        if words_only:
            (nd / "words_text").unlink()
        if (nd / name).exists():
            lines = (nd / name).read_text().splitlines()
            for op in ops:
                lines = _mutate(lines, *op)
            (nd / name).write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))

        def load():
            try:
                return nbest.load_nbest_dir(nd, nd / "data")
            except RescoreError as e:
                return str(e)

        got = load()
        with mock.patch.object(nbest, "_words_through", lambda path, words_txt, words_text: None):
            assert got == load()


@settings(FUZZ, max_examples=12)
@given(data=st.binary(max_size=200), cut=st.integers(0, 5000))
def test_checkpoint(data, cut):
    """Random bytes, and a real checkpoint cut short or with bytes flipped: RescoreError."""
    from rescore.models import load_checkpoint

    _check(load_checkpoint, "model.pt", data)
    good = _tiny_checkpoint_bytes()
    _check(load_checkpoint, "model.pt", good[: cut % len(good)])
    flipped = bytearray(good)
    flipped[cut % len(good)] ^= 0xFF
    _check(load_checkpoint, "model.pt", bytes(flipped))


_CKPT = {}


def _tiny_checkpoint_bytes() -> bytes:
    if "b" not in _CKPT:
        import torch

        from rescore.models import ModelConfig, build_model, save_checkpoint

        torch.manual_seed(0)
        model = build_model(ModelConfig(hidden=4, layers=1), Vocabulary(["<eos>", "<unk>", "a"]))
        with tempfile.TemporaryDirectory() as d:
            save_checkpoint(model, Path(d) / "m.pt")
            _CKPT["b"] = (Path(d) / "m.pt").read_bytes()
    return _CKPT["b"]
