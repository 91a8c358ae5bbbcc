"""Functions over 80 lines and files over 600 lines in rescore/ (or the given files and folders).

Prints one offender a line (``path:line: function name is N lines (at most 80)``) and exits 1 if
there is any, 0 otherwise. A function's length runs from its ``def`` line to its last line,
docstring and comments included (decorators such as click's options are not counted); a nested
function counts inside its parent too.

Example: python -m tools.bench.check_size            # the whole of rescore/
         python -m tools.bench.check_size rescore/train/loop.py rescore/io
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600


def python_files(paths: List[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.py") if q.is_file())
        else:
            yield p


def offenders(path: Path, max_function: int = MAX_FUNCTION_LINES,
              max_file: int = MAX_FILE_LINES) -> List[Tuple[int, str]]:
    """(line, message) for each function longer than ``max_function`` lines, and for the file
    when it is longer than ``max_file`` lines."""
    text = path.read_text(encoding="utf-8")
    found = []
    n_lines = len(text.splitlines())
    if n_lines > max_file:
        found.append((1, f"file is {n_lines} lines (at most {max_file})"))
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > max_function:
                found.append((node.lineno, f"function {node.name} is {length} lines (at most {max_function})"))
    return sorted(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("rescore")],
                        help="Python files or folders to check (default: rescore/).")
    parser.add_argument("--max-function", type=int, default=MAX_FUNCTION_LINES,
                        help="Most lines a function may have (default: %(default)s).")
    parser.add_argument("--max-file", type=int, default=MAX_FILE_LINES,
                        help="Most lines a file may have (default: %(default)s).")
    args = parser.parse_args(argv)
    bad = 0
    for path in python_files(args.paths):
        for line, message in offenders(path, args.max_function, args.max_file):
            print(f"{path}:{line}: {message}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
