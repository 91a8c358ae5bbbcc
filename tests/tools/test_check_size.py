"""tools/bench/check_size.py: functions over 80 lines and files over 600 lines are named, exit 1."""

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench" / "check_size.py"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def test_long_function_and_file_are_named(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (tmp_path / "long.py").write_text(f"def long_one():\n{body}\n\n\ndef short():\n    return 1\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 601)
    (tmp_path / "ok.py").write_text("def f():\n" + "    pass\n" * 79 + "x = 1\n" * 518)
    r = run(tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        f"{tmp_path / 'big.py'}:1: file is 601 lines (at most 600)",
        f"{tmp_path / 'long.py'}:1: function long_one is 81 lines (at most 80)",
    ]


def test_clean_tree_exits_0(tmp_path):
    (tmp_path / "ok.py").write_text("@decorator\n" * 10 + "def f():\n" + "    pass\n" * 79)
    r = run(tmp_path, "--max-file", "600")
    assert (r.returncode, r.stdout) == (0, "")
