"""ESPnet, icefall and NeMo N-best output (tests/fixtures/ecosystems, in each one's own layout)
read into the interchange format, and rescored to a 1-best and a WER report."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from rescore.cli.interchange import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.cli.wer import main as rescore_wer
from rescore.errors import RescoreError
from rescore.io.ecosystems import read_espnet, read_icefall, read_nemo
from rescore.io.interchange import read_nbest_table

FIX = REPO_ROOT / "tests" / "fixtures" / "ecosystems"
ESPNET = FIX / "espnet" / "decode_asr_nbest3" / "test_clean"
ICEFALL = FIX / "icefall" / "nbest-test-clean.jsonl"
NEMO = FIX / "nemo" / "preds_out_size3_alpha0.5_beta1.0.tsv"
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
        "1089-134686-0001-0": [(1, "STUFF IT INTO YOU", (80.0, 20.0)), (2, "STUFFED INTO YOU", (79.5, 22.75)),
                               (3, "STUFF INTO YOU", (81.0, 19.5))],
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


def test_nemo_beams_take_ids_and_references_from_the_manifest():
    t = read_nemo(NEMO, MANIFEST)
    assert t.columns == ("pass1",)
    assert _hyps(t) == {
        "2277-149896-0000": [(1, "he was in a fevered state of mind", (12.625,)),
                             (2, "he was in a fever state of mind", (13.5,)),
                             (3, "he was in the fevered state of mind", (14.0,))],
        "2277-149896-0001": [(1, "who is it", (3.25,)), (2, "who is at", (4.5,)), (3, "who is", (6.0,))],
    }
    assert t.refs == {"2277-149896-0000": "he was in a fevered state of mind".split(),
                      "2277-149896-0001": ["who", "is", "it"]}


def test_nemo_faults(tmp_path):
    short = tmp_path / "preds_out_size3_alpha0.5_beta1.0.tsv"
    short.write_text("".join(NEMO.read_text().splitlines(keepends=True)[:5]))
    with pytest.raises(RescoreError, match=r"3 candidates for each of the 2 utterances .* \(6 lines\)"):
        read_nemo(short, MANIFEST)
    bad = tmp_path / "b" / NEMO.name
    bad.parent.mkdir()
    bad.write_text(NEMO.read_text().replace("\t-4.5", "\tx"))
    with pytest.raises(RescoreError, match=r"preds_out_size3_alpha0.5_beta1.0.tsv:5: expected 'text<TAB>score'"):
        read_nemo(bad, MANIFEST)
    renamed = tmp_path / "beams.tsv"
    renamed.write_text(NEMO.read_text())
    with pytest.raises(RescoreError, match="NeMo's file name"):
        read_nemo(renamed, MANIFEST)
    assert read_nemo(renamed, MANIFEST, beam_size=3).num_hyps == 6


def test_converter_writes_each_recognizer_as_an_interchange_file(tmp_path):
    run = CliRunner().invoke
    for args, n in (([str(ESPNET), "--from", "espnet"], 8), ([str(ICEFALL), "--from", "icefall"], 5),
                    ([str(NEMO), "--from", "nemo", "--manifest", str(MANIFEST)], 6)):
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
                                           "--manifest", str(MANIFEST)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "n" / "report.json").is_file() and "%WER 0.00 [ 0 / 11" in r.output
    r = CliRunner().invoke(rescore_nbest, [str(ICEFALL), str(tmp_path / "i"), "--format", "icefall",
                                           "--score-weight", "lm=0"])
    assert r.exit_code == 0, r.output
    # by the AM alone the second cut's best is its 2nd hypothesis
    assert (tmp_path / "i" / "text").read_text().splitlines()[1] == "1089-134686-0001-0 STUFFED INTO YOU"
    r = CliRunner().invoke(rescore_nbest, [str(NEMO), str(tmp_path / "m"), "--format", "nemo"])
    assert r.exit_code == 2 and "--manifest" in r.output
