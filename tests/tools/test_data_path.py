"""tools/bench/data_path.py: rescore-nbest's data path traced on this tree. No stop of it climbs
back into a higher layer (a lower layer calling into an object of a higher one, which the import
graph cannot show), for a Kaldi dir and for a TSV file alike."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.bench.data_path import NBEST_SMALL, climbs_back, job_stops, layer, trace
from tools.common import REPO


def test_layers_of_module_files():
    assert layer("errors.py") == 0
    assert layer("io/kaldi.py") < layer("formats/kaldi.py") < layer("metrics/report.py") < layer("nbest/sets.py")
    assert layer("jobs/nbest.py") < layer("cli/nbest.py")
    stops = [("metrics/report.py:nbest_report", "nbest/sets.py:NbestSet.utterances"),
             ("nbest/sets.py:_load", "io/kaldi.py:read_table"), ("cli/nbest.py:main", "jobs/nbest.py:run")]
    assert job_stops({"stops": stops}) == stops[:2]
    assert climbs_back(stops) == stops[:1]


@pytest.mark.parametrize("kind", ["kaldi", "tsv"])
def test_the_data_never_climbs_back(tmp_path, kind):
    src = NBEST_SMALL
    if kind == "tsv":
        src = tmp_path / "nbest-small.tsv"
        subprocess.run([sys.executable, "-m", "rescore.cli.convert", str(NBEST_SMALL), str(src)], check=True,
                       capture_output=True, cwd=REPO)
    c = trace(REPO, src, tmp_path, kind)
    stops = job_stops(c)
    assert len(stops) > 50  # (the trace saw the whole run)
    assert climbs_back(stops) == []
    assert {k for k, _, _ in c["opened"]} == {"read", "write"}
