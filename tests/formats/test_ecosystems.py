"""ESPnet, icefall and NeMo N-best output (tests/fixtures/ecosystems, made by the writers of
tests/formats/ecosystem_writers.py: each project's own code, reproduced line by line, and pyctcdecode's
real beam search) read into the TSV format, rescored, and written back in each one's
own format, read again by that project's own parsing (reproduced in tests/formats/ecosystem_writers.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.cli.wer import main as rescore_wer
from rescore.errors import RescoreError
from rescore.formats.espnet import read_espnet
from rescore.formats.icefall import read_icefall
from rescore.formats.nemo import read_nemo
from rescore.formats.tsv import read_nbest_table

FIX = REPO_ROOT / "tests" / "fixtures" / "ecosystems"
ESPNET = FIX / "espnet" / "decode_asr_nbest3" / "test_clean"
ICEFALL = FIX / "icefall" / "nbest-test-clean.jsonl"
NEMO = FIX / "nemo" / "preds_out_width3_alpha0.5_beta1.0.tsv"
MANIFEST = FIX / "nemo" / "test_manifest.json"


def _hyps(table):
    return {u.id: [(h.rank, " ".join(h.words), h.scores) for h in u.hyps] for u in table.utterances}


def test_espnet_decode_dir_reads_every_job_and_rank():
    t = read_espnet(ESPNET)
    assert t.columns == ("pass1",)
    assert _hyps(t) == {
        "utt-a": [(1, "THE CAT SAT", (3.2071,)), (2, "THE CAT SAD", (4.0512,)), (3, "A CAT SAT", (5.5,))],
        "utt-b": [(1, "A DOG", (2.5,)), (2, "A DOCK", (2.75,))],
        "utt-c": [(1, "HELLO", (1.125,)), (2, "HELLO O", (1.875,)), (3, "", (9.0,))],  # a GPU job's tensors
    }
    assert [u.id for u in t.utterances] == ["utt-a", "utt-b", "utt-c"]  # jobs in order, then the job's order


def test_espnet_output_dir_without_logdir(tmp_path):
    d = tmp_path / "out"
    shutil.copytree(ESPNET / "logdir" / "output.1", d)
    t = read_espnet(d)
    assert [u.id for u in t.utterances] == ["utt-a", "utt-b"] and t.num_hyps == 5


def _espnet_copy(tmp_path):
    d = tmp_path / "decode"
    shutil.copytree(ESPNET, d)
    return d, d / "logdir" / "output.1"


def test_espnet_faults_name_the_file_and_line(tmp_path):
    d, job = _espnet_copy(tmp_path)
    (job / "2best_recog" / "score").write_text("utt-a tensor(nan)\nutt-b tensor(-2.75)\n")
    with pytest.raises(RescoreError, match=r"2best_recog/score:1: expected 'utt score' with a finite score"):
        read_espnet(d)
    d, job = _espnet_copy(tmp_path / "b")
    (job / "2best_recog" / "text").write_text("utt-a THE CAT SAD\n")
    (job / "2best_recog" / "score").write_text("utt-a tensor(-4.0)\n")
    (job / "3best_recog" / "text").write_text("utt-b A DOG DOG\n")
    (job / "3best_recog" / "score").write_text("utt-b -9\n")
    with pytest.raises(RescoreError, match=r"3best_recog/text:1: expected hypotheses 1..2 of 'utt-b'"):
        read_espnet(d)
    d, job = _espnet_copy(tmp_path / "c")
    (job / "1best_recog" / "score").unlink()
    with pytest.raises(RescoreError, match="expected a file 'score'"):
        read_espnet(d)
    with pytest.raises(RescoreError, match="expected an ESPnet decode dir"):
        read_espnet(tmp_path)


def test_espnet_per_scorer_files_become_columns(tmp_path):
    # asr_inference.py patched to write hyp.scores as score_<name> files beside 'score'
    d = tmp_path / "out"
    shutil.copytree(ESPNET / "logdir" / "output.1", d)
    for n, lines in ((1, ["utt-a -2.5", "utt-b -1.0"]), (2, ["utt-a -3.0", "utt-b -1.25"]), (3, ["utt-a -4.0"])):
        (d / f"{n}best_recog" / "score_ctc").write_text("".join(f"{x}\n" for x in lines))
        (d / f"{n}best_recog" / "score_decoder").write_text("".join(f"{x.split()[0]} tensor(-1.5)\n" for x in lines))
    t = read_espnet(d)
    assert t.columns == ("pass1", "ctc", "decoder")
    assert _hyps(t)["utt-b"] == [(1, "A DOG", (2.5, 1.0, 1.5)), (2, "A DOCK", (2.75, 1.25, 1.5))]
    (d / "3best_recog" / "score_ctc").unlink()
    with pytest.raises(RescoreError, match=r"3best_recog: expected the score files of .*1best_recog "
                                           r"\(score, score_ctc, score_decoder\), got 'score, score_decoder'"):
        read_espnet(d)
    (d / "2best_recog" / "score_ctc").write_text("utt-a -3.0\n")
    (d / "3best_recog" / "score_ctc").write_text("utt-a -4.0\n")
    with pytest.raises(RescoreError, match=r"2best_recog/score_ctc: expected a score for 'utt-b'"):
        read_espnet(d)


def test_espnet1_result_json():
    d = FIX / "espnet1" / "decode_test_clean_beam10_nbest2"
    for path in (d, d / "data.json"):
        t = read_espnet(path)
        assert _hyps(t) == {
            "1089-134686-0000": [(1, "HE HOPED THERE WOULD BE STEW", (5.912345886230469,)),
                                 (2, "HE HOPED THERE WOULD BE STU", (7.25,))],
            "1089-134686-0001": [(1, "STUFF IT INTO YOU", (3.5,))],
        }
        assert t.refs["1089-134686-0001"] == ["STUFF", "IT", "INTO", "YOU"]


def test_espnet1_faults(tmp_path):
    import json

    js = json.loads((FIX / "espnet1" / "decode_test_clean_beam10_nbest2" / "data.json").read_text())
    outs = js["utts"]["1089-134686-0000"]["output"]
    outs.reverse()
    (tmp_path / "data.json").write_text(json.dumps(js))
    with pytest.raises(RescoreError, match=r"output\[0\]: the hypotheses in rank order \(name '...\[1\]'\)"):
        read_espnet(tmp_path / "data.json")
    outs[0]["score"] = "x"
    (tmp_path / "data.json").write_text(json.dumps(js))
    with pytest.raises(RescoreError, match=r"'rec_text' \(a string\) and 'score' \(a number\)"):
        read_espnet(tmp_path / "data.json")
    (tmp_path / "data.json").write_text(json.dumps({"utts": {}}))
    with pytest.raises(RescoreError, match="an object with 'utts'"):
        read_espnet(tmp_path / "data.json")


def test_icefall_dump_reads_scores_as_costs_and_references():
    t = read_icefall(ICEFALL)
    assert t.columns == ("am", "lm")
    assert _hyps(t) == {
        "1089-134686-0000-0": [(1, "HE HOPED THERE WOULD BE STEW", (120.5, 30.125)),
                               (2, "HE HOPED THERE WOULD BE A STEW", (123.25, 33.5))],
        "1089-134686-0001-0": [(1, "STUFF IT INTO YOU", (80.0, 20.0)), (2, "STUFF INTO YOU", (81.0, 19.5)),
                               (3, "STUFFED INTO YOU", (79.5, 22.75))],  # best first pass first
    }
    assert t.refs["1089-134686-0001-0"] == ["STUFF", "IT", "INTO", "YOU"]


@pytest.mark.parametrize("line, expected", [
    ('{"cut_id": "c1", "hyps": ["a"], "am_scores": [-1.0, -2.0]}', "'am_scores': 1 finite numbers"),
    ('{"cut_id": "c1", "hyps": ["a"], "am_scores": [NaN]}', "'am_scores': 1 finite numbers"),
    ('{"cut_id": "c1", "hyps": ["a"], "am_scores": ["x"]}', "'am_scores': 1 finite numbers"),
    ('{"cut_id": "c1", "hyps": [], "am_scores": []}', "at least one hypothesis"),
    ('{"cut_id": "c1", "hyps": ["a"], "lm_scores": [-1.0]}', "the score lists of the first cut (line 1: am)"),
    ('{"cut_id": "c0", "hyps": ["a"], "am_scores": [-1.0]}', "each once (also at line 1)"),
    ('{"hyps": ["a"]}', "an object with 'cut_id'"),
    ('{"cut_id": "c1", "hyps": ["a"]', "one JSON object per line"),
])
def test_icefall_faults_name_the_line(tmp_path, line, expected):
    p = tmp_path / "d.jsonl"
    p.write_text('{"cut_id": "c0", "hyps": ["a"], "am_scores": [-1.0]}\n' + line + "\n")
    with pytest.raises(RescoreError) as e:
        read_icefall(p)
    assert e.value.line == 2 and expected in str(e.value)


def test_converter_writes_each_recognizer_as_a_tsv_file(tmp_path):
    run = CliRunner().invoke
    for args, n in (([str(ESPNET), "--from", "espnet"], 8), ([str(ICEFALL), "--from", "icefall"], 5),
                    ([str(NEMO), "--from", "nemo", "--manifest", str(MANIFEST)], 5)):
        r = run(convert, [args[0], str(tmp_path / "n.tsv"), *args[1:]])
        assert r.exit_code == 0, r.output
        assert read_nbest_table(tmp_path / "n.tsv").num_hyps == n
    r = run(convert, [str(ESPNET), str(tmp_path / "n.tsv"), "--from", "espnet", "--manifest", str(MANIFEST)])
    assert r.exit_code == 2
    r = run(convert, [str(ESPNET), str(tmp_path / "k"), "--from", "espnet", "--to", "kaldi"])
    assert r.exit_code == 1 and f"error: {ESPNET}: expected a score column 'ac' (the input has: pass1)" in r.output
    assert not (tmp_path / "k").exists()


def test_three_commands_from_espnet_to_a_wer_report(tmp_path):
    # an NN LM cost file that prefers utt-b's second hypothesis: the 1-best changes there
    nn = tmp_path / "lmwt.nn"
    nn.write_text("utt-a-1 1 \nutt-a-2 5 \nutt-a-3 5 \nutt-b-1 9 \nutt-b-2 1 \nutt-c-1 1 \nutt-c-2 5 \nutt-c-3 5 \n")
    data = FIX / "espnet" / "data" / "test_clean"
    r = CliRunner().invoke(rescore_nbest, [str(ESPNET), str(tmp_path / "o"), "--format", "espnet",
                                           "--data-dir", str(data), "--nn-costs", str(nn), "--weight", "0.5"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "text").read_text() == "utt-a THE CAT SAT\nutt-b A DOCK\nutt-c HELLO\n"
    out = read_nbest_table(tmp_path / "o" / "scores.tsv")
    assert out.columns == ("pass1", "nn", "total")
    assert out.utterances[1].hyps[1].scores == (2.75, 1.0, 2.75 + 0.5 * 1.0)
    r = CliRunner().invoke(rescore_wer, [str(data / "text"), str(tmp_path / "o" / "text")])
    assert r.exit_code == 0 and "%WER 16.67 [ 1 / 6" in r.output, r.output


def test_an_out_dir_inside_the_decode_dir_can_be_written_again(tmp_path):
    d = tmp_path / "decode"
    shutil.copytree(ESPNET, d)
    for _ in range(2):
        r = CliRunner().invoke(rescore_nbest, [str(d), str(d / "rescored"), "--format", "espnet"])
        assert r.exit_code == 0, r.output
    assert read_nbest_table(d / "rescored" / "scores.tsv").num_hyps == 8
    job1 = d / "logdir" / "output.1" / "1best_recog"
    r = CliRunner().invoke(rescore_nbest, [str(d), str(job1), "--format", "espnet"])
    assert r.exit_code == 2 and "text" in r.output  # that would replace an input


def test_nemo_and_icefall_report_wer_from_their_own_references(tmp_path):
    r = CliRunner().invoke(rescore_nbest, [str(NEMO), str(tmp_path / "n"), "--format", "nemo",
                                           "--manifest", str(MANIFEST), "--nemo-text-processing",
                                           "lowercase,rm_punctuation"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "n" / "report.json").is_file() and "%WER 0.00 [ 0 / 5" in r.output
    r = CliRunner().invoke(rescore_nbest, [str(ICEFALL), str(tmp_path / "i"), "--format", "icefall",
                                           "--score-weight", "lm=0"])
    assert r.exit_code == 0, r.output
    # by the AM alone the second cut's best is STUFFED INTO YOU (am -79.5)
    assert (tmp_path / "i" / "text").read_text().splitlines()[1] == "1089-134686-0001-0 STUFFED INTO YOU"
    r = CliRunner().invoke(rescore_nbest, [str(NEMO), str(tmp_path / "m"), "--format", "nemo"])
    assert r.exit_code == 2 and "--manifest" in r.output


# --------------------------------------------------------------------------------------------
# the fixtures are what the writers make; each ecosystem end to end and back


def test_the_fixtures_are_what_the_writers_make(tmp_path):
    pytest.importorskip("pyctcdecode")
    from tests.formats import ecosystem_fixtures

    ecosystem_fixtures.make_all(tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (FIX / rel).read_bytes(), rel


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A small random LSTM over every word of the fixtures (upper and lower case)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    words = set()
    for p in FIX.rglob("*"):
        if p.is_file() and p.suffix in ("", ".tsv", ".jsonl", ".json"):
            words |= set(p.read_text(encoding="utf-8").replace('"', " ").replace("\t", " ").split())
    torch.manual_seed(0)
    words -= {"<eos>", "<unk>"}
    lm = build_model(ModelConfig(hidden=16, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>", *sorted(words)]))
    path = tmp_path_factory.mktemp("model") / "lm.pt"
    save_checkpoint(lm, path)
    return path


def _best_by_total(out_dir):
    t = read_nbest_table(out_dir / "scores.tsv")
    i = t.column("total")
    return {u.id: min(u.hyps, key=lambda h: (h.scores[i], h.rank)) for u in t.utterances}, t


def test_nemo_pyctcdecode_output_rescored_and_written_back(tmp_path, tiny_lm):
    from tests.formats import ecosystem_writers as ew

    t = read_nemo(NEMO, MANIFEST)  # W = 3 from NeMo's name; pyctcdecode kept 3, 1 and 1 candidates
    assert [len(u.hyps) for u in t.utterances] == [3, 1, 1]
    assert [" ".join(h.words) for h in t.utterances[0].hyps] == ["who is it", "who is at", "who as it"]
    assert t.utterances[2].hyps[0].words == []  # silence: an empty hypothesis
    assert t.refs["2277-149896-0000"] == ["Who", "is", "it?"]
    assert read_nemo(NEMO, MANIFEST, text_processing=("lowercase", "rm_punctuation")).refs == {
        "2277-149896-0000": ["who", "is", "it"], "2277-149896-0001": ["he", "was"], "2277-149896-0002": []}
    out = tmp_path / "o"
    r = CliRunner().invoke(rescore_nbest, [str(NEMO), str(out), "--format", "nemo", "--manifest", str(MANIFEST),
                                           "--model", str(tiny_lm), "--device", "cpu", "--weight", "0.5",
                                           "--nemo-text-processing", "lowercase,rm_punctuation",
                                           "--write-format", "nemo"])
    assert r.exit_code == 0, r.output
    best, scores = _best_by_total(out)
    # the manifest NeMo's speech_to_text_eval.py scores: its own entries, pred_text added
    entries = [json.loads(x) for x in (out / "manifest_rescored.json").read_text().splitlines()]
    originals = [json.loads(x) for x in MANIFEST.read_text().splitlines()]
    assert [{k: v for k, v in e.items() if k != "pred_text"} for e in entries] == originals
    assert [e["pred_text"] for e in entries] == [" ".join(best[u.id].words) for u in scores.utterances]
    # the predictions file, best first by the new total, as NeMo's script writes it
    i = scores.column("total")
    want = [(" ".join(h.words), -h.scores[i]) for u in scores.utterances
            for h in sorted(u.hyps, key=lambda h: (h.scores[i], h.rank))]
    got = [(line.split("\t")[0], float(line.split("\t")[1]))
           for line in (out / "preds_rescored.tsv").read_text().splitlines()]
    assert got == want
    back = read_nemo(out / "preds_rescored.tsv", MANIFEST, beam_size=3)  # our reader splits it again
    assert [len(u.hyps) for u in back.utterances] == [3, 1, 1]
    # NeMo's neural rescorer reads W lines per utterance: the first utterance's lines as it sees them
    rows = ew.nemo_beam_scores_dataset(out / "preds_rescored.tsv", MANIFEST, beam_size=3)
    assert [(x, y) for x, y, _ in rows[:3]] == want[:3] and {g for _, _, g in rows[:3]} == {"Who is it?"}


def test_nemo_file_names_and_beam_width(tmp_path):
    from tests.formats import ecosystem_writers as ew
    from rescore.formats.nemo import nemo_beam_width

    assert nemo_beam_width(ew.nemo_ctc_preds_name(128, 1.0, 0.0)) == 128
    assert nemo_beam_width(ew.nemo_transducer_preds_name("beam", 8)) == 8
    assert nemo_beam_width(ew.nemo_transducer_preds_name("maes", 4, kenlm_model_file="lm.bin", beam_alpha=0.3,
                                                         hat_subtract_ilm=True, hat_ilm_weight=0.1)) == 4
    assert nemo_beam_width(ew.nemo_transducer_preds_name("greedy_batch", 8)) == 1
    assert nemo_beam_width("beams.tsv") is None
    renamed = tmp_path / "beams.tsv"
    renamed.write_text(NEMO.read_text())
    assert [len(u.hyps) for u in read_nemo(renamed, MANIFEST).utterances] == [3, 1, 1]  # split by score rises
    r = CliRunner().invoke(convert, [str(renamed), str(tmp_path / "n.tsv"), "--from", "nemo", "--manifest",
                                     str(MANIFEST), "--nemo-beam", "2"])
    assert r.exit_code == 1 and "no such split exists" in r.output  # 3 + 1 + 1 lines: not in blocks of 2


def test_nemo_transducer_gpu_scores_and_segments_with_offsets():
    t = read_nemo(FIX / "nemo" / "preds_out_maes_bw3_ma2_mg2.3.tsv", FIX / "nemo" / "segments_manifest.json")
    assert [u.id for u in t.utterances] == ["2277-149896-0000000", "2277-149896-0001250", "2277-149896-0002025"]
    assert t.utterances[0].hyps[0].scores == (1.0529,)  # "tensor(-1.0529, device='cuda:0')"


def test_nemo_faults(tmp_path):
    bad = tmp_path / NEMO.name
    bad.write_text(NEMO.read_text().replace("\t-1.2535504348343238", "\tx"))
    with pytest.raises(RescoreError, match=rf"{NEMO.name}:2: expected 'text<TAB>score'"):
        read_nemo(bad, MANIFEST)
    flat = tmp_path / "f" / NEMO.name  # no rise between two utterances: cannot be split
    flat.parent.mkdir()
    flat.write_text("a\t-1\nb\t-2\nc\t-3\nd\t-4\n")
    with pytest.raises(RescoreError, match=r"NeMo writes no utterance ids.* in more than one way, from utterance 1 "
                                           r"on .*eval_beamsearch_ngram.patch.*, got '4 lines'"):
        read_nemo(flat, MANIFEST)
    many = tmp_path / "m" / NEMO.name
    many.parent.mkdir()
    many.write_text("a\t-1\n" * 10)
    with pytest.raises(RescoreError, match=r"1 to 3 candidates for each of the 3 utterances"):
        read_nemo(many, MANIFEST)
    dup = tmp_path / "dup.json"
    dup.write_text('{"audio_filepath": "a.wav", "offset": 1.0}\n{"audio_filepath": "a.wav", "offset": 1.0}\n')
    with pytest.raises(RescoreError, match=r"dup.json:2: expected .*segments of one file at different offsets"):
        read_nemo(NEMO, dup)


def test_espnet_token_only_and_multi_speaker_decodes(tmp_path):
    plain = _hyps(read_espnet(ESPNET))
    for sub, kind in (("decode_bpe_notext", "bpe"), ("decode_char_notext", "char")):
        d = FIX / "espnet" / sub / "test_clean"
        assert not any(d.rglob("text"))  # no tokenizer: ESPnet wrote token, token_int and score only
        with pytest.raises(RescoreError, match="--espnet-tokens bpe|char|word joins them"):
            read_espnet(d)
        assert _hyps(read_espnet(d, tokens=kind)) == plain
    enh = FIX / "espnet" / "decode_enh_nbest2" / "test"
    with pytest.raises(RescoreError, match=r"multi-speaker \(<n>best_recog_spk<k>/, speakers 1, 2\)"):
        read_espnet(enh)
    assert {u: [w for _, w, _ in h] for u, h in _hyps(read_espnet(enh, speaker=2)).items()} == {
        "mix-1": ["GOOD DAY", "GOOD DAYS"], "mix-2": ["NO", "KNOW"]}
    multi = FIX / "espnet" / "decode_multi_nbest2" / "test"  # text_spk<k>, score_spk<k> in <n>best_recog
    with pytest.raises(RescoreError, match=r"multi-speaker decode, speakers 1, 2: choose one with --speaker"):
        read_espnet(multi)
    assert _hyps(read_espnet(multi, speaker=2)) == _hyps(read_espnet(enh, speaker=2))
    assert (multi / "text_spk1").read_text() == "mix-1 HELLO THERE\nmix-2 YES\n"  # asr.sh's merge
    r = CliRunner().invoke(rescore_nbest, [str(enh), str(tmp_path / "s1"), "--format", "espnet", "--speaker", "1"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "s1" / "text").read_text() == "mix-1 HELLO THERE\nmix-2 YES\n"
    r = CliRunner().invoke(rescore_nbest, [str(NEMO), str(tmp_path / "x"), "--format", "nemo", "--manifest",
                                           str(MANIFEST), "--speaker", "1"])
    assert r.exit_code == 2 and "--speaker: expected --format espnet" in r.output


def test_espnet_rescored_and_written_back_for_asr_sh_scoring(tmp_path, tiny_lm):
    d = FIX / "espnet" / "decode_bpe_notext" / "test_clean"
    out = tmp_path / "decode_rescored" / "test_clean"
    data = FIX / "espnet" / "data" / "test_clean"
    r = CliRunner().invoke(rescore_nbest, [str(d), str(out), "--format", "espnet", "--espnet-tokens", "bpe",
                                           "--data-dir", str(data), "--model", str(tiny_lm), "--device", "cpu",
                                           "--weight", "0.5", "--write-format", "espnet"])
    assert r.exit_code == 0, r.output
    best, scores = _best_by_total(out)
    i = scores.column("total")
    # what asr.sh's scoring stage reads (<dir>/text), and the 1best_recog of a job, as ESPnet writes them
    want_text = "".join(f"{u} {' '.join(h.words)}\n" for u, h in best.items())
    assert (out / "text").read_text() == (out / "1best_recog" / "text").read_text() == want_text
    assert (out / "1best_recog" / "score").read_text() == \
        "".join(f"{u} {-h.scores[i]!r}\n" for u, h in best.items())
    assert _hyps(read_espnet(out)) == {u: [(1, " ".join(h.words), (h.scores[i],))] for u, h in best.items()}


def test_icefall_k2_order_is_ranked_by_the_first_pass(tmp_path, caplog):
    from tests.formats import ecosystem_fixtures as ef
    from tests.formats import ecosystem_writers as ew
    from rescore.formats.icefall import write_nbest

    paths = ef.icefall_k2_order()
    # k2's dedup order is a hash order: the second cut's first path is not its best first pass
    assert paths[1]["hyps"] == [[8, 10, 11], [12, 10, 11], [8, 9, 10, 11]]  # best (-100.0) last
    assert paths[0]["hyps"] == [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7, 6]]  # the repeated sequence kept once
    cuts = [c for c, _, _ in ef.ICEFALL_CUTS]
    refs = [r for _, r, _ in ef.ICEFALL_CUTS]
    naive = tmp_path / "naive.jsonl"  # the paths dumped as k2 leaves them
    naive.write_text("".join(json.dumps({"cut_id": c, "hyps": [" ".join(ef.WORDS[w] for w in h) for h in p["hyps"]],
                                         "am_scores": p["am_scores"], "lm_scores": p["lm_scores"], "ref": r}) + "\n"
                             for c, p, r in zip(cuts, paths, refs)))
    with caplog.at_level("WARNING"):
        t = read_icefall(naive)
    assert "1 of 2 cuts (first: 1089-134686-0001-0) did not list the best path" in caplog.text
    assert _hyps(t) == _hyps(read_icefall(ICEFALL))  # ranked as write_nbest writes them
    # the baseline (rank 1) is the first pass's 1-best: rescoring with no LM changes nothing
    out = tmp_path / "o"
    r = CliRunner().invoke(rescore_nbest, [str(naive), str(out), "--format", "icefall"])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["changed_utts"] == 0 and rep["wer"] == rep["first_rank_wer"] == 0.0  # k2 order: 10.0
    first_pass_best = {c: min(zip(p["hyps"], p["am_scores"], p["lm_scores"]), key=lambda x: -(x[1] + x[2]))[0]
                       for c, p in zip(cuts, paths)}
    assert {u.id: u.hyps[0].words for u in t.utterances} == \
        {c: [ef.WORDS[w] for w in h] for c, h in first_pass_best.items()}
    # -inf: refused with a clear message, or dropped, or clamped
    paths[0]["lm_scores"][0] = float("-inf")
    with pytest.raises(ValueError, match=r"lm_scores is -inf \(a path that the graph, e.g. G, does not accept\)"):
        write_nbest(paths, cuts, ef.WORDS, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()
    assert write_nbest(paths, cuts, ef.WORDS, tmp_path / "d.jsonl", on_inf="drop") == 4
    assert write_nbest(paths, cuts, ef.WORDS, tmp_path / "c.jsonl", on_inf="clamp") == 5
    assert read_icefall(tmp_path / "c.jsonl").utterances[0].hyps[-1].scores == (120.5, 1e4)
    (tmp_path / "inf.jsonl").write_text('{"cut_id": "c", "hyps": ["a"], "am_scores": [-Infinity]}\n')
    with pytest.raises(RescoreError, match="-Infinity: a path that G does not accept"):
        read_icefall(tmp_path / "inf.jsonl")
    assert ew.k2_hash([]) == 13 + 104729 * 787


def test_icefall_rescored_and_written_back_as_its_recogs_and_errs(tmp_path, tiny_lm):
    from tests.formats import ecosystem_writers as ew

    pytest.importorskip("kaldialign")
    out = tmp_path / "o"
    r = CliRunner().invoke(rescore_nbest, [str(ICEFALL), str(out), "--format", "icefall", "--model", str(tiny_lm),
                                           "--device", "cpu", "--weight", "0.5", "--score-weight", "lm=0",
                                           "--write-format", "icefall"])
    assert r.exit_code == 0, r.output
    best, _ = _best_by_total(out)
    refs = read_icefall(ICEFALL).refs
    results = sorted((c, refs[c], list(h.words)) for c, h in best.items())
    # icefall's own store_transcripts / write_error_stats (with the real kaldialign) on the same 1-best
    ew.icefall_store_transcripts(tmp_path / "recogs.txt", results)
    with open(tmp_path / "errs.txt", "w") as f:
        wer = ew.icefall_write_error_stats(f, "test-clean-rescored", results)
    assert (out / "recogs-test-clean-rescored.txt").read_text() == (tmp_path / "recogs.txt").read_text()
    assert (out / "errs-test-clean-rescored.txt").read_text() == (tmp_path / "errs.txt").read_text()
    assert (out / "wer-summary-test-clean.txt").read_text() == f"settings\tWER\nrescored\t{wer}\n"
    back = ew.icefall_read_recogs(out / "recogs-test-clean-rescored.txt")
    assert back == {c: (ref, hyp) for c, ref, hyp in results}


def test_kaldi_alignment_is_kaldialigns():
    import random

    kaldialign = pytest.importorskip("kaldialign")
    from rescore.formats.icefall import kaldi_align

    rng = random.Random(0)
    for _ in range(300):
        ref = [rng.choice("abcd") for _ in range(rng.randint(0, 7))]
        hyp = [rng.choice("abcde") for _ in range(rng.randint(0, 7))]
        assert kaldi_align(ref, hyp, "*") == kaldialign.align(ref, hyp, "*")


def test_converter_writes_each_ecosystems_format(tmp_path):
    # rescore-nbest's scores.tsv (column total) or any input -> the recognizer's own files
    r = CliRunner().invoke(convert, [str(ESPNET), str(tmp_path / "e"), "--from", "espnet", "--to", "espnet"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "e" / "text").read_text() == "utt-a THE CAT SAT\nutt-b A DOG\nutt-c HELLO\n"
    assert (tmp_path / "e" / "1best_recog" / "score").read_text().splitlines()[0] == "utt-a -3.2071"
    r = CliRunner().invoke(convert, [str(NEMO), str(tmp_path / "n"), "--from", "nemo", "--to", "nemo",
                                     "--manifest", str(MANIFEST)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "n" / "preds_rescored.tsv").read_text().splitlines()[:2] == NEMO.read_text().splitlines()[:2]
    r = CliRunner().invoke(convert, [str(ICEFALL), str(tmp_path / "i"), "--from", "icefall", "--to", "icefall"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "i" / "errs-test-clean-rescored.txt").read_text().startswith("%WER = 0.00\n")
    r = CliRunner().invoke(convert, [str(ESPNET), str(tmp_path / "x"), "--from", "espnet", "--to", "icefall"])
    assert r.exit_code == 1 and "expected references for icefall's recogs/errs files" in r.output


def test_pyctcdecode_and_hf_beams_as_a_tsv_file(tmp_path, tiny_lm):
    pytest.importorskip("pyctcdecode")
    from tests.formats import ecosystem_fixtures as ef
    from pyctcdecode import build_ctcdecoder

    from rescore.formats.pyctcdecode import write_beams

    logits = ef.nemo_logits()
    decoder = build_ctcdecoder(ef.LABELS)
    beams = [decoder.decode_beams(x, beam_width=3) for x in logits]
    ids = ["u0", "u1", "u2"]
    t = write_beams(tmp_path / "n.tsv", ids, beams)
    back = read_nbest_table(tmp_path / "n.tsv")
    assert back.columns == ("ac", "lm") and [len(u.hyps) for u in back.utterances] == [3, 1, 1]
    assert _hyps(back) == _hyps(t)
    nemo = read_nemo(NEMO, MANIFEST)  # NeMo's file of the same beams: the same ranking and totals
    for u, v in zip(back.utterances, nemo.utterances):
        assert [(h.words, pytest.approx(sum(h.scores))) for h in u.hyps] == [(h.words, h.scores[0]) for h in v.hyps]
    r = CliRunner().invoke(rescore_nbest, [str(tmp_path / "n.tsv"), str(tmp_path / "o"), "--model", str(tiny_lm),
                                           "--device", "cpu", "--weight", "0.5"])
    assert r.exit_code == 0, r.output
    assert read_nbest_table(tmp_path / "o" / "scores.tsv").num_hyps == 5
    transformers = pytest.importorskip("transformers")
    import json as js

    (tmp_path / "vocab.json").write_text(js.dumps({"<pad>": 0, "|": 1, **{c: i for i, c in enumerate(ef.LABELS)
                                                                          if i > 1}}))
    tok = transformers.Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"), pad_token="<pad>", unk_token="<pad>",
                                            word_delimiter_token="|", bos_token=None, eos_token=None)
    proc = transformers.Wav2Vec2ProcessorWithLM(feature_extractor=transformers.Wav2Vec2FeatureExtractor(),
                                                tokenizer=tok, decoder=decoder)
    out = proc.batch_decode(np.stack([logits[0], logits[0]]), n_best=3, num_processes=1)
    hf = write_beams(tmp_path / "hf.tsv", ["a", "b"], out)
    assert [_hyps(hf)[k] for k in ("a", "b")] == [_hyps(t)["u0"]] * 2


def test_format_options_that_do_not_fit_the_input_are_refused(tmp_path):
    from tests.conftest import FIXTURES

    run = CliRunner().invoke
    r = run(rescore_nbest, [str(FIXTURES / "nbest-small"), str(tmp_path / "k"), "--write-format", "espnet"])
    assert r.exit_code == 2 and "--write-format: expected an input other than a Kaldi dir" in r.output
    r = run(rescore_nbest, [str(ESPNET), str(tmp_path / "e"), "--format", "espnet", "--write-format", "nemo"])
    assert r.exit_code == 2 and "--write-format" in r.output and "--format nemo" in r.output
    r = run(rescore_nbest, [str(NEMO), str(tmp_path / "n"), "--format", "nemo", "--manifest", str(MANIFEST),
                            "--nemo-text-processing", "lowercase,upper"])
    assert r.exit_code == 2 and "'upper'" in r.output
    r = run(rescore_nbest, [str(ESPNET), str(tmp_path / "i"), "--format", "espnet", "--write-format", "icefall"])
    assert r.exit_code == 2 and "references" in r.output
    assert not any(p.exists() for p in (tmp_path / "k", tmp_path / "e", tmp_path / "n", tmp_path / "i"))


def test_the_decode_script_helpers_import_no_toolkit():
    import subprocess
    import sys

    code = ("import sys, rescore.formats.icefall, rescore.formats.pyctcdecode, rescore.formats.hf_generate; "
            "print([m for m in ('k2', 'torch', 'icefall', 'pyctcdecode', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"
