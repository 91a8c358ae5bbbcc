"""One set of input checks in every command that reads references or models (rescore.nbest.checks):
each bad input below is run through every command it applies to, and each says the same warning
line (the same check, the same words).

The commands: rescore-nbest (with --model where a model is checked), rescore-tune, rescore-tune
--refine-model, rescore-wer (a 1-best text against the references) and rescore-ppl (its TEXT
checked as references are). The Kaldi steps (recipes/steps/*.sh) run rescore-nbest and
rescore-wer, so they say what those say. Each case runs in-process on a copy of the bad-input
suite's world.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Callable, Dict, List

import pytest
from click.testing import CliRunner

from tests.cli.test_bad_input import base  # noqa: F401  (the fixture)
from tests.cli.test_user_mistakes import (ARCHIVES, _all_commands, _world, permuted_words_txt, raw_transcripts,
                                          shift_keys, train_text_with_refs)

NBEST = ["{w}/nb", "{w}/out", "--data-dir", "{w}/nb/data"]
TUNE = ["{w}/nb", "--data-dir", "{w}/nb/data", "--weights", "0,0.5", "--inv-acwts", "8,10", "--wips", "0"]
REFINE = TUNE + ["--refine-rounds", "1", "--device", "cpu"]
WER = ["{w}/ref.txt", "{w}/hyp.txt"]


def model_with(rel: str, fingerprint: Callable[[Path], object]) -> Callable[[Path], None]:
    """The world's model.pt saved again with ``fingerprint(world)`` as its fingerprint of the
    training text (None: left out, as the world's model.pt has none)."""
    def op(w: Path):
        from rescore.models import load_checkpoint, save_checkpoint
        from rescore.nbest.refs import FINGERPRINT_KEY

        fp = fingerprint(w)
        save_checkpoint(load_checkpoint(w / "model.pt", "cpu"), w / rel,
                        **({} if fp is None else {FINGERPRINT_KEY: fp}))
    return op


def fingerprint_of(rel: str, version=None, empty=False) -> Callable[[Path], dict]:
    def make(w: Path):
        from rescore.nbest.refs import text_fingerprint
        from rescore.vocab import read_sentences

        fp = text_fingerprint([] if empty else read_sentences(w / rel))
        if version is not None:
            fp["version"] = version
        return fp
    return make


def ref_sentences(w: Path) -> None:
    """refs.txt: the references' words, one sentence a line (rescore-ppl's TEXT)."""
    rows = [ln.split(maxsplit=1) for ln in (w / "nb" / "data" / "text").read_text().splitlines()]
    (w / "refs.txt").write_text("".join(r[1] + "\n" for r in rows if len(r) > 1))


def shifted_hyp_text(w: Path) -> None:
    """hyp.txt with each utterance's 1-best keyed as the next utterance's."""
    rows = [ln.partition(" ") for ln in (w / "hyp.txt").read_text().splitlines()]
    keys = [r[0] for r in rows]
    (w / "hyp.txt").write_text("".join(f"{k} {r[2]}\n" for k, r in zip(keys[1:] + keys[:1], rows)))


def tuned_on(rel: str) -> Callable[[Path], None]:
    def op(w: Path):
        (w / "p.json").write_text(json.dumps({"weight": 0.0, "inv_acwt": 10.0, "wip": 0.0,
                                              "tuned_on": str(w / rel)}))
    return op


def copy_file(src: str, dst: str) -> Callable[[Path], None]:
    return lambda w: shutil.copy(w / src, w / dst)


# Each case: its setup, the commands it applies to (name -> arguments), and the regex that picks
# its warning line out of what each command says; that line must be the same for all of them.
# (`same`: a regex whose match must be equal, where the rest names each command's own input;
# `mask`: a regex of the figures that differ with what each command reads.)
CASES: Dict[str, dict] = {
    "raw-transcript-references": dict(
        setup=[raw_transcripts("nb/data/text"), raw_transcripts("ref.txt")],
        commands={"nbest": NBEST, "tune": TUNE, "refine": REFINE + ["--refine-model", "{w}/model.pt"], "wer": WER},
        line=r"^the references carry .*--normalize-refs.*$",
        # (rescore-wer's hypotheses are the 1-best alone, the others' the whole N-best: other shares)
        mask=r"\([\d.]+ % of their tokens, e\.g\. '[^']*'\)"),
    "hypotheses-of-other-utterances": dict(
        setup=[shift_keys("nb", ARCHIVES), shifted_hyp_text],
        commands={"nbest": NBEST, "tune": TUNE, "refine": REFINE + ["--refine-model", "{w}/model.pt"], "wer": WER},
        line=r"^the first pass \(rank 1\) of \S+ has a WER of .*$",
        same=r"has a WER of .* do not belong together"),
    "integer-archives-through-another-words.txt": dict(
        setup=[permuted_words_txt],
        commands={"nbest": NBEST, "tune": TUNE, "refine": REFINE + ["--refine-model", "{w}/model.pt",
                                                                    "--allow-oov-rate"]},
        line=r"^the first pass \(rank 1\) has a WER of .*wrong words.txt.*$"),
    "model-without-fingerprint": dict(
        setup=[ref_sentences],
        commands={"nbest": NBEST + ["--model", "{w}/model.pt", "--device", "cpu"],
                  "refine": REFINE + ["--refine-model", "{w}/model.pt"],
                  "ppl": ["{w}/model.pt", "{w}/refs.txt", "--device", "cpu"]},
        line=r"^the references could not be checked against the training text of .*no fingerprint.*$"),
    "model-with-an-empty-fingerprint": dict(
        setup=[ref_sentences, model_with("empty.pt", fingerprint_of("train.txt", empty=True))],
        commands={"nbest": NBEST + ["--model", "{w}/empty.pt", "--device", "cpu"],
                  "refine": REFINE + ["--refine-model", "{w}/empty.pt"],
                  "ppl": ["{w}/empty.pt", "{w}/refs.txt", "--device", "cpu"]},
        line=r"^the references could not be checked against the training text of .*is empty.*$"),
    "model-with-a-fingerprint-of-another-version": dict(
        setup=[ref_sentences, model_with("v9.pt", fingerprint_of("train.txt", version=9))],
        commands={"nbest": NBEST + ["--model", "{w}/v9.pt", "--device", "cpu"],
                  "refine": REFINE + ["--refine-model", "{w}/v9.pt"],
                  "ppl": ["{w}/v9.pt", "{w}/refs.txt", "--device", "cpu"]},
        line=r"^the references could not be checked against the training text of .*version 9\b.*$"),
    "training-text-holding-the-references": dict(
        setup=[ref_sentences, train_text_with_refs("tt.txt")],
        commands={"nbest": NBEST + ["--train-text", "{w}/tt.txt", "--no-plot"],
                  "refine": REFINE + ["--refine-model", "{w}/model.pt", "--train-text", "{w}/tt.txt"],
                  "wer": WER + ["--train-text", "{w}/tt.txt"],
                  "ppl": ["{w}/model.pt", "{w}/refs.txt", "--device", "cpu", "--train-text", "{w}/tt.txt"]},
        line=r"^the LM training text \S+tt.txt holds 100.0 % of the reference sentences.*$"),
    # the model's fingerprint is checked as well as --train-text: a clean text does not hide a model
    # trained on the references
    "model-trained-on-the-references-given-a-clean-training-text": dict(
        setup=[ref_sentences, train_text_with_refs("tt.txt"), model_with("seen.pt", fingerprint_of("tt.txt"))],
        commands={"nbest": NBEST + ["--model", "{w}/seen.pt", "--device", "cpu", "--train-text", "{w}/train.txt",
                                    "--no-plot"],
                  "refine": REFINE + ["--refine-model", "{w}/seen.pt", "--train-text", "{w}/train.txt"],
                  "ppl": ["{w}/seen.pt", "{w}/refs.txt", "--device", "cpu", "--train-text", "{w}/train.txt"]},
        line=r"^the LM training text of \S+seen.pt \(by the fingerprint its checkpoint records\) holds 100.0 %.*$"),
    "setting-tuned-on-the-set-it-is-applied-to": dict(
        setup=[tuned_on("nb"), copy_file("lmwt.nn", "nb/lmwt.nn")],
        commands={"nbest": NBEST + ["--params", "{w}/p.json"],
                  "tune": TUNE + ["--apply-to", "{w}/nb", "{w}/out"]},
        line=r"^\S+/nb is the N-best set the setting was tuned on .*not a held-out figure.*$"),
}


def _said(cmd: str, args: List[str], world: Path, caplog) -> List[str]:
    caplog.clear()
    command = _all_commands()["tune" if cmd == "refine" else cmd]
    with caplog.at_level(logging.INFO):
        r = CliRunner().invoke(command, [a.replace("{w}", str(world)) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 0, f"{cmd}: {r.output[-1500:]}"
    return [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]


@pytest.mark.parametrize("case", list(CASES))
def test_every_command_says_the_same_warning(case, base, tmp_path, caplog):  # noqa: F811 (base: the fixture)
    c = CASES[case]
    lines = {}
    for cmd, args in c["commands"].items():
        world = _world(base, tmp_path / cmd)
        for op in c["setup"]:
            op(world)
        said = _said(cmd, args, world, caplog)
        found = [m for m in said if re.search(c["line"], m)]
        assert found, f"{case}: {cmd} did not warn; it said: {said}"
        line = found[0].replace(str(world), "W")
        line = re.sub(c["mask"], "...", line) if c.get("mask") else line
        lines[cmd] = re.search(c["same"], line).group(0) if c.get("same") else line
    assert len(set(lines.values())) == 1, f"{case}: the commands word it differently: {lines}"


def test_a_step_output_dir_whose_job_lacks_the_costs_is_refused_naming_the_file(base, tmp_path):  # noqa: F811
    w = _world(base, tmp_path / "w")
    step = w / "step"
    step.mkdir()
    (step / "num_jobs").write_text("2\n")
    for k in (1, 2):
        shutil.copytree(w / "nb", step / f"archives.{k}", ignore=shutil.ignore_patterns("data"))
    shutil.copy(w / "lmwt.nn", step / "archives.2" / "lmwt.nn")
    r = CliRunner().invoke(_all_commands()["tune"], [str(step), "--data-dir", str(w / "nb" / "data")])
    assert r.exit_code == 1, r.output
    assert f"error: {step / 'archives.1' / 'lmwt.nn'}" in r.output and "no such file" in r.output, r.output


def test_tuned_on_a_step_output_dir_covers_its_jobs(tmp_path):
    from rescore.nbest.checks import tuned_on_warning

    (tmp_path / "step" / "archives.1").mkdir(parents=True)
    (tmp_path / "test").mkdir()
    assert tuned_on_warning(tmp_path / "step" / "archives.1", tmp_path / "step")
    assert tuned_on_warning(tmp_path / "step", tmp_path / "step")
    assert tuned_on_warning(tmp_path / "test", tmp_path / "step") is None
