"""NeMo's predictions file at any beam width: the split into utterances wherever the file allows
exactly one (checked against every split, enumerated), and the exact way: NeMo's own
eval_beamsearch_ngram_ctc.py (the upstream file, tests/fixtures/ecosystems/nemo/) patched with
recipes/patches/nemo/, run on pyctcdecode's beams at width 128, read and rescored."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from tests.formats import ecosystem_fixtures as ef
from tests.formats import ecosystem_writers as ew
from tests.formats.test_ecosystems import tiny_lm  # noqa: F401 (a fixture)
from rescore.cli.convert import convert
from rescore.cli.nbest import main as rescore_nbest
from rescore.errors import RescoreError
from rescore.formats.nemo import NEMO_PATCH, nemo_splits, read_nemo

FIX = REPO_ROOT / "tests" / "fixtures" / "ecosystems" / "nemo"
SCRIPT = "scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram_ctc.py"
TRANSDUCER = "scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram_transducer.py"


def _all_splits(scores, num_utts, width):
    """Every split into num_utts blocks of 1..width lines, scores never rising inside a block
    (the slow reference of nemo_splits)."""
    out = []

    def walk(start, sizes):
        if start == len(scores) or len(sizes) == num_utts:
            if start == len(scores) and len(sizes) == num_utts:
                out.append(sizes)
            return
        for n in range(1, width + 1):
            end = start + n
            if end > len(scores) or any(scores[i] > scores[i - 1] for i in range(start + 1, end)):
                break
            walk(end, sizes + [n])

    walk(0, [])
    return out


def test_splits_are_those_of_the_slow_enumeration():
    rng = random.Random(7)
    for _ in range(3000):
        width, num_utts = rng.randint(1, 4), rng.randint(1, 5)
        scores = [float(rng.randint(-4, 0)) for _ in range(rng.randint(num_utts, num_utts * width + 1))]
        splits = _all_splits(scores, num_utts, width)
        count, found = nemo_splits(scores, num_utts, width)
        assert count == min(2, len(splits)), (scores, num_utts, width)
        if count == 1:
            assert found == splits[0]
        if count == 2:  # the first utterance whose number of candidates differs between splits
            assert found == min(next(i for i, (a, b) in enumerate(zip(s, splits[0])) if a != b)
                                for s in splits[1:] if s != splits[0])


def test_a_file_that_splits_one_way_only_is_read_though_it_never_rises(tmp_path):
    # W = 2, three utterances, 5 lines, no rise: the only split of 5 lines into blocks of at most
    # 2 is 2+2+1... and 1+2+2, 2+1+2 too; with 6 lines 2+2+2 (W each); with 3 lines 1+1+1
    assert nemo_splits([-1, -2, -3, -4, -5], 3, 2)[0] == 2
    # a rise fixes the first boundary; the remaining run of 4 lines must be two full blocks of 2
    assert nemo_splits([-1, -0.5, -2, -3, -4], 3, 2) == (1, [1, 2, 2])
    p = tmp_path / "preds_out_width2_alpha1.0_beta0.0.tsv"
    p.write_text("a\t-1\nb\t-0.5\nc\t-2\nd\t-3\ne\t-4\n")
    manifest = tmp_path / "m.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": f"u{k}.wav", "text": "a"}) + "\n" for k in range(3)))
    assert [len(u.hyps) for u in read_nemo(p, manifest).utterances] == [1, 2, 2]


def _decode(tmp_path, patched: bool, transducer: bool = False):
    """pyctcdecode's beams at width 128 through NeMo's beam_search_eval (upstream, or patched with
    our patch by `patch -p1`, as a user applies it), or the same candidates through the transducer
    script's decoding_step (maes): the predictions file, the manifest, the candidates' numbers."""
    if shutil.which("patch") is None:
        pytest.skip("the 'patch' program is not installed")
    root = tmp_path / (("nemo-patched" if patched else "nemo") + ("-rnnt" if transducer else ""))
    for script, upstream in ((SCRIPT, "eval_beamsearch_ngram_ctc.py.upstream"),
                             (TRANSDUCER, "eval_beamsearch_ngram_transducer.py.upstream")):
        (root / script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIX / upstream, root / script)
    if patched:
        r = subprocess.run(["patch", "-p1", "-i", str(REPO_ROOT / NEMO_PATCH)], cwd=root, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    texts = ["who is it", "he was", "", "who is it", "he was", "was he"]
    logits = [ef._logprobs(ef._spell("who is it", alt={4: ("a", 0.3), 7: ("a", 0.45)})),
              ef._logprobs([{c: 0.999} if c else {"": 0.999} for c in "he was"] + [{"": 0.999}]),
              ef._logprobs([{"": 0.999}] * 4),  # silence: one empty candidate
              ef._logprobs(ef._spell("who is it", alt={0: ("h", 0.4), 4: ("a", 0.3)})),
              ef._logprobs([{c: 0.98, "a": 0.02} if c else {"": 0.98} for c in "he was"] + [{"": 0.999}]),
              ef._logprobs([{c: 0.999} if c else {"": 0.999} for c in "was he"] + [{"": 0.999}])]
    all_hyps = ew.nemo_pyctcdecode_nbest(logits, ef.LABELS, beam_width=128)
    manifest = root / "manifest.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": f"audio/utt{k}.wav", "duration": 1.0, "text": t})
                                + "\n" for k, t in enumerate(texts)))
    (root / "preds").mkdir()
    if transducer:
        out = root / "preds" / ew.nemo_transducer_preds_name("maes", 128)
        ew.nemo_transducer_decoding_step(root / TRANSDUCER, all_hyps, texts, out)
    else:
        out = root / "preds" / ew.nemo_ctc_preds_name(128, 1.0, 0.0)
        ew.nemo_ctc_beam_search_eval(root / SCRIPT, all_hyps, texts, out, beam_width=128)
    return out, manifest, [len(h) for h in all_hyps]


def test_nemo_width_128_read_exactly_through_the_patched_script_and_rescored(tmp_path, tiny_lm):  # noqa: F811
    preds, manifest, sizes = _decode(tmp_path, patched=False)
    assert max(sizes) < 128 and min(sizes) == 1 and sizes[2] == 1  # fewer than W, and a silent utterance
    assert not preds.with_name(preds.name + ".counts").exists()  # NeMo's own script: no counts
    with pytest.raises(RescoreError) as e:
        read_nemo(preds, manifest)
    msg = str(e.value)
    assert "in more than one way" in msg and NEMO_PATCH in msg and "write_beams" in msg
    scores = [float(line.split("\t")[1]) for line in preds.read_text().splitlines()]
    count, first = nemo_splits(scores, 6, 128)
    assert count == 2 and f"from utterance {first + 1} on ('utt{first}', line {first + 1} of the manifest)" in msg

    preds, manifest, sizes = _decode(tmp_path, patched=True)
    counts = preds.with_name(preds.name + ".counts")
    assert counts.read_text() == "".join(f"{n}\n" for n in sizes)
    table = read_nemo(preds, manifest)
    assert [len(u.hyps) for u in table.utterances] == sizes
    assert [u.id for u in table.utterances] == [f"utt{k}" for k in range(6)]
    assert table.utterances[2].hyps[0].words == [] and " ".join(table.utterances[5].hyps[0].words) == "was he"
    scores = [-h.scores[0] for u in table.utterances for h in u.hyps]
    lines = preds.read_text().splitlines()
    assert scores == [float(x.split("\t")[1]) for x in lines]
    out = tmp_path / "rescored"
    r = CliRunner().invoke(rescore_nbest, [str(preds), str(out), "--format", "nemo", "--manifest", str(manifest),
                                           "--model", str(tiny_lm), "--device", "cpu", "--weight", "0.5",
                                           "--write-format", "nemo"])
    assert r.exit_code == 0, r.output
    assert (out / "text").read_text().splitlines()[2] == "utt2"  # the silent one: an empty 1-best
    assert len((out / "preds_rescored.tsv").read_text().splitlines()) == sum(sizes)
    # a counts file that does not fit is refused, naming it
    counts.write_text("1\n" * 6)
    r = CliRunner().invoke(convert, [str(preds), str(tmp_path / "n.tsv"), "--from", "nemo", "--manifest",
                                     str(manifest)])
    assert r.exit_code == 1 and f"{counts}: expected one line per utterance" in r.output


def test_the_patched_transducer_script_writes_the_counts_too(tmp_path):
    preds, manifest, sizes = _decode(tmp_path, patched=False, transducer=True)
    assert not preds.with_name(preds.name + ".counts").exists()
    with pytest.raises(RescoreError, match="in more than one way"):
        read_nemo(preds, manifest)
    preds, manifest, sizes = _decode(tmp_path, patched=True, transducer=True)
    assert preds.with_name(preds.name + ".counts").read_text() == "".join(f"{n}\n" for n in sizes)
    table = read_nemo(preds, manifest)  # W = 128 from the transducer script's name
    assert [len(u.hyps) for u in table.utterances] == sizes
    assert [h.scores[0] for u in table.utterances for h in u.hyps] == [
        -float(x.split("\t")[1]) for x in preds.read_text().splitlines()]
