"""tools/bench/bench_gemm.py --int8: one tiny run times every path of the engine's int8 work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from rescore.engine.kernels import native, quant


@pytest.mark.skipif(not native.available() or quant.engine() is None,
                    reason="needs the compiled kernels (rescore.engine.kernels._kernels) and a quantised CPU engine")
def test_int8_kernels_bench_runs_every_path(tmp_path):
    out = tmp_path / "gemm.json"
    subprocess.run([sys.executable, "-m", "tools.bench.bench_gemm", "--int8", "--rows", "9",
                    "--hidden", "16", "--vocab", "70", "--repeat", "1", "--json", str(out)],
                   check=True, cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
                   capture_output=True)
    result = json.loads(out.read_text())
    assert result["rows"] == 9 and result["threads"] == 1
    works = ("lstm layer, K = H", "lstm layer, K = 2H", "output layer log Z")
    assert {k.split(" ", 4)[0] for k in result["gops"]} == {"lstm", "output"}
    assert len(result["gops"]) == 3 * len(works)
    assert all(v > 0 for v in result["gops"].values())
