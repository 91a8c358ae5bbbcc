"""The mini recipe, reduced (recipes/mini/run.sh --reduced true): a few synthesized sentences
of held-out Bible chapters, PocketSphinx N-best lists, a tiny LM, tuning and rescoring.

Needs flite (Debian), PocketSphinx (PyPI) and the World English Bible (Debian package
sword-text-web, installed or fetched by the recipe with apt-get download); skips naming the
install command where one is missing.  Runs in about a minute on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SWORD = Path("/usr/share/sword/modules/texts/ztext/engWEB2015eb")

pytestmark = pytest.mark.slow


def _skip_without_tools():
    if importlib.util.find_spec("pocketsphinx") is None:
        pytest.skip("PocketSphinx missing: pip install -e '.[mini]'")
    if shutil.which("flite") is None:
        pytest.skip("flite missing: apt-get install -y flite")
    if not (SWORD / "ot.bzz").exists() and (shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None):
        pytest.skip("World English Bible missing and no apt-get to fetch it: apt-get install -y sword-text-web")


def test_reduced_mini_recipe(tmp_path):
    _skip_without_tools()
    cmd = ["bash", "recipes/mini/run.sh", "--reduced", "true", "--dir", str(tmp_path / "exp")]
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", __import__("sys").executable))
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0 and "could not get the World English Bible" in r.stderr:
        pytest.skip("World English Bible not reachable: apt-get install -y sword-text-web")
    assert r.returncode == 0, r.stderr[-3000:]
    exp = tmp_path / "exp"

    # The text split keeps held-out books out of the LM text.
    stats = json.loads((exp / "text" / "stats.json").read_text())
    assert stats["dev"]["sentences"] > 0 and stats["test"]["sentences"] > 0 and stats["train"]["words"] >= 30000
    train = set((exp / "text" / "train.txt").read_text().splitlines())
    assert not train & set((exp / "text" / "test.txt").read_text().splitlines())

    # Stage 4: rescore-nbest with the decoder's weights and no NN LM gives PocketSphinx's 1-best.
    # Exact ties (equal integer scores) may go either way by the archives' 1e-4 rounding.
    for x in ("dev", "test"):
        read = lambda p: {ln.split()[0]: ln.split()[1:] for ln in p.read_text().splitlines()}
        ps = read(exp / "nbest" / x / "ps_1best.txt")
        fp = read(exp / "first_pass" / x / "text")
        assert fp.keys() == ps.keys()
        words, ac, lm = (read(exp / "nbest" / x / n) for n in ("words_text", "acwt", "lmwt.withlm"))
        cost = {(k.rsplit("-", 1)[0], tuple(w)): float(ac[k][0]) / 9.5 + float(lm[k][0]) for k, w in words.items()}
        for utt in ps:
            assert fp[utt] == ps[utt] or abs(cost[utt, tuple(fp[utt])] - cost[utt, tuple(ps[utt])]) < 3e-4, utt
        segments = (exp / "data" / x / "segments").read_text().splitlines()
        assert len({ln.split()[1] for ln in segments}) >= 2  # several recordings = conversations

    first = re.search(r"^first-pass WER: ([0-9.]+)$", r.stdout, re.M)
    rescored = re.search(r"^rescored WER: ([0-9.]+)$", r.stdout, re.M)
    assert first and rescored, r.stdout
    # The LM: every training word (the reduced run caps them at 3000) through the
    # class-factored output over round(sqrt(V)) classes.
    from rescore.models import read_checkpoint

    config = read_checkpoint(exp / "lm" / "model.pt")["config"]
    types = {w for line in (exp / "text" / "train.txt").read_text().splitlines() for w in line.split()}
    assert config["vocab_size"] == min(3000, len(types - {"<unk>"}) + 2)
    assert (config["output"], config["classes"]) == ("class", round(config["vocab_size"] ** 0.5))
    assert config["head"] == "pointer"
    report = json.loads((exp / "first_pass" / "test" / "report.json").read_text())
    assert float(first.group(1)) == pytest.approx(report["wer"], abs=0.01)
    assert (exp / "test_rescored" / "buckets.png").stat().st_size > 1000
    assert "per rare-word bucket" in r.stdout
    # the two-system table: first pass against rescored, with the bootstrap over recordings
    cmp = json.loads((exp / "test_compare.json").read_text())
    assert [s["name"] for s in cmp["systems"]] == ["first-pass", "rescored"]
    assert cmp["systems"][0]["wer"] == pytest.approx(report["wer"])
    assert cmp["bootstrap"]["unit"] == "group" and cmp["bootstrap"]["grouping"] == "segments"
    assert sum(b["systems"]["rescored"]["errors"] for b in cmp["buckets"]) == cmp["systems"][1]["errors"]
    assert "rel.change" in r.stdout and "CI of diff" in r.stdout
    assert (exp / "test_compare.png").stat().st_size > 1000
