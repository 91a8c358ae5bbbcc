"""The PocketSphinx N-best tool: the lattice search against brute force, and real decodes.

The search test needs nothing but numpy: random lattices and a made-up LM, compared with a
slow reference that enumerates every path.  The decode tests need PocketSphinx (PyPI) and
flite (Debian) and skip with the install command where either is missing.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rescore.asr.sphinx_lattice import (
    Lattice,
    base_word,
    costs,
    DecoderSettings,
    lattice_nbest,
    normalize_decoder_words,
    read_sphinx_lattice,
)

REPO = Path(__file__).resolve().parents[2]
FILLERS = {"<s>", "</s>", "<sil>", "[NOISE]"}


class FakeScorer:
    """Deterministic integer LM terms that depend on the whole 2-word history."""

    fillers = FILLERS
    silpen, fillpen = -500, -900

    def __init__(self, seed: int):
        self.seed = seed

    def lm_term(self, word, hist):
        return -(random.Random(f"{self.seed}|{word}|{'|'.join(hist)}").randrange(50, 400))

    def penalty(self, word):
        return self.silpen if base_word(word) == "<sil>" else self.fillpen


def random_lattice(rng: random.Random, n_mid: int = 9) -> Lattice:
    vocab = ["a", "a(2)", "b", "c", "dd", "<sil>", "[NOISE]"]
    words = ["<s>"] + [rng.choice(vocab) for _ in range(n_mid)] + ["</s>"]
    sf = [0] + sorted(rng.randrange(1, 20) for _ in range(n_mid)) + [25]
    exits = [[] for _ in words]
    n = len(words)
    for i in range(n):
        for j in range(i + 1, n):
            if sf[j] > sf[i] and (j == i + 1 or rng.random() < 0.35):
                ascr = rng.randrange(-800, -10)
                if base_word(words[j]) in ("<sil>", "[NOISE]") and j != n - 1:
                    ascr += FakeScorer.silpen if base_word(words[j]) == "<sil>" else FakeScorer.fillpen
                exits[i].append((j, ascr))
    # Node order must not matter: shuffle ids as PocketSphinx's reverse order does.
    perm = list(range(n))
    rng.shuffle(perm)
    inv = {old: new for new, old in enumerate(perm)}
    return Lattice(
        [words[o] for o in perm], [sf[o] for o in perm], inv[0], inv[n - 1],
        [[(inv[j], a) for j, a in exits[o]] for o in perm],
    )


def brute_force(lat: Lattice, scorer: FakeScorer):
    """Every path, scored from scratch: best score per distinct word sequence, best first."""
    best = {}

    def walk(node, hist, words, total):
        if node == lat.end:
            key = tuple(words)
            best[key] = max(best.get(key, total), total)
            return
        for j, a in lat.exits[node]:
            w = base_word(lat.words[j])
            if j != lat.end and w in FILLERS:
                walk(j, hist, words, total + a)
                continue
            lm_w = "</s>" if w in FILLERS else w
            t = scorer.lm_term(lm_w, tuple(reversed(hist[-2:])))
            walk(j, hist + [lm_w], words + ([] if w in FILLERS else [w]), total + a + t)

    walk(lat.start, ["<s>"], [], 0)
    return sorted(best.items(), key=lambda kv: -kv[1])


@pytest.mark.parametrize("seed", range(12))
def test_lattice_nbest_matches_brute_force(seed):
    rng = random.Random(seed)
    lat = random_lattice(rng)
    scorer = FakeScorer(seed)
    want = brute_force(lat, scorer)
    got = lattice_nbest(lat, scorer, n=1000)
    assert [tuple(e.words) for e in got] == [w for w, _ in want] or (
        # equal scores may come in either order
        sorted((tuple(e.words), e.score.total) for e in got) == sorted(want)
    )
    assert [e.score.total for e in got] == [s for _, s in want]
    for e in got:  # the parts add up
        assert e.score.total == e.score.ascr + e.score.lm
        assert e.score.n_terms == len(e.words) + 1
    top = lattice_nbest(lat, scorer, n=3)
    assert [e.score.total for e in top] == [s for _, s in want[:3]]


def test_read_sphinx_lattice_and_costs(tmp_path):
    text = """# getcwd: /this/is/bogus
# -logbase 1.000100e+00
#
Frames 30
#
Nodes 4 (NODEID WORD STARTFRAME FIRST-ENDFRAME LAST-ENDFRAME)
0 </s> 25 29 29 ; 0
1 <sil> 12 24 24 ; 0
2 read(2) 5 11 11 ; 0
3 <s> 0 4 4 ; 0
#
Initial 3
Final 0
#
BestSegAscr 0 (NODEID ENDFRAME ASCORE)
#
Edges (FROM-NODEID TO-NODEID ASCORE)
3 2 -102400
2 1 -819200
2 0 -1024000
1 0 -1024
End
"""
    p = tmp_path / "lat.txt"
    p.write_text(text)
    lat = read_sphinx_lattice(p)
    assert (lat.start, lat.end) == (3, 0)
    assert lat.exits[3] == [(2, -100)] and lat.exits[2] == [(1, -800), (0, -1000)] and lat.exits[1] == [(0, -1)]
    scorer = FakeScorer(0)
    got = lattice_nbest(lat, scorer, n=5)
    assert [e.words for e in got] == [["read"]]
    # the path through <sil> (-800 with its penalty, then -1) beats the direct link (-1000)
    assert got[0].score.ascr == -100 - 801 and got[0].score.fillpen == FakeScorer.silpen
    ac, withlm, nolm = costs(got[0].score, DecoderSettings())
    assert ac > 0 and withlm > nolm > 0


def test_normalize_decoder_words():
    assert normalize_decoder_words(["a.m.", "able-bodied", "m.", "don't"]) == ["a", "m", "able", "bodied", "m", "don't"]


# ------------------------------------------------------------------ words.txt: the recognizer's words

# A tiny pronunciation dictionary in PocketSphinx's format: comments, an alternative
# pronunciation, words that normalize to several (a.m., able-bodied), a filler and a line
# without a pronunciation.
TINY_DICT = """## a comment
;; another
read R IY D
read(2) R EH D
a.m. EY EH M
able-bodied EY B AH L B AA D IY D
<sil> SIL
lonely
zebra Z IY B R AH
'em AH M
"""


@pytest.fixture
def tiny_dict(tmp_path):
    p = tmp_path / "tiny.dict"
    p.write_text(TINY_DICT)
    return p


def test_dictionary_words_fold_alternatives_and_normalize(tiny_dict, tmp_path):
    from rescore.asr.pocketsphinx_nbest import dictionary_words
    from rescore.errors import RescoreError

    assert dictionary_words(tiny_dict, ["<sil>"]) == {"read", "a", "m", "able", "bodied", "zebra", "'em"}
    # the LM's words only (PocketSphinx's search leaves the others out)
    assert dictionary_words(tiny_dict, ["<sil>"], known=lambda w: w in ("read", "a.m.")) == {"read", "a", "m"}
    (tmp_path / "empty.dict").write_text(";; nothing\nlonely\n")
    with pytest.raises(RescoreError, match="empty.dict: expected a pronunciation dictionary"):
        dictionary_words(tmp_path / "empty.dict")
    (tmp_path / "latin1.dict").write_bytes(b"read R IY D\ncaf\xe9 K AE F EY\n")
    with pytest.raises(RescoreError, match="latin1.dict:2"):
        dictionary_words(tmp_path / "latin1.dict")


def _results():
    from rescore.asr.pocketsphinx_nbest import UttResult

    hyps = {"u1": [["read", "zebra"], ["reed", "zebra"]], "u2": [["a", "m"]]}
    return [UttResult(u, [(h, 10.0 + k, 2.0, 1.0) for k, h in enumerate(hs)], hs[0], hs[0], hs[0])
            for u, hs in hyps.items()]


def test_words_txt_holds_the_dictionary_and_the_references(tiny_dict, tmp_path):
    """words.txt: <eps> 0, the words of the dictionary, the hypotheses and the references sorted,
    then <s> </s> #0; the words archive's ids are those of this words.txt (the strict reader
    checks every line against words_text), and rescore-nbest's lexicon (--oov-penalty auto)
    is every word of it."""
    from rescore.asr.pocketsphinx_nbest import dictionary_words, symbol_table, write_nbest_dir
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.nbest import NbestJob

    lexicon = dictionary_words(tiny_dict, ["<sil>"])
    refs = {"u1": "read the zebra", "u2": "a m <unk>"}
    out = tmp_path / "nb"
    write_nbest_dir(_results(), out, DecoderSettings(), [w for r in refs.values() for w in r.split()], lexicon)
    rows = [ln.split() for ln in (out / "words.txt").read_text().splitlines()]
    assert [int(i) for _, i in rows] == list(range(len(rows)))
    words = [w for w, _ in rows]
    middle = sorted(lexicon | {"reed", "the", "<unk>"})
    assert words == ["<eps>"] + middle + ["<s>", "</s>", "#0"]
    assert words == symbol_table(lexicon, ["reed"], refs["u1"].split(), refs["u2"].split())
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "text").write_text("".join(f"{u} {r}\n" for u, r in refs.items()))
    (out / "words_text").unlink()  # the words through words.txt alone
    nbest = load_nbest_dir(out, tmp_path / "data")
    assert [h.words for u in nbest.utterances() for h in u.hyps] == [["read", "zebra"], ["reed", "zebra"], ["a", "m"]]
    assert set(NbestJob(nbest_dir=str(out), out_dir=str(tmp_path / "o")).lexicon()) == set(middle) - {"<unk>"}


def test_words_txt_without_a_lexicon_is_as_before(tmp_path):
    """Without the dictionary the symbols are those of the hypotheses and the extra words, in
    the same order as ever: ids of an existing words.txt keep their meaning."""
    from rescore.asr.pocketsphinx_nbest import write_nbest_dir

    write_nbest_dir(_results(), tmp_path / "nb", DecoderSettings(), ["the", "<eps>", ""])
    assert (tmp_path / "nb" / "words.txt").read_text() == "".join(
        f"{w} {i}\n" for i, w in enumerate(["<eps>", "a", "m", "read", "reed", "the", "zebra", "<s>", "</s>", "#0"]))
    assert (tmp_path / "nb" / "words").read_text() == "u1-1 3 6\nu1-2 4 6\nu2-1 1 2\n"


def test_make_nbest_reports_a_bad_dictionary_or_lm_before_decoding(tmp_path):
    import wave

    pytest.importorskip("pocketsphinx", reason="PocketSphinx missing: pip install -e '.[mini]'")
    data = tmp_path / "data"
    data.mkdir()
    with wave.open(str(data / "a.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\0\0" * 8000)
    (data / "wav.scp").write_text(f"a {data / 'a.wav'}\n")
    (tmp_path / "latin1.dict").write_bytes(b"read R IY D\ncaf\xe9 K AE F EY\n")
    (tmp_path / "bad.lm").write_text("not a language model\n")
    for opts, where in ((["--dict", str(tmp_path / "latin1.dict")], "latin1.dict:2"),
                        (["--lm", str(tmp_path / "bad.lm")], "bad.lm: expected an n-gram LM")):
        r = subprocess.run([sys.executable, "-m", "rescore.cli.make_nbest", str(data), str(tmp_path / "nb"), *opts],
                           cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 1 and where in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "nb" / "words.txt").exists()


# ------------------------------------------------------------------ real PocketSphinx decodes

def _need_tools():
    pytest.importorskip("pocketsphinx", reason="PocketSphinx missing: pip install -e '.[mini]'")
    if shutil.which("flite") is None:
        pytest.skip("flite missing: apt-get install -y flite")


SENTENCES = """in the beginning god created the heavens and the earth
the earth was formless and empty

he makes me lie down in green pastures
he leads me beside still waters

the voice of one crying in the wilderness
"""


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    _need_tools()
    d = tmp_path_factory.mktemp("asr")
    (d / "text.txt").write_text(SENTENCES)
    def run(*a):
        return subprocess.run([sys.executable, "-m", *a], cwd=REPO, check=True, capture_output=True, text=True)
    run("rescore.cli.tts_data", str(d / "text.txt"), str(d / "data"))
    r = run("rescore.cli.make_nbest", str(d / "data"), str(d / "nbest"), "--nj", "2", "--nbest", "100")
    return d, r.stdout


def test_decoded_nbest_passes_the_strict_reader_and_ranks_like_pocketsphinx(decoded):
    from rescore.nbest.sets import load_nbest_dir

    d, out = decoded
    nbest = load_nbest_dir(d / "nbest", d / "data")
    utts = [u for c in nbest.conversations for u in c.utterances]
    assert len(utts) == 5 and len(nbest.conversations) == 3  # one conversation per document
    ps_1best = {}
    for line in (d / "nbest" / "ps_1best.txt").read_text().splitlines():
        f = line.split()
        ps_1best[f[0]] = f[1:]
    inv_acwt = DecoderSettings().bestpathlw
    for u in utts:
        assert 1 <= len(u.hyps) <= 100
        assert len({tuple(h.words) for h in u.hyps}) == len(u.hyps)  # distinct word sequences
        cost = [h.ac / inv_acwt + h.withlm for h in u.hyps]
        # Keys come in PocketSphinx score order (equal integer scores may differ by the 1e-4
        # rounding of the archives; one score unit is 1024 ln(1.0001) / 9.5 = 0.0108).
        assert all(a <= b + 1e-3 for a, b in zip(cost, cost[1:]))
        assert cost[0] < min(cost[1:], default=1e9) + 1e-3
        assert u.hyps[0].words == ps_1best[u.id], u.id  # the decoder's own 1-best comes first
        for h in u.hyps:
            assert h.ac > 0 and h.withlm > h.nolm > 0
    assert "rank 1 equals PocketSphinx's 1-best for 5" in out


def test_decoded_words_txt_is_the_recognizers_words(decoded):
    """words.txt of a real decode: what PocketSphinx can say (cmudict's words that en-us.lm.bin
    knows) and the references' words; every hypothesis word is among the recognizer's."""
    from rescore.asr.pocketsphinx_nbest import default_model_paths, dictionary_words, recognizer_words, symbol_table

    d, _ = decoded
    lexicon = recognizer_words(DecoderSettings())
    in_dict = dictionary_words(default_model_paths()["dict"])
    refs = [w for ln in (d / "data" / "text").read_text().splitlines() for w in ln.split()[1:]]
    words = [ln.split()[0] for ln in (d / "nbest" / "words.txt").read_text().splitlines()]
    assert words == symbol_table(lexicon, refs)
    assert "heavens" in lexicon and 50_000 < len(lexicon) < len(in_dict)  # the LM's words only
    hyp_words = {w for ln in (d / "nbest" / "words_text").read_text().splitlines() for w in ln.split()[1:]}
    assert hyp_words and hyp_words <= lexicon


def test_first_pass_wer_is_reproduced_by_rescore_nbest(decoded, tmp_path):
    d, _ = decoded
    subprocess.run(
        [sys.executable, "-m", "rescore.cli.nbest", str(d / "nbest"), str(tmp_path / "out"), "--data-dir",
         str(d / "data"), "--inv-acwt", "9.5", "--wip", "0", "--weight", "0"],
        cwd=REPO, check=True, capture_output=True, text=True)
    import json

    report = json.loads((tmp_path / "out" / "report.json").read_text())
    hyp = {ln.split()[0]: ln.split()[1:] for ln in (tmp_path / "out" / "text").read_text().splitlines()}
    ps = {ln.split()[0]: ln.split()[1:] for ln in (d / "nbest" / "ps_1best.txt").read_text().splitlines()}
    for utt in ps:  # equal, or an exact tie (equal integer scores, costs 1e-4 apart by rounding)
        if hyp[utt] != ps[utt]:
            c = {tuple(w): cost for w, cost in _costs(d / "nbest", utt)}
            assert abs(c[tuple(hyp[utt])] - c[tuple(ps[utt])]) < 3e-4, utt
    assert report["num_utts"] == 5 and report["oracle_wer"] <= report["wer"]


def _costs(nbest_dir: Path, utt: str):
    """(words, acwt / 9.5 + lmwt.withlm) of one utterance's entries, from the text archives."""
    def read(name):
        return {ln.split()[0]: ln.split()[1:] for ln in (nbest_dir / name).read_text().splitlines()}
    words, ac, lm = read("words_text"), read("acwt"), read("lmwt.withlm")
    keys = [k for k in words if k.rsplit("-", 1)[0] == utt]
    return [(words[k], float(ac[k][0]) / 9.5 + float(lm[k][0])) for k in keys]


def test_make_nbest_reports_bad_input(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wav.scp").write_text("reco1 /no/such/file.wav\n")
    pytest.importorskip("pocketsphinx", reason="PocketSphinx missing: pip install -e '.[mini]'")
    r = subprocess.run([sys.executable, "-m", "rescore.cli.make_nbest", str(tmp_path / "data"), str(tmp_path / "nb"),
                        "--nj", "2"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1
    assert "error: /no/such/file.wav" in r.stderr.lower() and "expected a readable WAV file" in r.stderr


# ------------------------------------------------------------------ text to speech

def test_read_documents_by_blank_lines_and_by_docids(tmp_path):
    from rescore.asr.tts import read_documents
    from rescore.errors import RescoreError

    (tmp_path / "t.txt").write_text("a b\nc d\n\ne f\n\n\ng h\n")
    docs = read_documents(tmp_path / "t.txt")
    assert [(d.doc_id, d.sentences) for d in docs] == [
        ("0000", [["a", "b"], ["c", "d"]]), ("0001", [["e", "f"]]), ("0002", [["g", "h"]])]
    (tmp_path / "u.txt").write_text("a b\nc d\ne f\n")
    (tmp_path / "u.docids").write_text("x\nx\ny\n")
    docs = read_documents(tmp_path / "u.txt", tmp_path / "u.docids")
    assert [(d.doc_id, len(d.sentences)) for d in docs] == [("x", 2), ("y", 1)]
    (tmp_path / "v.docids").write_text("x\n")
    with pytest.raises(RescoreError, match="v.docids: expected 3 document ids"):
        read_documents(tmp_path / "u.txt", tmp_path / "v.docids")


def test_tts_data_dir_is_a_kaldi_data_dir(decoded):
    import wave

    d, _ = decoded
    data = d / "data"
    def read(n):
        return [ln.split() for ln in (data / n).read_text().splitlines()]
    wavs = {r: p for r, p in read("wav.scp")}
    segs = read("segments")
    assert len(wavs) == 3 and len(segs) == 5
    assert [s[0] for s in segs] == sorted(s[0] for s in segs)
    spk = dict(read("utt2spk"))
    assert {u: s for s, *us in read("spk2utt") for u in us} == spk
    assert len({s.rsplit("-", 1)[1] for s in spk.values()}) == 3  # a different voice per document
    text = {r[0]: r[1:] for r in read("text")}
    assert text[segs[0][0]] == SENTENCES.splitlines()[0].split()
    for reco, path in wavs.items():
        with wave.open(path) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            dur = w.getnframes() / 16000
        ends = [(float(s[2]), float(s[3])) for s in segs if s[1] == reco]
        assert all(0 < a < b <= dur for a, b in ends)
        assert all(b1 < a2 for (_, b1), (a2, _) in zip(ends, ends[1:]))  # in order, no overlap


def test_piped_wav_scp_and_one_job_give_the_same_nbest(decoded, tmp_path):
    """wav.scp commands ending in '|' (Kaldi's convention) read the same audio; one process
    decoding everything in turn gives byte-identical archives to two processes (each
    utterance starts from a fresh front end, so results do not depend on the schedule)."""
    d, _ = decoded
    data = tmp_path / "data"
    shutil.copytree(d / "data", data)
    rows = [ln.split(None, 1) for ln in (data / "wav.scp").read_text().splitlines()]
    (data / "wav.scp").write_text("".join(f"{r} cat {p.strip()} |\n" for r, p in rows))
    subprocess.run([sys.executable, "-m", "rescore.cli.make_nbest", str(data), str(tmp_path / "nb"), "--nj", "1"],
                   cwd=REPO, check=True, capture_output=True)
    for name in ("words_text", "words", "acwt", "lmwt.withlm", "lmwt.nolm", "words.txt"):
        assert (tmp_path / "nb" / name).read_bytes() == (d / "nbest" / name).read_bytes(), name
