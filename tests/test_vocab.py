import pytest

from rescore.errors import RescoreError
from rescore.io.symbols import read_vocabulary
from rescore.vocab import Vocabulary, read_sentences


def test_from_text_most_frequent(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("<s> b a b </s>\nc b a\n\nd <unk>\n")
    assert read_sentences(p) == [["b", "a", "b"], ["c", "b", "a"], ["d", "<unk>"]]
    v = Vocabulary.from_text(p, max_size=4)
    assert v.words == ["<eos>", "<unk>", "b", "a"]
    assert (v.eos_id, v.unk_id, len(v)) == (0, 1, 4)
    full = Vocabulary.from_text(p)
    assert full.words == ["<eos>", "<unk>", "b", "a", "c", "d"]  # ties alphabetical


def test_encode_identities():
    v = Vocabulary(["<eos>", "<unk>", "a", "b"])
    assert v.encode(["a", "x", "<unk>", "y", "x", "b"]) == ([2, 1, 1, 1, 1, 3], [2, 4, 1, 5, 4, 3])
    assert v.encode(["y", "z"]) == ([1, 1], [5, 6])  # same object: same identities


def test_from_words_txt(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("<eps> 0\n<UNK> 1\nthe 2\ncat 3\n#0 4\n<s> 5\n</s> 6\n")
    v = read_vocabulary(p, unk="<UNK>")
    assert v.words == ["<eos>", "<unk>", "the", "cat"]
    p.write_text("<eps> 0\nthe\n")
    with pytest.raises(RescoreError, match=r"words.txt:2: expected 'word id'"):
        read_vocabulary(p)


def test_missing_file(tmp_path):
    with pytest.raises(RescoreError, match="missing"):
        Vocabulary.from_text(tmp_path / "missing.txt")


def test_read_sentences_takes_a_gzipped_text(tmp_path):
    """A gzipped training text (Kaldi recipes keep train.txt.gz) reads as the plain one; a
    truncated one is an error that names the file."""
    import gzip

    from rescore.errors import RescoreError
    from rescore.vocab import read_sentences

    plain = tmp_path / "t.txt"
    plain.write_text("<s> a b </s>\n\nc d e\n")
    gz = tmp_path / "t.txt.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_sentences(gz) == read_sentences(plain) == [["a", "b"], ["c", "d", "e"]]
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gz.read_bytes()[:-6])
    with pytest.raises(RescoreError, match="bad.gz"):
        read_sentences(bad)


def test_read_sentences_names_the_first_line_that_is_not_utf8(tmp_path):
    """The text is decoded whole; a fault is still named by its line and column."""
    p = tmp_path / "train.txt"
    p.write_bytes("a b\nc d\nééé\nx y\xff z\nq\xfe\n".encode("latin-1").replace(b"\xe9", "é".encode()))
    with pytest.raises(RescoreError, match=r"train\.txt:4: expected UTF-8 text, got 'byte 0xff at column 4'"):
        read_sentences(p)


def test_vocabulary_names_a_repeated_word():
    with pytest.raises(RescoreError, match="distinct vocabulary words, got 'b'"):
        Vocabulary(["<eos>", "<unk>", "a", "b", "c", "b", "a"])


def test_count_words_counts_in_order_of_first_sight():
    from rescore.vocab import count_words

    c = count_words([["b", "a"], [], ["c", "a", "b", "b"]])
    assert list(c.items()) == [("b", 3), ("a", 2), ("c", 1)]
