"""The N-best TSV format: the strict reader, the atomic writer, Kaldi dir <-> file byte
for byte, and rescore-nbest on a Kaldi-derived file against the same Kaldi dir."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import NBEST_SMALL, shared_data_path
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.errors import RescoreError
from rescore.formats.kaldi import table_to_kaldi
from rescore.nbest.tables import kaldi_to_table
from rescore.formats.table import Hypothesis, NbestTable, Utterance
from rescore.formats.tsv import read_nbest_table, write_nbest_table

HEAD = "#nbest-interchange 1\nutt\trank\twords\tac\tlm\n"


def _write(tmp_path, text, name="n.tsv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_reads_columns_words_scores_and_keeps_the_score_text(tmp_path):
    p = _write(tmp_path, HEAD + "u1\t1\ta b\t10.50\t-2\nu1\t2\t\t1e-05\t3\nu0\t1\tc\t0\t0\n")
    t = read_nbest_table(p)
    assert t.columns == ("ac", "lm")
    assert [u.id for u in t.utterances] == ["u1", "u0"]  # file order kept
    h1, h2 = t.utterances[0].hyps
    assert (h1.rank, h1.words, h1.scores, h1.texts) == (1, ["a", "b"], (10.5, -2.0), ("10.50", "-2"))
    assert (h2.words, h2.scores) == ([], (1e-05, 3.0))  # an empty hypothesis
    write_nbest_table(tmp_path / "again.tsv", t)
    assert (tmp_path / "again.tsv").read_bytes() == p.read_bytes()


@pytest.mark.parametrize("text, line, expected", [
    ("", 1, "the format line '#nbest-interchange 1'"),
    ("utt\trank\twords\n", 1, "the format line"),
    ("#nbest-interchange 2\nutt\trank\twords\n", 1, "version 1"),
    ("#nbest-interchange 1\n", 2, "the header line"),
    ("#nbest-interchange 1\nutt\twords\trank\n", 2, "the header line"),
    ("#nbest-interchange 1\nutt\trank\twords\tac\tac\n", 2, "each score column named once"),
    ("#nbest-interchange 1\nutt\trank\twords\t1x\n", 2, "score column names"),
    (HEAD + "u1\t1\ta\t1\n", 3, "5 tab-separated fields"),
    (HEAD + "u1\t1\ta\t1\t2\t3\n", 3, "5 tab-separated fields"),
    (HEAD + "u1\t1\ta\tabc\t2\n", 3, "a finite number for score 'ac'"),
    (HEAD + "u1\t1\ta\t1\tnan\n", 3, "a finite number for score 'lm'"),
    (HEAD + "u1\t1\ta\tinf\t2\n", 3, "a finite number for score 'ac'"),
    (HEAD + "u1\t1\ta\t1e999\t2\n", 3, "a finite number for score 'ac'"),
    (HEAD + "u1\t1\ta\t1_0\t2\n", 3, "a finite number for score 'ac'"),
    (HEAD + "u1\t0\ta\t1\t2\n", 3, "a rank (an integer >= 1)"),
    (HEAD + "u 1\t1\ta\t1\t2\n", 3, "an utterance id without whitespace"),
    (HEAD + "u1\t2\ta\t1\t2\n", 3, "rank 1 (the first hypothesis of utterance 'u1')"),
    (HEAD + "u1\t1\ta\t1\t2\nu1\t1\tb\t1\t2\n", 4, "(rank 1 is at line 3 already: a duplicate)"),
    (HEAD + "u1\t1\ta\t1\t2\nu1\t3\tb\t1\t2\n", 4, "rank 2 of 'u1' (ranks 1..N in order, none missing)"),
    (HEAD + "u1\t1\ta\t1\t2\nu2\t1\tb\t1\t2\nu1\t2\tc\t1\t2\n", 5, "the hypotheses of 'u1' in one block"),
    (HEAD + "u1\t1\ta\t1\t2\n\nu2\t1\tb\t1\t2\n", 4, "no empty lines"),
])
def test_bad_files_name_the_file_the_line_and_what_was_expected(tmp_path, text, line, expected):
    p = _write(tmp_path, text)
    with pytest.raises(RescoreError) as e:
        read_nbest_table(p)
    assert e.value.path == str(p) and e.value.line == line
    assert expected in str(e.value)


def test_crlf_and_a_byte_order_mark_read_as_the_kaldi_readers_read_them(tmp_path):
    text = HEAD + "u1\t1\ta b\t1\t2\nu1\t2\ta\t1.5\t2\n"
    clean = read_nbest_table(_write(tmp_path, text))
    (tmp_path / "w.tsv").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    windows = read_nbest_table(tmp_path / "w.tsv")
    assert (windows.columns, windows.utterances) == (clean.columns, clean.utterances)


def test_a_required_column_that_is_missing(tmp_path):
    p = _write(tmp_path, HEAD + "u1\t1\ta\t1\t2\n")
    with pytest.raises(RescoreError, match=r"n.tsv:2: expected a score column 'ctc' \(the input has: ac, lm\)"):
        read_nbest_table(p, required=["ctc"])


def test_bad_bytes_and_a_missing_file(tmp_path):
    p = tmp_path / "n.tsv"
    p.write_bytes(HEAD.encode() + b"u1\t1\t\xff\t1\t2\n")
    with pytest.raises(RescoreError, match="n.tsv:3: expected UTF-8"):
        read_nbest_table(p)
    with pytest.raises(RescoreError, match="a readable N-best TSV file"):
        read_nbest_table(tmp_path / "none.tsv")


def test_writer_refuses_bad_tables_and_leaves_the_old_file(tmp_path):
    p = _write(tmp_path, "old\n")
    bad = [NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(1, ["a"], (float("nan"),))])]),
           NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(2, ["a"], (1.0,))])]),
           NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(1, ["a\tb"], (1.0,))])]),
           NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(1, ["a\rb"], (1.0,))])]),
           NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(1, ["a b"], (1.0,))])]),
           NbestTable("x", ("ac",), [Utterance("u", [Hypothesis(1, ["a"], (1.0,))])] * 2),
           NbestTable("x", ("words",), [])]
    for t in bad:
        with pytest.raises(RescoreError):
            write_nbest_table(p, t)
        assert p.read_text() == "old\n" and [q.name for q in tmp_path.iterdir()] == ["n.tsv"]


def _kaldi_fixture(tmp_path):
    """The Kaldi-written archives of kaldi-nbest-fixture as one N-best dir (lmwt.nolm given the
    trailing space Kaldi's binaries write; the fixture's copy of it is hand-made)."""
    src = shared_data_path("kaldi-nbest-fixture")
    d = tmp_path / "kaldi"
    d.mkdir()
    for n in ("words", "acwt", "lmwt.withlm"):
        shutil.copy(src / n, d / n)
    nolm = (src / "lmwt.nolm.input-text").read_text().splitlines()
    (d / "lmwt.nolm").write_text("".join(line + " \n" for line in nolm))
    return d


@pytest.mark.shared_data
def test_kaldi_written_archives_round_trip_byte_for_byte(tmp_path):
    d = _kaldi_fixture(tmp_path)
    words_txt = shared_data_path("tts-wikitext2-dev", "lang", "words.txt")
    r = CliRunner().invoke(convert, [str(d), str(tmp_path / "n.tsv"), "--words-txt", str(words_txt)])
    assert r.exit_code == 0, r.output
    t = read_nbest_table(tmp_path / "n.tsv")
    assert t.columns == ("ac", "graph", "nolm") and t.num_hyps == 793 and len(t.utterances) == 8
    assert t.utterances[0].hyps[1].texts == ("998.0429", "61.1563", "0.7290")  # Kaldi's text, not 0.729
    r = CliRunner().invoke(convert, [str(tmp_path / "n.tsv"), str(tmp_path / "back"), "--to", "kaldi",
                                     "--words-txt", str(words_txt)])
    assert r.exit_code == 0, r.output
    for n in ("words", "acwt", "lmwt.withlm", "lmwt.nolm"):
        assert (tmp_path / "back" / n).read_bytes() == (d / n).read_bytes(), n


NAMES = ("words", "words_text", "acwt", "lmwt.withlm", "lmwt.nolm")


def _dev_subset(tmp_path, n_utts=25):
    """The first n_utts utterances of the shared dev set's N-best dir (whole utterances)."""
    src = shared_data_path("tts-wikitext2-dev")
    d = tmp_path / "nbest"
    d.mkdir()
    keep = None
    for n in NAMES:
        lines = (src / "nbest" / n).read_text(encoding="utf-8").splitlines(keepends=True)
        if keep is None:
            utts = list(dict.fromkeys(line.split()[0].rpartition("-")[0] for line in lines))
            first = set(utts[:n_utts])
            keep = sum(1 for line in lines if line.split()[0].rpartition("-")[0] in first)
        (d / n).write_text("".join(lines[:keep]), encoding="utf-8")
    return d, keep


@pytest.mark.shared_data
def test_dev_set_subset_round_trips_byte_for_byte(tmp_path):
    words_txt = shared_data_path("tts-wikitext2-dev", "lang", "words.txt")
    d, n_hyps = _dev_subset(tmp_path)
    table = kaldi_to_table(d, words_txt)
    assert len(table.utterances) == 25 and table.num_hyps == n_hyps
    write_nbest_table(tmp_path / "n.tsv", table)
    table_to_kaldi(read_nbest_table(tmp_path / "n.tsv"), tmp_path / "back", words_txt,
                   kaldi_style=False)  # this set's archives are hand-made: no trailing spaces
    for n in NAMES:
        assert (tmp_path / "back" / n).read_bytes() == (d / n).read_bytes(), n


def test_binary_archives_convert_to_the_same_floats(tmp_path):
    from rescore.io.kaldi import write_table
    from rescore.nbest.sets import load_nbest_dir

    s = load_nbest_dir(NBEST_SMALL)
    d = tmp_path / "bin"
    d.mkdir()
    shutil.copy(NBEST_SMALL / "words_text", d / "words_text")
    for n, attr in (("acwt", "ac"), ("lmwt.withlm", "withlm"), ("lmwt.nolm", "nolm")):
        write_table(d / (n + ".ark"), "float", {h.key: getattr(h, attr) for u in s.utterances() for h in u.hyps},
                    binary=True)
    t = kaldi_to_table(d)
    b = load_nbest_dir(d)
    assert [h.scores for u in t.utterances for h in u.hyps] == \
        [(h.ac, h.withlm, h.nolm) for u in b.utterances() for h in u.hyps]
    assert all(x is None for u in t.utterances for h in u.hyps for x in h.texts)  # no text to keep


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A small random LSTM over the fixture's words (as tests/cli/test_cli_nbest.py builds them)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import Vocabulary

    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    words = sorted({w for u in s.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    lm = build_model(ModelConfig(hidden=16, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>"] + words[1:]))
    path = tmp_path_factory.mktemp("model") / "lm.pt"
    save_checkpoint(lm, path)
    return path


def _same_as_the_kaldi_dir(tmp_path, nbest_dir, data_dir, model, *extra):
    """rescore-nbest on nbest_dir and on its TSV file: the same text and NN LM costs, and
    scores.tsv's nn and total the Kaldi formula's floats of the dir's costs. The dir's words.txt
    goes with the file by --words-txt (the recognizer's words of --oov-penalty auto, the default
    where there is one)."""
    from rescore.nbest.interp import fixed_cost, total_cost
    from rescore.io.kaldi import read_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    r = CliRunner().invoke(convert, [str(nbest_dir), str(tmp_path / "n.tsv")])
    assert r.exit_code == 0, r.output
    common = ["--data-dir", str(data_dir), "--model", str(model), "--device", "cpu", "--weight", "0.6",
              "--inv-acwt", "11", "--wip", "0.5", *extra]
    a = CliRunner().invoke(rescore_nbest, [str(nbest_dir), str(tmp_path / "a"), *common])
    words = ["--words-txt", str(nbest_dir / "words.txt")] if (nbest_dir / "words.txt").is_file() else []
    b = CliRunner().invoke(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "b"), *common, *words])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert (tmp_path / "a" / "text").read_bytes() == (tmp_path / "b" / "text").read_bytes()
    assert (tmp_path / "a" / "lmwt.nn").read_bytes() == (tmp_path / "b" / "lmwt.nn").read_bytes()
    nn = read_nn_costs(tmp_path / "a" / "lmwt.nn")
    s = load_nbest_dir(nbest_dir, data_dir)
    want = {h.key: (float(sum(nn[h.key])), total_cost(fixed_cost(h.ac, h.withlm, h.nolm, len(h.words), 0.6, 11.0,
                                                                  0.5), float(sum(nn[h.key])), 0.6))
            for u in s.utterances() for h in u.hyps}
    out = read_nbest_table(tmp_path / "b" / "scores.tsv")
    assert out.columns == ("ac", "graph", "nolm", "nn", "total")
    got = {f"{u.id}-{h.rank}": h.scores[3:] for u in out.utterances for h in u.hyps}
    assert got == want  # the same floats, not merely close ones
    ra, rb = (json.loads((tmp_path / x / "report.json").read_text()) for x in "ab")
    assert rb["changed_utts"] == ra["changed_utts"] > 0 and rb["wer"] == ra["wer"]
    return s


def test_rescoring_the_converted_file_gives_the_kaldi_dirs_costs_and_1best(tiny_model, tmp_path):
    s = _same_as_the_kaldi_dir(tmp_path, NBEST_SMALL, NBEST_SMALL / "data", tiny_model)
    assert s.grouping == "segments"  # the LM state carried along conversations in both runs


@pytest.mark.shared_data
def test_dev_subset_rescored_from_the_file_as_from_the_dir(tiny_model, tmp_path):
    d, _ = _dev_subset(tmp_path, n_utts=12)
    data = tmp_path / "data"
    data.mkdir()
    src = shared_data_path("tts-wikitext2-dev", "data")
    utts = {line.split()[0].rpartition("-")[0] for line in (d / "acwt").read_text().splitlines()}
    for n in ("text", "segments", "utt2spk"):
        (data / n).write_text("".join(line for line in (src / n).read_text().splitlines(keepends=True)
                                      if line.split()[0] in utts))
    shutil.copy(shared_data_path("tts-wikitext2-dev", "lang", "words.txt"), d / "words.txt")
    # (the fixture's small LM lacks most of the dev set's words)
    _same_as_the_kaldi_dir(tmp_path, d, data, tiny_model, "--conv-batch", "2", "--allow-oov-rate")


def test_the_input_checks_of_a_kaldi_dir_apply_to_a_file(tiny_model, tmp_path):
    """An LM that lacks most of the file's words is refused (exit 1) as for a Kaldi dir, unless
    --allow-oov-rate; the report then holds the vocabulary check."""
    p = _write(tmp_path, "#nbest-interchange 1\nutt\trank\twords\tam\n"
                         "u1\t1\tzyx wvu\t10\nu1\t2\tzyx tsr\t11\nu2\t1\tqpo\t3\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "text").write_text("u1 zyx wvu\nu2 qpo\n")
    common = ["--data-dir", str(data), "--model", str(tiny_model), "--device", "cpu"]
    r = CliRunner().invoke(rescore_nbest, [str(p), str(tmp_path / "o"), *common])
    assert r.exit_code == 1 and "100.0 % of 5 tokens" in r.output and "--allow-oov-rate" in r.output, r.output
    assert not (tmp_path / "o" / "text").exists()
    r = CliRunner().invoke(rescore_nbest, [str(p), str(tmp_path / "o"), *common, "--allow-oov-rate"])
    assert r.exit_code == 0, r.output
    [check] = json.loads((tmp_path / "o" / "report.json").read_text())["input_checks"]["vocabulary"]
    assert check["hyp_oov_rate"] == 100.0 and check["hyp_tokens"] == 5


def test_a_split_job_writes_its_share(tmp_path):
    r = CliRunner().invoke(convert, [str(NBEST_SMALL), str(tmp_path / "n.tsv")])
    assert r.exit_code == 0, r.output
    whole = []
    for k in (1, 2):
        r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / f"o{k}"), "--data-dir",
                                               str(NBEST_SMALL / "data"), "--split", f"{k}/2", "--conv-batch", "1"])
        assert r.exit_code == 0, r.output
        whole.append((tmp_path / f"o{k}" / "text").read_text())
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "all"), "--data-dir",
                                           str(NBEST_SMALL / "data")])
    assert all(whole) and "".join(whole) == (tmp_path / "all" / "text").read_text()


def test_score_weights_name_columns(tmp_path):
    p = _write(tmp_path, "#nbest-interchange 1\nutt\trank\twords\tam\tctc\n"
                         "u1\t1\ta b\t10\t4\nu1\t2\ta c\t11\t1\nu2\t1\td\t3\t3\n")
    run = CliRunner().invoke
    r = run(rescore_nbest, [str(p), str(tmp_path / "o"), "--score-weight", "am=1", "--score-weight", "ctc=0.5",
                            "--wip", "0.25"])
    assert r.exit_code == 0, r.output
    out = read_nbest_table(tmp_path / "o" / "scores.tsv")
    assert [h.scores[-1] for u in out.utterances for h in u.hyps] == [10 + 2 + 0.5, 11 + 0.5 + 0.5, 3 + 1.5 + 0.25]
    assert (tmp_path / "o" / "text").read_text() == "u1 a c\nu2 d\n"
    r = run(rescore_nbest, [str(p), str(tmp_path / "q"), "--score-weight", "ctc=3"])  # am defaults to 1
    assert r.exit_code == 0 and (tmp_path / "q" / "text").read_text() == "u1 a c\nu2 d\n"
    r = run(rescore_nbest, [str(p), str(tmp_path / "q2"), "--score-weight", "am=1", "--score-weight", "ctc=0"])
    assert (tmp_path / "q2" / "text").read_text() == "u1 a b\nu2 d\n"
    r = run(rescore_nbest, [str(p), str(tmp_path / "e"), "--score-weight", "lm=1"])
    assert r.exit_code == 1 and f"{p}:2: expected a score column 'lm'" in r.output
    assert not (tmp_path / "e").exists()
    for bad in ("lm", "lm=x", "=1", "lm=nan"):
        r = run(rescore_nbest, [str(p), str(tmp_path / "e"), "--score-weight", bad])
        assert r.exit_code == 2 and "--score-weight: expected NAME=NUMBER" in r.output
    r = run(rescore_nbest, [str(NBEST_SMALL), str(tmp_path / "e"), "--score-weight", "ac=1"])
    assert r.exit_code == 2


def test_an_input_with_the_added_columns_is_refused(tmp_path):
    p = _write(tmp_path, "#nbest-interchange 1\nutt\trank\twords\tac\ttotal\nu1\t1\ta\t1\t2\n")
    r = CliRunner().invoke(rescore_nbest, [str(p), str(tmp_path / "o")])
    assert r.exit_code == 1 and f"{p}:2: expected no score column 'total'" in r.output


# --------------------------------------------------------------------------------------------
# Property tests: any table round trips; any text reads either into a table or a RescoreError

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
WORD = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=5)
SCORE = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def tables(draw):
    columns = tuple(draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True), max_size=4, unique=True)))
    utts = []
    for i in range(draw(st.integers(0, 4))):
        hyps = [Hypothesis(k, draw(st.lists(WORD, max_size=4)), tuple(draw(SCORE) for _ in columns))
                for k in range(1, draw(st.integers(1, 4)) + 1)]
        utts.append(Utterance(f"u{i}-{draw(st.integers(0, 9))}", hyps))
    return NbestTable("t", columns, utts)


@FUZZ
@given(table=tables())
def test_any_table_round_trips(tmp_path, table):
    p = tmp_path / "t.tsv"
    write_nbest_table(p, table)
    back = read_nbest_table(p)
    assert back.columns == table.columns
    assert [(u.id, [(h.rank, h.words, h.scores) for h in u.hyps]) for u in back.utterances] == \
        [(u.id, [(h.rank, [w for w in h.words], h.scores) for h in u.hyps]) for u in table.utterances]


FIELD = st.one_of(st.sampled_from(["", "1", "2", "0", "-1", "1.5", "nan", "inf", "1e999", "u1", "a b", "x\x00",
                                   "\ufeff", "#nbest-interchange 1", "utt", "rank", "words"]),
                  st.text(max_size=5))
LINES = st.lists(st.lists(FIELD, max_size=6).map("\t".join), max_size=8)


@FUZZ
@given(lines=LINES, head=st.booleans())
def test_any_text_is_a_table_or_a_rescore_error(tmp_path, lines, head):
    p = tmp_path / "f.tsv"
    p.write_text((HEAD if head else "") + "\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    try:
        t = read_nbest_table(p)
    except RescoreError as e:
        assert e.path == str(p)
    else:
        assert all(len(h.scores) == len(t.columns) for u in t.utterances for h in u.hyps)


def test_a_kaldi_column_weighted_by_hand_keeps_the_others_kaldi_defaults(tmp_path):
    r = CliRunner().invoke(convert, [str(NBEST_SMALL), str(tmp_path / "n.tsv")])
    assert r.exit_code == 0, r.output
    nn = tmp_path / "lmwt.nn"
    nn.write_text("".join(f"{u.id}-{h.rank} {3.0 * h.rank} \n"
                          for u in read_nbest_table(tmp_path / "n.tsv").utterances for h in u.hyps))
    common = ["--data-dir", str(NBEST_SMALL / "data"), "--nn-costs", str(nn), "--weight", "0.4"]
    run = CliRunner().invoke
    a = run(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "a"), *common, "--inv-acwt", "8"])
    b = run(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "b"), *common, "--score-weight", "ac=0.125"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    ta, tb = (read_nbest_table(tmp_path / x / "scores.tsv") for x in "ab")
    for ua, ub in zip(ta.utterances, tb.utterances):
        for ha, hb in zip(ua.hyps, ub.hyps):
            ac, graph, nolm, l_nn, total = hb.scores
            assert total == pytest.approx(ac / 8 + 0.6 * graph + 0.4 * nolm + 0.4 * l_nn, abs=1e-9)
            assert ha.scores == pytest.approx(hb.scores, abs=1e-9)
    assert (tmp_path / "a" / "text").read_text() == (tmp_path / "b" / "text").read_text()
