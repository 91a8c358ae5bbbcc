import pytest

from rescore.errors import RescoreError
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
    v = Vocabulary.from_words_txt(p, unk="<UNK>")
    assert v.words == ["<eos>", "<unk>", "the", "cat"]
    p.write_text("<eps> 0\nthe\n")
    with pytest.raises(RescoreError, match=r"words.txt:2: expected 'word id'"):
        Vocabulary.from_words_txt(p)


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
