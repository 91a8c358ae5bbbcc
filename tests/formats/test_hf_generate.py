"""A Hugging Face seq2seq model's beams (rescore.formats.hf_generate): a tiny Whisper built from its config
(random weights, no download) and a byte-level BPE tokenizer trained here, through transformers'
own beam search, written as a TSV file and rescored."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.formats.test_ecosystems import tiny_lm  # noqa: F401 (a fixture)
from rescore.cli.nbest import main as rescore_nbest
from rescore.formats.hf_generate import generate_table, write_nbest
from rescore.formats.tsv import read_nbest_table

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

WORDS = ["the", "cat", "sat", "who", "is", "it", "he", "was", "colour"]
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """(model, tokenizer): a WhisperForConditionalGeneration of tiny dimensions whose decoder may
    say only WORDS (every other token suppressed, as Whisper's config suppresses tokens), and a
    WhisperTokenizer over a byte-level BPE vocabulary trained on them."""
    d = tmp_path_factory.mktemp("whisper")
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([" " + " ".join(WORDS)] * 20 + [" Colour"] * 5, vocab_size=400, min_frequency=1,
                            show_progress=False)
    bpe.save_model(str(d))
    tok = transformers.WhisperTokenizer(str(d / "vocab.json"), str(d / "merges.txt"), unk_token=SPECIALS[0],
                                        bos_token=SPECIALS[0], eos_token=SPECIALS[0])
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    ids = tok.convert_tokens_to_ids(SPECIALS)
    allowed = set(tok.convert_tokens_to_ids(["\u0120" + w for w in WORDS])) | {ids[0]}
    assert len(allowed) == len(WORDS) + 1 and tok.unk_token_id not in allowed - {ids[0]}
    config = transformers.WhisperConfig(
        vocab_size=len(tok), num_mel_bins=8, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_source_positions=16, max_target_positions=32, pad_token_id=ids[0], bos_token_id=ids[0],
        eos_token_id=ids[0], decoder_start_token_id=ids[1], init_std=0.5,
        suppress_tokens=[i for i in range(len(tok)) if i not in allowed], begin_suppress_tokens=[ids[0]])
    torch.manual_seed(0)
    return transformers.WhisperForConditionalGeneration(config).eval(), tok


def _features(n):
    torch.manual_seed(1)
    return torch.randn(n, 8, 32)  # (batch, mel bins, frames): 2 x max_source_positions frames


def test_whisper_beams_written_best_first_and_rescored(whisper, tmp_path, tiny_lm):  # noqa: F811
    model, tok = whisper
    with torch.no_grad():
        out = transformers.GenerationMixin.generate(model, _features(3), num_beams=4, num_return_sequences=4,
                                                    output_scores=True, return_dict_in_generate=True,
                                                    max_new_tokens=5)
    assert out.sequences.shape[0] == 12
    table = write_nbest(tmp_path / "nbest.tsv", ["u1", "u2", "u3"], out, tok)
    back = read_nbest_table(tmp_path / "nbest.tsv")
    assert [u.id for u in back.utterances] == ["u1", "u2", "u3"] and back.columns == ("pass1",)
    texts = tok.batch_decode(out.sequences, skip_special_tokens=True)
    scores = out.sequences_scores.tolist()
    for i, u in enumerate(back.utterances):
        assert [h.words for h in u.hyps] == [t.split() for t in texts[4 * i:4 * i + 4]]
        assert [h.scores[0] for h in u.hyps] == [-x for x in scores[4 * i:4 * i + 4]]  # pass1 = -score, as read
        assert [h.scores[0] for h in u.hyps] == sorted(h.scores[0] for h in u.hyps)  # best first
        assert len({tuple(h.words) for h in u.hyps}) > 1  # real beams, not copies
        assert all(set(h.words) <= set(WORDS) for h in u.hyps)
    assert table.num_hyps == 12
    # rescored as any TSV file, with an NN LM: the 1-best by pass1 + w * nn + wip * |h|
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "nbest.tsv"), str(tmp_path / "o"), "--model",
                                           str(tiny_lm), "--device", "cpu", "--weight", "0.5", "--wip", "0.5"])
    assert r.exit_code == 0, r.output
    scored = read_nbest_table(tmp_path / "o" / "scores.tsv")
    for u in scored.utterances:
        for h in u.hyps:
            pass1, nn, total = h.scores
            assert total == pytest.approx(pass1 + 0.5 * nn + 0.5 * len(h.words), abs=1e-9) and nn > 0
    best = [min(u.hyps, key=lambda h: (h.scores[2], h.rank)) for u in scored.utterances]
    assert (tmp_path / "o" / "text").read_text().splitlines() == [
        " ".join([u.id, *h.words]) for u, h in zip(scored.utterances, best)]


def test_whispers_own_generate_gives_copies_and_is_refused_saying_what_to_call(whisper):
    model, tok = whisper
    with torch.no_grad():
        out = model.generate(_features(1), num_beams=4, num_return_sequences=4, output_scores=True,
                             return_dict_in_generate=True, max_new_tokens=5)
    if len({tuple(r) for r in out.sequences.tolist()}) > 1:
        pytest.skip("this transformers' WhisperForConditionalGeneration.generate returns real beams")
    with pytest.raises(ValueError, match=r"4 copies of one sequence.*GenerationMixin.generate\(model"):
        generate_table(["u1"], out, tok)


def test_whispers_english_normaliser_when_asked(whisper):
    model, tok = whisper

    class Out:  # generate()'s two fields, of a hand-made sequence
        sequences = [tok("<|startoftranscript|> Colour, Mr. Smith's cats!").input_ids,
                     tok("<|startoftranscript|> the cat").input_ids]
        sequences_scores = torch.tensor([-1.0, -2.0])

    plain = generate_table(["u1"], Out, tok)
    assert [h.words for h in plain.utterances[0].hyps] == [["Colour,", "Mr.", "Smith's", "cats!"], ["the", "cat"]]
    normal = generate_table(["u1"], Out, tok, normalize=True)
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    assert " ".join(normal.utterances[0].hyps[0].words) == EnglishTextNormalizer({})("Colour, Mr. Smith's cats!")
    assert normal.utterances[0].hyps[0].words == ["colour", "mister", "smith", "is", "cats"]
    with pytest.raises(ValueError, match="3 utterance ids for 2 sequences"):
        generate_table(["u1", "u2", "u3"], Out, tok)
