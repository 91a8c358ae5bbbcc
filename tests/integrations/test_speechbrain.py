"""The engine as a SpeechBrain rescorer (rescore.integrations.speechbrain) inside SpeechBrain 1.1.2's own
RescorerBuilder (tests/speechbrain_searcher.py): the builder calls it and ranks by the beam
search's score plus its weight times our LM's log-probability, which equals the engine's costs
computed directly; the first-pass carry runs across calls as one stream; the weight key is one
the builder takes. The top-k comes from SpeechBrain's real beam search."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from rescore.errors import OptionError, RescoreError
from rescore.integrations.speechbrain import (EngineRescorer, HuggingFaceLMRescorer, RNNLMRescorer,
                                              TransformerLMRescorer, load_rescorer)
from tests.speechbrain_searcher import decode, encoder_states, import_speechbrain, searcher, tiny_lm

torch = pytest.importorskip("torch")

HYPS = [["the cat sat on a mat", "the cat sat on the mat", "a cat sat on a mat"],
        ["the dog ran", "the dog", "a dog ran on the mat", "dog ran"],
        ["the cat", "the mat"]]
SCORES = [[-1.0, -1.1, -1.3], [-0.4, -0.9, -1.0, -1.6], [-2.0, -2.05]]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("lm") / "lm.pt")


def _engine(path, hyps, carry):
    """Each hypothesis' LM log-probability from rescore.engine directly: the utterances as one
    conversation (carry first-pass) or each its own (none)."""
    from rescore.engine.score import UttInput, score_nbest
    from rescore.models import load_checkpoint
    from rescore.settings import EngineSettings

    utts = [UttInput([h.split() for h in u], [0.0] * len(u)) for u in hyps]
    convs = [utts] if carry == "first-pass" else [[u] for u in utts]
    costs = score_nbest(load_checkpoint(path, torch.device("cpu")), convs, weight=1.0, progress=False,
                        settings=EngineSettings(state_carry=carry, device="cpu", oov_penalty=0.0))
    return [[-sum(c) for c in utt] for conv in costs for utt in conv]


@pytest.mark.parametrize("carry", ["none", "first-pass"])
def test_in_speechbrains_rescorer_builder_as_the_engine_directly(lm, carry):
    import_speechbrain()
    from speechbrain.decoders.scorer import RescorerBuilder

    ours = load_rescorer(str(lm), state_carry=carry, device="cpu")
    assert type(ours) is RNNLMRescorer and ours.weight_key == "rnnlm"
    builder = RescorerBuilder(rescorers=[ours], weights={"rnnlm": 0.7})
    got_hyps, got_scores = builder.rescore(HYPS, copy.deepcopy(SCORES))  # (it adds into the lists given)
    lm_scores = _engine(lm, HYPS, carry)
    for hyps, first, lmu, gh, gs in zip(HYPS, SCORES, lm_scores, got_hyps, got_scores):
        want = sorted(zip(hyps, [f + 0.7 * x for f, x in zip(first, lmu)]), key=lambda p: -p[1])
        assert gh == [h for h, _ in want]
        assert gs == pytest.approx([s for _, s in want], abs=1e-5)
    if carry == "none":  # each utterance on its own: as scored alone
        alone = load_rescorer(str(lm), device="cpu")
        assert alone.rescore_hyps(HYPS[1:2]).tolist() == pytest.approx(lm_scores[1], abs=1e-5)


def test_the_first_pass_carry_is_a_stream_across_calls_until_reset(lm):
    ours = load_rescorer(str(lm), state_carry="first-pass", device="cpu")
    whole = _engine(lm, HYPS, "first-pass")
    part1 = ours.rescore_hyps(HYPS[:2]).tolist()
    part2 = ours.rescore_hyps(HYPS[2:]).tolist()
    assert part1 + part2 == pytest.approx([x for u in whole for x in u], abs=1e-5)
    assert ours.history == [h[0].split() for h in HYPS]
    ours.reset()
    assert ours.rescore_hyps(HYPS[2:]).tolist() == pytest.approx(_engine(lm, HYPS[2:], "none")[0], abs=1e-5)
    # carried: the third utterance's scores differ from its scores alone
    assert part2 != pytest.approx(_engine(lm, HYPS[2:], "none")[0], abs=1e-5)


def test_prefix_sharing_gives_the_reference_engines_scores(lm):
    from rescore.settings import EngineSettings

    fast = load_rescorer(str(lm), state_carry="first-pass", device="cpu").rescore_hyps(HYPS).tolist()
    naive = load_rescorer(str(lm), state_carry="first-pass", device="cpu",
                          settings=EngineSettings(engine="naive")).rescore_hyps(HYPS).tolist()
    assert fast == pytest.approx(naive, abs=1e-4)


def test_speechbrains_top_k_rescored_by_the_builder_as_by_rescore_nbest(tmp_path, lm):
    """SpeechBrain's beam search -> its RescorerBuilder with our rescorer, and the same top-k ->
    write_topk -> rescore-nbest: the same ranking and scores (SpeechBrain's = -total)."""
    import_speechbrain()
    from speechbrain.decoders.scorer import RescorerBuilder

    from rescore.cli.nbest import main as rescore_nbest
    from rescore.formats.speechbrain import read_topk, write_topk

    out = searcher(beam_size=4, topk=4)(*encoder_states(3, seed=5))
    ids = ["s1", "s2", "s3"]
    table = write_topk(tmp_path / "nbest.tsv", ids, out, decode)
    texts = [[" ".join(h.words) for h in u.hyps] for u in table.utterances]
    first = [[-h.scores[0] for h in u.hyps] for u in table.utterances]
    builder = RescorerBuilder(rescorers=[load_rescorer(str(lm), device="cpu")], weights={"rnnlm": 0.5})
    got_hyps, got_scores = builder.rescore(texts, first)
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "nbest.tsv"), str(tmp_path / "o"), "--model", str(lm),
                                           "--device", "cpu", "--weight", "0.5", "--state-carry", "none"])
    assert r.exit_code == 0, r.output
    back_ids, cands, scores = read_topk(tmp_path / "o" / "scores.tsv")
    assert back_ids == ids
    for gh, gs, c, s in zip(got_hyps, got_scores, cands, scores):
        assert gs == pytest.approx(s, abs=1e-4)
        assert gh[0] == c[0] or gs[0] == pytest.approx(gs[1], abs=1e-4)  # (a tie may fall either way)


def test_beside_speechbrains_own_rnnlm_rescorer(lm):
    """Ours under the key transformerlm beside SpeechBrain's RNNLMRescorer (its RNNLM, random
    weights, a word tokenizer): the builder sums the two, each times its weight."""
    import_speechbrain()
    from speechbrain.decoders.scorer import RescorerBuilder, RNNLMRescorer
    from speechbrain.lobes.models.RNNLM import RNNLM

    from tests.speechbrain_searcher import WORDS

    class Tokenizer:  # SentencePiece's encode_as_ids, of SpeechBrain's upper-cased text
        def encode_as_ids(self, text):
            return [WORDS.index(w.lower()) + 1 for w in text.split()]

    torch.manual_seed(0)
    theirs = RNNLMRescorer(RNNLM(output_neurons=len(WORDS) + 1, embedding_dim=8, rnn_layers=1, rnn_neurons=8,
                                 dnn_blocks=1, dnn_neurons=8, dropout=0.0, return_hidden=True),
                           Tokenizer(), device="cpu", bos_index=0, eos_index=0, pad_index=0)
    ours = load_rescorer(str(lm), weight_key="transformerlm", device="cpu")
    assert type(ours) is TransformerLMRescorer
    builder = RescorerBuilder(rescorers=[theirs, ours], weights={"rnnlm": 0.4, "transformerlm": 0.6})
    got_hyps, got_scores = builder.rescore(HYPS, copy.deepcopy(SCORES))
    a, b = theirs.rescore_hyps(HYPS).tolist(), _engine(lm, HYPS, "none")
    flat = [s for u in SCORES for s in u]
    want = [f + 0.4 * x + 0.6 * y for f, x, y in zip(flat, a, [y for u in b for y in u])]
    i = 0
    for hyps, gh, gs in zip(HYPS, got_hyps, got_scores):
        ranked = sorted(zip(hyps, want[i:i + len(hyps)]), key=lambda p: -p[1])
        i += len(hyps)
        assert gs == pytest.approx([s for _, s in ranked], abs=1e-4) and gh == [h for h, _ in ranked]


def test_a_transformer_and_an_hf_model_get_their_keys(tmp_path, tiny_gpt2):
    import_speechbrain()
    from speechbrain.decoders.scorer import RescorerBuilder

    tr = load_rescorer(str(tiny_lm(tmp_path / "tr.pt", arch="transformer")), device="cpu")
    hf = load_rescorer(f"hf:{tiny_gpt2}", device="cpu", state_carry="first-pass")
    assert (type(tr), tr.weight_key) == (TransformerLMRescorer, "transformerlm")
    assert (type(hf), hf.weight_key) == (HuggingFaceLMRescorer, "huggingfacelm")
    builder = RescorerBuilder(rescorers=[tr, hf], weights={"transformerlm": 0.3, "huggingfacelm": 0.2})
    got_hyps, got_scores = builder.rescore(HYPS, copy.deepcopy(SCORES))
    a, b = tr.rescore_hyps(HYPS).tolist(), load_rescorer(f"hf:{tiny_gpt2}", device="cpu",
                                                          state_carry="first-pass").rescore_hyps(HYPS).tolist()
    flat = [s for u in SCORES for s in u]
    want = [f + 0.3 * x + 0.2 * y for f, x, y in zip(flat, a, b)]
    i = 0
    for hyps, gh, gs in zip(HYPS, got_hyps, got_scores):
        ranked = sorted(zip(hyps, want[i:i + len(hyps)]), key=lambda p: -p[1])
        i += len(hyps)
        assert gs == pytest.approx([s for _, s in ranked], abs=1e-4) and gh == [h for h, _ in ranked]
    with pytest.raises(ValueError, match="The keys of weights should be named in"):  # why the three names
        RescorerBuilder(rescorers=[EngineRescorer(tr.model, device="cpu")], weights={"engine": 0.5})


def test_to_device_and_normalize(lm):
    ours = load_rescorer(str(lm), device="cpu", normalize=str.lower)
    assert ours.rescore_hyps([["THE CAT"]]).tolist() == pytest.approx(
        load_rescorer(str(lm), device="cpu").rescore_hyps([["the cat"]]).tolist(), abs=1e-6)
    ours.to_device("cpu")
    ours.to_device()
    assert ours.device == torch.device("cpu") and ours.rescore_hyps([]).numel() == 0


def test_bad_options_and_input_are_refused(lm, tmp_path):
    with pytest.raises(OptionError, match="state_carry: expected one of none, first-pass, got 'rescored'"):
        load_rescorer(str(lm), state_carry="rescored", device="cpu")
    with pytest.raises(OptionError, match="weight_key: expected one of rnnlm, transformerlm, huggingfacelm"):
        load_rescorer(str(lm), weight_key="engine", device="cpu")
    with pytest.raises(RescoreError, match="missing.pt"):
        load_rescorer(str(tmp_path / "missing.pt"), device="cpu")
    ours = load_rescorer(str(lm), device="cpu")
    with pytest.raises(ValueError, match="utterance 1 of the batch: a non-empty list of hypothesis texts"):
        ours.rescore_hyps([["the cat"], []])
    with pytest.raises(ValueError, match="utterance 0 of the batch"):
        ours.rescore_hyps(["the cat"])
