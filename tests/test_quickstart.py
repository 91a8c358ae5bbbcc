"""The README's quickstart, run as written: its fenced block is extracted from README.md and run
by bash in a Kaldi recipe directory of stand-ins (tests/test_recipes.py's: run.pl, the lattice
programs playing their part with archives real Kaldi wrote for 8 utterances of the dev set,
utils/), with the real rescore-train-lm, rescore-nbest and rescore-import-kaldi-lm.

Only the model sizes are made tiny (each replaced string must be in the README, so the test
fails when the quickstart changes under it), and the path variables the block assigns point at
the test's fixture instead of a Kaldi system's data/ and exp/."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, shared_data_path
from tests.test_recipes import KALDI_PROGS, inputs, kaldi_dir, kaldi_lstm, make_bin, system_bin, write_exe  # noqa: F401

SECTION = "## On your own Kaldi system"
# The variables the quickstart assigns; the test gives them its own values.
VARIABLES = {"rescore", "text", "valid", "lang", "data", "decode"}
# Tiny sizes for the test (the README's string -> the test's).
TINY = {
    "--hidden 256 --layers 2": "--hidden 16 --layers 1",
    "--max-minutes 80": "--max-minutes 80 --epochs 1 --epoch-batches 3 --bptt 20 --batch-size 4",
    "--embedding-dim 650": "--embedding-dim 8",
    "--hidden-dim 650": "--hidden-dim 8",
    "--nlayers 2": "--nlayers 1",
}
ASSIGNMENTS = re.compile(r"^(\w+=\S+\s+)*\w+=\S+\s*(#.*)?$")
# Kaldi's local/score.sh, standing in: records that it ran and on what.
SCORE_SH = '#!/bin/sh\necho "$@" >> "$SCORED"\n'


def quickstart_block(readme: str) -> str:
    """The first ```bash block after the quickstart's heading."""
    section = readme.split(SECTION, 1)
    assert len(section) == 2, f"README.md has no '{SECTION}' section"
    m = re.search(r"```bash\n(.*?)```", section[1], re.S)
    assert m, f"no ```bash block under '{SECTION}'"
    return m.group(1)


def assigned_variables(block: str) -> tuple:
    """(names assigned by the block's assignment-only lines, the block without those lines)."""
    names, rest = set(), []
    for line in block.splitlines():
        if ASSIGNMENTS.match(line):
            names |= {w.split("=", 1)[0] for w in line.split("#", 1)[0].split()}
        else:
            rest.append(line)
    return names, "\n".join(rest) + "\n"


def test_quickstart_block_is_short_and_assigns_its_paths():
    block = quickstart_block((REPO_ROOT / "README.md").read_text())
    assert len(block.splitlines()) <= 15
    names, _ = assigned_variables(block)
    assert names == VARIABLES
    for readme_string in TINY:
        assert readme_string in block, f"the quickstart no longer has '{readme_string}'"


def subset_data_dir(dev_data: Path, utts: set, out: Path) -> None:
    """DEV's data dir restricted to utts (text, segments, utt2spk, spk2utt, utt2dur)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("text", "segments", "utt2spk", "utt2dur"):
        lines = [line for line in (dev_data / name).read_text().splitlines() if line.split()[0] in utts]
        (out / name).write_text("".join(line + "\n" for line in lines))
    spk = {}
    for line in (out / "utt2spk").read_text().splitlines():
        utt, s = line.split()
        spk.setdefault(s, []).append(utt)
    (out / "spk2utt").write_text("".join(f"{s} {' '.join(u)}\n" for s, u in sorted(spk.items())))


@pytest.mark.slow
@pytest.mark.shared_data
def test_readme_quickstart_runs(tmp_path, kaldi_lstm):  # noqa: F811 (the fixture, imported)
    fixture = shared_data_path("kaldi-nbest-fixture")
    dev = shared_data_path("tts-wikitext2-dev")
    lm_text = shared_data_path("wikitext2-asr")
    block = quickstart_block((REPO_ROOT / "README.md").read_text())
    names, script = assigned_variables(block)
    for readme_string, tiny in TINY.items():
        script = script.replace(readme_string, tiny)

    # The recipe dir, the old lang dir, a decode dir of one job, the data dir of its utterances.
    recipe = kaldi_dir(tmp_path)
    write_exe(recipe / "local" / "score.sh", SCORE_SH)
    (recipe / "cmd.sh").write_text("export decode_cmd=run.pl\n")  # Kaldi's cmd.sh, local jobs
    lang, _, data, decode, _ = inputs(tmp_path, g="G.carpa")
    shutil.copy(dev / "lang" / "words.txt", Path(lang) / "words.txt")
    utts = {line.split()[0].rsplit("-", 1)[0] for line in (fixture / "words").read_text().splitlines()}
    shutil.rmtree(data)
    subset_data_dir(dev / "data", utts, Path(data))
    shutil.copytree(data, Path(data) / "split1" / "1")  # as the 1-job decode split it
    with gzip.open(Path(decode) / "lat.1.gz", "wb"):
        pass
    # LM text: a few hundred sentences; Kaldi's model and its vocabulary where the block has them.
    text, valid = tmp_path / "lm_train.txt", tmp_path / "lm_valid.txt"
    text.write_text("".join((lm_text / "train.txt").read_text().splitlines(keepends=True)[:400]))
    valid.write_text("".join((lm_text / "valid.nodev.txt").read_text().splitlines(keepends=True)[:50]))
    (recipe / "exp" / "pytorch_lstm").mkdir(parents=True)
    shutil.copy(kaldi_lstm, recipe / "exp" / "pytorch_lstm" / "model.pt")
    (recipe / "data" / "pytorchnn").mkdir(parents=True)
    shutil.copy(dev / "lang" / "words.txt", recipe / "data" / "pytorchnn" / "words.txt")

    bindir = make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)
    for name, module in (("rescore-train-lm", "train_lm"), ("rescore-import-kaldi-lm", "import_kaldi_lm")):
        write_exe(bindir / name, f'#!/bin/sh\nPYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" '
                                 f'-m rescore.cli.{module} "$@"\n')
    scored = tmp_path / "scored"
    env = {"PATH": os.pathsep.join([str(bindir), str(system_bin())]), "HOME": str(recipe), "LC_ALL": "C",
           "OMP_NUM_THREADS": "1", "CALLS": str(tmp_path / "calls"), "FIXTURE": str(fixture),
           "DROP_KEY": "", "SCORED": str(scored),
           "rescore": str(REPO_ROOT), "text": str(text), "valid": str(valid),
           "lang": lang, "data": data, "decode": decode}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=recipe, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr

    # The recommended model, as the block trained it.
    model_dir = recipe / "exp" / "rescore" / "lstm"
    config = json.loads((model_dir / "train.json").read_text())["config"]
    assert (config["arch"], config["output"]) == ("lstm", "class")  # --classes auto: round(sqrt V)
    assert config["classes"] == round(math.sqrt(config["vocab_size"])) > 1
    # Both steps wrote rescored lattices and a 1-best of every utterance, and scored them.
    for out in (f"{decode}_rescore", f"{decode}_pytorchnn"):
        assert Path(out, "lat.1.gz").is_file(), out
        assert {line.split()[0] for line in Path(out, "text").read_text().splitlines()} == utts
    rescore_log = Path(f"{decode}_rescore", "log", "rescore.log").read_text()  # run.pl: one process
    assert "--model exp/rescore/lstm/model.pt --weight 0.6" in rescore_log
    assert "--state-carry rescored" in rescore_log and "--oov-penalty auto" in rescore_log
    assert "--no-plot" in rescore_log and not list(Path(decode).parent.glob("**/buckets.png"))
    report = json.loads(Path(f"{decode}_rescore", "archives.1", "report.json").read_text())
    assert report["num_utts"] == len(utts)
    assert "importing exp/pytorch_lstm/model.pt (LSTM)" in r.stdout
    assert (recipe / "exp" / "pytorch_lstm" / "model.pt.rescore" / "model.pt").is_file()
    assert scored.read_text().splitlines() == [f"--cmd run.pl {data} {lang} {decode}_rescore",
                                               f"--cmd run.pl {data} {lang} {decode}_pytorchnn"]
