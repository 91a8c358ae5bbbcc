import torch

from rescore.train.data import encode_corpus, load_streams, make_streams
from rescore.vocab import Vocabulary


def test_encode_corpus_one_eos_per_sentence():
    v = Vocabulary(["<eos>", "<unk>", "a", "b"])
    ids, ident = encode_corpus([["a", "b"], ["x", "a"]], v)
    assert ids.tolist() == [0, 2, 3, 0, 1, 2, 0]
    assert ident.tolist() == [0, 2, 3, 0, 4, 2, 0]


def test_streams_cover_every_target_once_when_padded():
    ids = torch.arange(23)
    s = make_streams(ids, ids + 100, 4, pad=True)
    assert s.ids.shape == (4, 6)
    assert s.target_ids[s.mask].tolist() == list(range(1, 23))  # row-major = text order
    assert s.ids[s.mask].tolist() == list(range(0, 22))
    assert s.target_ident[s.mask].tolist() == list(range(101, 123))
    assert s.n_targets == 22
    chunks = list(s.chunks(4))
    assert [c[0].shape[1] for c in chunks] == [4, 2]
    assert torch.equal(torch.cat([c[2] for c in chunks], 1), s.target_ids)


def test_streams_trimmed_for_training_and_sharded():
    ids = torch.arange(23)
    s = make_streams(ids, ids, 4, pad=False)
    assert s.ids.shape == (4, 5) and bool(s.mask.all())
    assert s.ids[1].tolist() == [5, 6, 7, 8, 9] and s.target_ids[1].tolist() == [6, 7, 8, 9, 10]
    r1 = s.shard(1, 2)
    assert r1.ids[:, 0].tolist() == [5, 15]


def test_load_streams(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("a b\n\nb c a\n")
    v = Vocabulary(["<eos>", "<unk>", "a", "b"])
    s = load_streams(p, v, 2, pad=True)
    assert s.n_targets == 7  # 2 + 1 + 3 + 1: every word and each sentence end
    assert s.target_ids[s.mask].tolist() == [2, 3, 0, 3, 1, 2, 0]
