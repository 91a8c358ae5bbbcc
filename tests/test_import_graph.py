"""The package's import graph, read from the source (module-level imports and imports inside
functions alike): no circles, and each layer imports only its own and the layers below it.

Layers, bottom up (LAYERS): the top-level modules (errors, progress, bulk, vocab, settings), io/,
formats/ (the N-best formats: readers, write-back, their options; they may not reach nbest/),
metrics/, models/ (nn.Modules and checkpoints), nbest/, engine/, train/, asr/ (the decoders and the
TTS), jobs/ (each command's work, asr/'s too), integrations/ (the engine inside other toolkits'
decoding), cli/. Every module of the package is in one. An import inside a function is only there
to keep a command's start-up light.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "rescore"
BASE = {"rescore", "rescore.errors", "rescore.progress", "rescore.bulk", "rescore.vocab", "rescore.settings"}
# the packages above the top-level modules, bottom up: a module imports from its own layer and below
LAYERS = ("io", "formats", "metrics", "models", "nbest", "engine", "train", "asr", "jobs", "integrations", "cli")

def modules() -> Dict[str, Path]:
    """Dotted name -> file of every module of the package (a package by its __init__.py)."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imported_names(tree: ast.AST, name: str, is_package: bool) -> Iterator[Tuple[str, int]]:
    """(dotted target, line) of every import in ``tree``, at any depth; ``from X import y`` gives
    X and X.y (y may be a module); a relative import is resolved against ``name``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                up = parts[:len(parts) - node.level + (1 if is_package else 0)]
                base = ".".join(up + ([base] if base else []))
            yield base, node.lineno
            for a in node.names:
                yield f"{base}.{a.name}", node.lineno


def graph() -> Dict[str, Dict[str, int]]:
    """module -> {imported module of the package: line of the import}."""
    mods = modules()
    edges: Dict[str, Dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for target, line in imported_names(tree, name, path.name == "__init__.py"):
            while target and target not in mods:  # X.y where y is a name, not a module: X
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(name, {}).setdefault(target, line)
    return edges


def circles(edges: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer(module: str) -> int:
    """The layer of a module of the package: 0 for the top-level modules, then 1 + its package's
    place in LAYERS; a ValueError for a module in no layer (a new package: give it its place)."""
    if module in BASE:
        return 0
    for i, p in enumerate(LAYERS, 1):
        if in_package(module, f"rescore.{p}"):
            return i
    raise ValueError(f"{module} is in no layer of LAYERS")


def upward(edges: Dict[str, Dict[str, int]]) -> List[Tuple[str, str, int]]:
    """(module, imported module, line) of each import that runs above the module's layer."""
    return [(mod, t, line) for mod, targets in sorted(edges.items()) for t, line in sorted(targets.items())
            if layer(t) > layer(mod)]


def test_the_graph_is_read():
    edges = graph()
    assert "rescore.engine.score" in edges["rescore.cli.nbest"] or any(
        "rescore.engine.score" in edges.get(m, {}) for m in edges if m.startswith("rescore.jobs"))
    # an import inside a function counts
    assert "rescore.engine.score" in edges["rescore.jobs.scoring"]


def test_no_import_circles():
    assert circles(graph()) == []


def test_circles_are_found():
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_upward_imports():
    found = [f"{m} -> {t} (line {line})" for m, t, line in upward(graph())]
    assert found == [], "imports above the importing module's layer:\n" + "\n".join(found)


def test_upward_imports_are_found():
    edges = {"rescore.models.lm": {"rescore.engine.kernels.native": 3},
             "rescore.io.kaldi": {"rescore.nbest.sets": 5, "rescore.errors": 1},
             "rescore.metrics.wer": {"rescore.io.lines": 2, "rescore.nbest.checks": 9},
             "rescore.engine.score": {"rescore.models.lm": 4, "rescore.train.data": 6},
             "rescore.vocab": {"rescore.io.symbols": 7},
             "rescore.asr.whisper": {"rescore.jobs.nbest": 8, "rescore.engine.score": 2},
             "rescore.cli.nbest": {"rescore.jobs.nbest": 1}}
    assert upward(edges) == [("rescore.asr.whisper", "rescore.jobs.nbest", 8),
                             ("rescore.engine.score", "rescore.train.data", 6),
                             ("rescore.io.kaldi", "rescore.nbest.sets", 5),
                             ("rescore.metrics.wer", "rescore.nbest.checks", 9),
                             ("rescore.models.lm", "rescore.engine.kernels.native", 3),
                             ("rescore.vocab", "rescore.io.symbols", 7)]


def test_every_module_is_in_a_layer():
    """A new package gets its place in LAYERS (and the module docstring) rather than no rule."""
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} == set(LAYERS)
    for name in modules():
        layer(name)


def test_base_modules_are_torch_free_at_import():
    """The top-level modules, io/, formats/ and metrics/ import no torch at module level (the
    commands' start-up and --help stay light)."""
    for name, path in modules().items():
        if not (name in BASE or any(in_package(name, f"rescore.{p}") for p in ("io", "formats", "metrics"))):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names] + \
                [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not any(x == "torch" or x.startswith("torch.") for x in names), name


def test_no_imports_inside_functions_where_torch_is_imported_anyway():
    """An import inside a function is there to keep a command's start-up light; in a module that
    imports torch at its top it spares nothing, and would only hide the module's dependencies."""
    found = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if not any((isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names))
                   or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch") for n in top):
            continue
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for s in ast.walk(f):
                    if isinstance(s, ast.ImportFrom) and (s.module or "").startswith("rescore"):
                        found.append(f"{name}:{s.lineno}: from {s.module} import ...")
    assert found == [], "\n".join(found)
