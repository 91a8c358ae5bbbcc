"""ESPnet decode dirs as asr_inference.py writes them (tests/formats/ecosystem_writers.py): sentencepiece's
own rules for BPE tokens, the too-short placeholder, the per-scorer patch on a too-short utterance,
and a multi-speaker result written back as the files asr.sh's multi-speaker scoring reads."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from tests.formats import ecosystem_writers as ew
from tests.formats.test_ecosystems import FIX
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.formats.espnet import espnet_tokens2text, read_espnet


@pytest.mark.parametrize("tokens, text", [
    (["\u2581the", "<unk>", "\u2581cat"], "the \u2047  cat"),  # <unk> its own word, as DecodePieces writes it
    (["\u2581the", "c", "<unk>", "t"], "thec \u2047 t"),
    (["<unk>", "\u2581cat"], " \u2047  cat"),  # at the start: the next piece keeps its space
    (["<s>", "\u2581a", "\u2581b", "</s>"], "a b"),  # control symbols are invisible
    (["\u2581", "\u2581a"], "a"),  # leading '▁'s are consumed while the text is empty (remove_extra_whitespaces)
    (["<space>"], ""),  # ESPnet's too-short placeholder
])
def test_bpe_tokens_join_as_sentencepiece_decodes_them(tokens, text):
    assert espnet_tokens2text(tokens, "bpe") == text


def test_the_too_short_placeholder_is_an_empty_hypothesis_for_every_token_type():
    for token_type in ("bpe", "char", "word"):
        assert espnet_tokens2text(["<space>"], token_type) == ""
    assert espnet_tokens2text(["a", "<space>", "b"], "char") == "a b"  # (the char tokenizer's own space)


def _decode(tmp_path, with_text: bool, per_scorer: bool):
    """A decode with per-scorer scores (the documented patch), one utterance too short to decode."""
    def hyp(words, x, scores):
        text, token, token_int, _ = ew.espnet_result(words, torch.tensor(x), "bpe", with_text)
        return (text, token, token_int, ew.Hyp(torch.tensor(x), scores))

    job = {"utt-a": [hyp("THE CAT", -3.0, {"decoder": -2.0, "ctc": -4.0}),
                     hyp("THE CAP", -3.5, {"decoder": -2.5, "ctc": -4.5})],
           "utt-b": ew.espnet_too_short(2),
           "utt-c": [hyp("HELLO", -1.0, {"decoder": -0.5, "ctc": -1.5}),
                     hyp("HALLO", -2.0, {"decoder": -1.5, "ctc": -2.5})]}
    d = tmp_path / ("text" if with_text else "token") / "test"
    ew.espnet_decode(d, [job], nbest=2, per_scorer=per_scorer)
    return d


@pytest.mark.parametrize("with_text", [True, False])
def test_a_too_short_utterance_reads_as_empty_with_or_without_per_scorer_files(tmp_path, with_text):
    d = _decode(tmp_path, with_text, per_scorer=True)
    assert not any("utt-b" in line for line in (d / "logdir/output.1/1best_recog/score_ctc").read_text().splitlines())
    t = read_espnet(d, tokens=None if with_text else "bpe")
    assert t.columns == ("pass1", "ctc", "decoder")
    b = next(u for u in t.utterances if u.id == "utt-b")
    assert [h.words for h in b.hyps] == [[], []] and b.hyps[0].scores == (-0.0, 0.0, 0.0)
    a = next(u for u in t.utterances if u.id == "utt-a")
    assert a.hyps[0].words == ["THE", "CAT"] and a.hyps[0].scores == (3.0, 4.0, 2.0)
    r = CliRunner().invoke(rescore_nbest, [str(d), str(tmp_path / "o"), "--format", "espnet"]
                           + ([] if with_text else ["--espnet-tokens", "bpe"]))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "text").read_text().splitlines() == ["utt-a THE CAT", "utt-b", "utt-c HELLO"]


def test_a_missing_per_scorer_score_of_a_decoded_utterance_is_still_refused(tmp_path):
    d = _decode(tmp_path, True, per_scorer=True)
    f = d / "logdir/output.1/1best_recog/score_ctc"
    f.write_text("".join(x for x in f.read_text().splitlines(True) if not x.startswith("utt-c")))
    with pytest.raises(Exception, match="expected a score for 'utt-c'"):
        read_espnet(d)


def test_multi_speaker_written_back_as_text_spk_files(tmp_path):
    multi = FIX / "espnet" / "decode_multi_nbest2" / "test"
    for k in (1, 2):
        out = tmp_path / f"spk{k}"
        r = CliRunner().invoke(rescore_nbest, [str(multi), str(out), "--format", "espnet", "--speaker", str(k),
                                               "--write-format", "espnet"])
        assert r.exit_code == 0, r.output
        text = (out / "text").read_text()
        assert (out / f"text_spk{k}").read_text() == text == (out / "1best_recog" / f"text_spk{k}").read_text()
        assert (out / f"score_spk{k}").is_file() and not (out / "score").exists()
        # asr.sh's multi-speaker scoring reads <dir>/text_spk<k>; read back as speaker k's 1-best
        assert read_espnet(out, speaker=k).utterances[0].hyps[0].words == text.splitlines()[0].split()[1:]
    r = CliRunner().invoke(convert, [str(multi), str(tmp_path / "c"), "--from", "espnet", "--speaker", "2",
                                     "--to", "espnet"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c" / "text_spk2").read_text() == (tmp_path / "spk2" / "text").read_text()
    # the enhancement decode (<n>best_recog_spk<k>/ folders) writes the same names
    enh = FIX / "espnet" / "decode_enh_nbest2" / "test"
    r = CliRunner().invoke(convert, [str(enh), str(tmp_path / "e"), "--from", "espnet", "--speaker", "1",
                                     "--to", "espnet"])
    assert r.exit_code == 0 and (tmp_path / "e" / "1best_recog" / "text_spk1").is_file(), r.output
