"""SpeechBrain's top-k (rescore.formats.speechbrain): a real S2SRNNBeamSearcher of SpeechBrain 1.1.2
(built here from its modules, random weights, no download; tests/speechbrain_searcher.py) decodes,
its top-k and its 1-best are written as TSV files, rescore-nbest rescores them on the CPU,
and read_topk gives the result back in SpeechBrain's lists. The checks of bad input need no
SpeechBrain."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rescore.cli.nbest import main as rescore_nbest
from rescore.errors import RescoreError
from rescore.formats.tsv import read_nbest_table
from rescore.formats.speechbrain import read_topk, topk_table, write_topk
from tests.speechbrain_searcher import (WORDS, ctc_log_probs, ctc_searcher, decode, encoder_states, import_speechbrain,
                                       searcher, tiny_lm)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("lm") / "lm.pt")


def _undo_padding(hyps, lengths):
    """SpeechBrain's own undo_padding, of each beam (how its 1-best text is cut)."""
    from speechbrain.utils.data_utils import undo_padding

    return [undo_padding(hyps[:, k, :], lengths[:, k]) for k in range(hyps.shape[1])]


def test_topk_written_rescored_and_read_back(tmp_path, lm):
    import_speechbrain()
    s = searcher(beam_size=4, topk=4)
    batches = [s(*encoder_states(2, seed=1)), s(*encoder_states(1, seed=2))]  # two batches, 3 utterances
    ids = ["u1", "u2", "u3"]
    table = write_topk(tmp_path / "nbest.tsv", ids, batches, decode)
    back = read_nbest_table(tmp_path / "nbest.tsv")
    assert back.columns == ("pass1",) and [u.id for u in back.utterances] == ids and table.num_hyps == 12
    per_utt = []
    for hyps, lengths, scores, _ in batches:
        cut = _undo_padding(hyps, lengths)
        per_utt += [[(decode(cut[k][b]).split(), float(scores[b, k])) for k in range(4)] for b in range(len(hyps))]
    for u, want in zip(back.utterances, per_utt):
        assert [h.words for h in u.hyps] == [w for w, _ in want]
        assert [h.scores[0] for h in u.hyps] == [-s for _, s in want]  # pass1 = -score
        assert [h.scores[0] for h in u.hyps] == sorted(h.scores[0] for h in u.hyps)  # best first
    assert any(len({tuple(h.words) for h in u.hyps}) > 1 for u in back.utterances)  # real beams
    assert all(set(h.words) <= set(WORDS) for u in back.utterances for h in u.hyps)

    # rescored as any TSV file, on the CPU
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "nbest.tsv"), str(tmp_path / "o"), "--model", str(lm),
                                           "--device", "cpu", "--weight", "0.5"])
    assert r.exit_code == 0, r.output
    scored = read_nbest_table(tmp_path / "o" / "scores.tsv")
    assert scored.columns == ("pass1", "nn", "total")
    for u in scored.utterances:
        for h in u.hyps:
            pass1, nn, total = h.scores
            assert total == pytest.approx(pass1 + 0.5 * nn, abs=1e-9) and nn > 0

    # back as SpeechBrain's lists: best first by the total, log-probability scores
    got_ids, candidates, scores = read_topk(tmp_path / "o" / "scores.tsv")
    assert got_ids == ids
    for u, cands, sc in zip(scored.utterances, candidates, scores):
        ranked = sorted(u.hyps, key=lambda h: h.scores[2])
        assert cands == [" ".join(h.words) for h in ranked] and sc == [-h.scores[2] for h in ranked]
    one_best = dict(line.split(" ", 1) if " " in line else (line, "")
                    for line in (tmp_path / "o" / "text").read_text().splitlines())
    assert [one_best[i] for i in ids] == [c[0] for c in candidates]
    # and the first pass of the written file, as the searcher gave it
    assert read_topk(tmp_path / "nbest.tsv", column="pass1")[2] == [[s for _, s in w] for w in per_utt]


def test_the_1best_output_is_read_as_a_top_1(tmp_path):
    import_speechbrain()
    enc = encoder_states(3, seed=3)
    hyps, lengths, scores, _ = out = searcher(return_topk=False)(*enc)
    assert isinstance(hyps, list)  # undo_padding's lists of token ids
    table = write_topk(tmp_path / "best.tsv", ["a", "b", "c"], out, decode)
    assert [[h.words for h in u.hyps] for u in table.utterances] == [[decode(h).split()] for h in hyps]
    assert [u.hyps[0].scores[0] for u in table.utterances] == [-float(s) for s in scores]
    # the same as the top-k's first beam
    top = topk_table(["a", "b", "c"], searcher(return_topk=True)(*enc), decode)
    assert [u.hyps[0].words for u in top.utterances] == [u.hyps[0].words for u in table.utterances]


def test_a_ctc_top_k_is_written_as_pyctcdecodes_beams_and_rescored(tmp_path, lm):
    import_speechbrain()
    s = ctc_searcher()
    batches = [s(*ctc_log_probs(2, seed=1)), s(*ctc_log_probs(1, seed=2))]
    table = write_topk(tmp_path / "ctc.tsv", ["c1", "c2", "c3"], batches)
    back = read_nbest_table(tmp_path / "ctc.tsv")
    assert back.columns == ("ac", "lm") and [u.id for u in back.utterances] == ["c1", "c2", "c3"]
    hyps = [u for b in batches for u in b]
    for u, want in zip(back.utterances, hyps):
        ranked = sorted(want, key=lambda h: -h.lm_score)
        assert [h.words for h in u.hyps] == [h.text.split() for h in ranked]
        assert [h.scores[0] for h in u.hyps] == [-h.score for h in ranked]  # ac = -score
        assert [sum(h.scores) for h in u.hyps] == pytest.approx([-h.lm_score for h in ranked], abs=1e-9)
    assert table.num_hyps == sum(len(u) for u in hyps) and all(len(u.hyps) > 1 for u in back.utterances)
    assert all(set(h.words) <= set(WORDS) for u in back.utterances for h in u.hyps)
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "ctc.tsv"), str(tmp_path / "o"), "--model", str(lm),
                                           "--device", "cpu", "--weight", "0.5", "--score-weight", "lm=0"])
    assert r.exit_code == 0, r.output
    for u in read_nbest_table(tmp_path / "o" / "scores.tsv").utterances:
        for h in u.hyps:
            ac, lm_cost, nn, total = h.scores
            assert total == pytest.approx(ac + 0.5 * nn, abs=1e-9)


class _Tokenizer:
    """A SentencePiece-like tokenizer: decode_ids."""

    def decode_ids(self, ids):
        return decode(ids)


def _output(scores, lengths=None):
    """A hand-made top-k output of one utterance of 2 beams of 3 token slots."""
    hyps = torch.tensor([[[1, 2, 0], [1, 3, 4]]])
    lengths = torch.tensor([lengths or [2 / 3, 1.0]])
    return hyps, lengths, torch.tensor([scores]), torch.zeros(1, 2, 3)


def test_a_sentencepiece_tokenizer_decodes_and_lengths_cut_as_speechbrain():
    t = topk_table(["u"], _output([-0.5, -1.0]), _Tokenizer())
    assert [h.words for h in t.utterances[0].hyps] == [["the", "cat"], ["the", "sat", "on"]]


def test_bad_input_is_refused_saying_what_was_expected(tmp_path):
    with pytest.raises(ValueError, match="2 utterance ids for 1 utterances"):
        topk_table(["u", "v"], _output([-0.5, -1.0]), decode)
    with pytest.raises(ValueError, match="utterance id 'u 1': not empty, no whitespace"):
        topk_table(["u 1"], _output([-0.5, -1.0]), decode)
    with pytest.raises(ValueError, match="not finite"):
        topk_table(["u"], _output([-0.5, float("-inf")]), decode)
    with pytest.raises(ValueError, match="an S2SBeamSearcher output"):
        topk_table(["u"], (torch.zeros(1, 2, 3),), decode)
    with pytest.raises(ValueError, match="decode: a SentencePiece tokenizer"):
        topk_table(["u"], _output([-0.5, -1.0]), "not a tokenizer")
    with pytest.raises(ValueError, match="decode: a SentencePiece tokenizer"):
        topk_table(["u"], _output([-0.5, -1.0]))  # token ids need a decode
    assert not (tmp_path / "n.tsv").exists()
    with pytest.raises(ValueError):
        write_topk(tmp_path / "n.tsv", ["u", "v"], _output([-0.5, -1.0]), decode)
    assert not (tmp_path / "n.tsv").exists()  # nothing half-written
    write_topk(tmp_path / "n.tsv", ["u"], _output([-0.5, -1.0]), decode)
    with pytest.raises(RescoreError, match=r"n.tsv:2: expected a score column 'total' \(the input has: pass1\)"):
        read_topk(tmp_path / "n.tsv")
