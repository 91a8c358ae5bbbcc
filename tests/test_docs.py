"""Docs that cannot rot: nothing in the repository speaks of how it was made (work-item numbers,
who asked, private notes) but to its users; every relative link and anchor of README.md and
docs/*.md resolves; the commands they show take the options they are given (the rescore-*
commands, the steps, the tools); the repository paths they name exist; the docs site builds with
`mkdocs build --strict`.

The strings this file searches for are data of these tests (the only place they may appear)."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.cli.test_help import SCRIPTS, option_names

# What the repository must not say, anywhere outside tests/: in file names and in text.
INTERNAL = [
    (re.compile(r"(?<![a-z])issues?[ _-]?#?\d+", re.I), "a work-item number"),
    (re.compile(r"(?<![a-z])work[- _]?items? ?#?\d+", re.I), "a work-item number"),
    (re.compile(r"(?<![a-z])sessions?(?![a-z])", re.I), "'session'"),
    (re.compile(r"(?<![a-z])the lead(?![a-z])|(?<![a-z])lead's(?![a-z])", re.I), "'the lead'"),
    (re.compile(r"(?<![a-z])agents?(?![a-z])", re.I), "'agent'"),
    (re.compile(r"shared/design", re.I), "the private design notes"),
    (re.compile(r"design\s*§", re.I), "a section of the private design notes"),
    (re.compile(r"(?<![\w.~])/work/"), "a path of the machine it was written on"),
]


def internal_hits(text: str) -> list:
    """(what, matched string) for every internal reference in text."""
    return [(what, m.group(0)) for pattern, what in INTERNAL for m in pattern.finditer(text)]


def tracked_files() -> list:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:8192]


@pytest.mark.parametrize("text, expected", [
    ("see issue 16 for the ablation", ["issue 16"]),
    ("as issue #7 asked", ["issue #7"]),
    ("Issues 3 and 5", ["Issues 3"]),
    ("N-best dir   /work/shared/data/x", ["/work/"]),
    ("see network/work/ and ~/work/", []),
    ("tools/ablation_issue16.sh", ["issue16"]),
    ("work item 4", ["work item 4"]),
    ("measured this session", ["session"]),
    ("the lead's run", ["the lead"]),
    ("the issue-4 section; the lead's call", ["issue-4", "the lead"]),
    ("a lead's call", ["lead's"]),
    ("shared by six agents", ["agents"]),
    ("../shared/design.md §3", ["shared/design"]),
    ("(design §7)", ["design §"]),
    ("tissue 5, a leading term, sessional, reagent, design choices, shared/data", []),
])
def test_internal_patterns(text, expected):
    assert [m for _, m in internal_hits(text)] == expected


def test_no_internal_references_in_tracked_files():
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to check")
    faults = []
    for rel in tracked_files():
        if rel.startswith("tests/"):
            continue
        for what, found in internal_hits(rel):
            faults.append(f"{rel}: file name holds {what} ({found!r})")
        path = REPO_ROOT / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        if is_binary(data):
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            for what, found in internal_hits(line):
                faults.append(f"{rel}:{n}: {what} ({found!r}): {line.strip()[:100]}")
    assert not faults, f"{len(faults)} internal references:\n" + "\n".join(faults)


# --- links and anchors ------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(\n])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(markdown: str) -> str:
    """The markdown without fenced code blocks (headings and links there are not ones)."""
    return FENCE.sub("", markdown)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped (but - and _),
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set:
    seen, out = {}, set()
    for m in HEADING.finditer(prose(markdown)):
        a = github_anchor(m.group(2))
        n = seen.get(a, 0)
        out.add(a if n == 0 else f"{a}-{n}")
        seen[a] = n + 1
    return out


def links(markdown: str) -> list:
    return LINK.findall(INLINE_CODE.sub("", prose(markdown)))


def doc_pages() -> list:
    return [REPO_ROOT / "README.md"] + sorted((REPO_ROOT / "docs").glob("*.md"))


def test_anchor_rules():
    assert github_anchor("Tuning: `params.json` and the tuning report") == "tuning-paramsjson-and-the-tuning-report"
    assert github_anchor("Scoring speed against Kaldi's scorer") == "scoring-speed-against-kaldis-scorer"
    assert github_anchor("Checkpoints (`model.pt`, `last.pt`)") == "checkpoints-modelpt-lastpt"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}
    assert links("[x](a.md#b) `[y](c.md)` ![img](img/p.png)\n```\n[z](d.md)\n```\n") == ["a.md#b", "img/p.png"]


def test_every_relative_link_and_anchor_resolves():
    faults = []
    for page in doc_pages():
        text = page.read_text()
        for target in links(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO_ROOT)}: ({target})"
            if not dest.exists():
                faults.append(f"{where}: no file {dest.relative_to(REPO_ROOT) if REPO_ROOT in dest.parents else dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                faults.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(REPO_ROOT)}")
    assert not faults, "\n".join(faults)


# --- page length ----------------------------------------------------------------------------------

PAGE_LINES = 900  # a page longer than this mixes today's figures with their history: trim it


def test_pages_stay_short_enough_to_read():
    """A warning, not a failure (a merge may pass the limit for a while): a docs page of more than
    PAGE_LINES lines has grown a history that belongs in git and CHANGELOG.md."""
    import warnings

    for page in doc_pages():
        n = len(page.read_text().splitlines())
        if n > PAGE_LINES:
            warnings.warn(f"{page.relative_to(REPO_ROOT)}: {n} lines (over {PAGE_LINES}): keep today's results, "
                          "drop superseded runs", UserWarning, stacklevel=1)


# --- the site -----------------------------------------------------------------------------------

def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is the docs extra: pip install -e '.[docs]'")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO_ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    for page in ("index.html", "kaldi.html", "models.html", "formats.html", "evaluation.html", "design.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert (tmp_path / "site" / "img" / "dev_compare.png").is_file()


# --- the commands in the docs use options that exist -------------------------------------------

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
SEPARATORS = {"|", "\\|", "&&", "||", ";"}


def step_options(script: Path) -> set:
    """--options of a Kaldi-style script: the variables of its configuration section."""
    text = script.read_text()
    section = text.split("# Begin configuration section.", 1)[1].split("# End configuration section.", 1)[0]
    names = re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", section, re.M)
    return {"--" + n.replace("_", "-") for n in names}


def click_options(name: str, sub: str = "") -> set:
    module, attr = SCRIPTS[name]
    command = getattr(importlib.import_module(module), attr)
    if sub and hasattr(command, "commands"):
        command = command.commands[sub]
    return option_names(command) | {"--help", "-h", "--version"}


def commands_in(block: str) -> list:
    """(command, subcommand, [--options]) of every rescore command or step in a bash block."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        segments, cur = [], []
        for w in words:
            if w in SEPARATORS:
                segments.append(cur)
                cur = []
            else:
                cur.append(w)
        segments.append(cur)
        for seg in segments:
            for i, w in enumerate(seg):
                base = w.rsplit("/", 1)[-1].rstrip(")`")  # also $(which rescore-train-lm)
                if base in SCRIPTS or re.fullmatch(r"lmrescore_\w+\.sh", base):
                    rest = seg[i + 1:]
                    sub = rest[0] if rest and not rest[0].startswith("-") else ""
                    out.append((base, sub, [r.split("=", 1)[0] for r in rest if r.startswith("--")]))
                    break
    return out


def test_commands_in_the_docs_use_real_options():
    faults, checked = [], 0
    for page in [REPO_ROOT / "README.md"] + sorted((REPO_ROOT / "docs").glob("*.md")):
        for block in BASH_BLOCK.findall(page.read_text()):
            for command, sub, used in commands_in(block):
                base = command.rsplit("/", 1)[-1]
                if base.endswith(".sh"):
                    script = next((p for p in (REPO_ROOT / "recipes" / "steps").rglob(base)), None)
                    if script is None:
                        faults.append(f"{page.name}: no step {base} under recipes/steps")
                        continue
                    known = step_options(script)
                else:
                    known = click_options(base, sub)
                checked += 1
                bad = sorted(set(used) - known)
                if bad:
                    faults.append(f"{page.name}: {base} {sub} has no {', '.join(bad)}")
    assert checked >= 17, f"only {checked} commands found in the docs' bash blocks"
    assert not faults, "\n".join(faults)


TOOL = re.compile(r"(?:python3? -m (tools(?:\.\w+)+)|(?<![\w/.])(tools(?:/\w+)+)\.py)((?:[ \t]+[^\s;|&`]+)*)")


def tool_commands_in(block: str) -> list:
    """(module file, [--options]) of every `python -m tools.X` or `tools/X.py` in a bash block."""
    out = []
    for m in TOOL.finditer(block.replace("\\\n", " ")):
        rel = (m.group(1) or "").replace(".", "/") or m.group(2)
        out.append((rel + ".py", [w.split("=", 1)[0] for w in m.group(3).split() if w.startswith("--")]))
    return out


def tool_options(path: Path) -> set:
    """The --options a tool declares: every '--name' string literal of its file (argparse and click
    alike), and --help."""
    return set(re.findall(r"[\"'](--[a-z][\w-]*)[\"']", path.read_text())) | {"--help"}


def test_tool_rules():
    assert tool_commands_in("python -m tools.bench.bench_io --hyps 10 \\\n  --repeats 3 | tail\n") == [
        ("tools/bench/bench_io.py", ["--hyps", "--repeats"])]
    assert tool_commands_in("nice tools/kaldi/arpa_bigram.py --order=2 x; tools/x.sh --y") == [
        ("tools/kaldi/arpa_bigram.py", ["--order"])]


def code_of(markdown: str) -> list:
    """The bash blocks of a page and its inline code spans (a span may run over a line end)."""
    spans = [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", prose(markdown))]
    return BASH_BLOCK.findall(markdown) + spans


def test_tool_commands_in_the_docs_use_real_options():
    """The measurement and experiment tools the docs run (`python -m tools....`, in a bash block
    or inline) exist and take the options the docs give them."""
    faults, checked = [], 0
    for page in doc_pages():
        for block in code_of(page.read_text()):
            for rel, used in tool_commands_in(block):
                checked += 1
                path = REPO_ROOT / rel
                if not path.is_file():
                    faults.append(f"{page.name}: no tool {rel}")
                    continue
                bad = sorted(set(used) - tool_options(path))
                if bad:
                    faults.append(f"{page.name}: {rel} has no {', '.join(bad)}")
    assert checked >= 20, f"only {checked} tool commands found in the docs"
    assert not faults, "\n".join(faults)


# --- the repository paths the docs name exist ----------------------------------------------------

REPO_PATH = re.compile(r"(?<![\w./$~-])((?:tools|recipes|rescore|tests|docs)/[\w./-]*\w)")


def missing_paths(text: str, page: Path) -> list:
    """The repository paths (tools/..., recipes/..., rescore/..., tests/..., docs/...) a page names
    that exist neither from the repository's root nor from the page's folder; paths with a JOB or
    a glob stand for many and are left out."""
    out = []
    for m in REPO_PATH.finditer(text):
        rel = m.group(1)
        if "JOB" in rel or "*" in rel:
            continue
        if not ((REPO_ROOT / rel).exists() or (page.parent / rel).exists()):
            out.append(rel)
    return out


def test_path_rules():
    page = REPO_ROOT / "docs" / "benchmarks.md"
    assert missing_paths("`tools/bench/bench_io.py` and tests/nbest/test_lattice.py", page) == []
    text = "pytest tests/test_lattice.py; exp/tools/x.py; archives.JOB"
    assert missing_paths(text, page) == ["tests/test_lattice.py"]


def test_every_repository_path_in_the_docs_exists():
    faults = []
    for page in doc_pages() + sorted(REPO_ROOT.glob("recipes/**/README.md")):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            faults += [f"{page.relative_to(REPO_ROOT)}:{n}: no {rel}" for rel in missing_paths(line, page)]
    assert not faults, "\n".join(faults)


# --- one way to put the rescore-* commands on a Kaldi recipe's PATH ----------------------------

PATH_LINE = "export PATH=$PATH:$HOME/rescore/.venv/bin"
PAGES_WITH_PATH_LINE = ("README.md", "docs/kaldi-quickstart.md", "docs/getting-started.md", "recipes/README.md")
NOT_ACTIVATING = re.compile(r"(rather than|instead of|not) activating", re.I)
PREPENDS_RESCORE = re.compile(r"export PATH=\S*rescore\S*bin:\$PATH")


def path_sh_advice_faults(rel: str, text: str) -> list:
    """Where a paragraph about path.sh advises activating an environment there, or puts rescore's
    bin before the PATH it had."""
    faults = []
    for para in re.split(r"\n[ \t#]*\n", text):
        if "path.sh" not in para:
            continue
        if re.search(r"activat", para, re.I) and not NOT_ACTIVATING.search(para):
            faults.append(f"{rel}: activates an environment in path.sh: {para.strip()[:160]!r}")
        if PREPENDS_RESCORE.search(para):
            faults.append(f"{rel}: puts rescore's bin before PATH: {para.strip()[:160]!r}")
    return faults


@pytest.mark.parametrize("text, n_faults", [
    ("add `. ~/rescore/.venv/bin/activate` to the recipe's path.sh", 1),
    ("rescore's environment activated in `path.sh`", 1),
    ("Add the bin to PATH in path.sh rather than activating the environment there.", 0),
    ("echo 'export PATH=$HOME/rescore/.venv/bin:$PATH' >> path.sh", 1),
    ("echo 'export PATH=$PATH:$HOME/rescore/.venv/bin' >> path.sh", 0),
    ("python3 -m venv .venv && . .venv/bin/activate   # an interactive shell", 0),
])
def test_path_sh_advice_rules(text, n_faults):
    assert len(path_sh_advice_faults("page", text)) == n_faults


def test_one_way_to_put_the_commands_on_a_kaldi_recipes_path():
    """Every page and script that says how a Kaldi recipe finds the rescore-* commands says the same:
    the environment's bin at the end of PATH in path.sh (activating it there would put its python3
    before Kaldi's), and the pages that show the line show the same line."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to check")
    faults = []
    for rel in tracked_files():
        if rel.startswith("tests/") or rel == "CHANGELOG.md" or not rel.endswith((".md", ".sh", ".py", ".cfg")):
            continue
        path = REPO_ROOT / rel
        if path.is_file():
            faults += path_sh_advice_faults(rel, path.read_text(errors="replace"))
    for rel in PAGES_WITH_PATH_LINE:
        if PATH_LINE not in (REPO_ROOT / rel).read_text():
            faults.append(f"{rel}: does not show the path.sh line {PATH_LINE!r}")
    assert not faults, "\n".join(faults)


# --- the README names every command ------------------------------------------------------------

def console_scripts() -> list:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    return [line.split("=", 1)[0].strip() for line in cfg["options.entry_points"]["console_scripts"].splitlines()
            if "=" in line]


def test_readme_lists_every_command():
    """The README's list of commands names every console_script setup.cfg installs."""
    scripts = console_scripts()
    assert "rescore-nbest" in scripts and "rescore-import-lm" in scripts
    listing = [p for p in (REPO_ROOT / "README.md").read_text().split("\n\n") if "Every command prints" in p]
    assert len(listing) == 1, "README.md: no paragraph 'Every command prints `--help` ...'"
    named = set(re.findall(r"`(rescore-[\w-]+)`", listing[0]))
    assert not set(scripts) - named, f"README.md's command list lacks {sorted(set(scripts) - named)}"
    extra = sorted(named - set(scripts))
    assert not extra, f"README.md lists commands setup.cfg does not install: {extra}"


# --- the mini recipe installs as the README says ------------------------------------------------

def shell_commands(line: str) -> list:
    """The commands of a shell line: split at &&, comments and surrounding blanks dropped."""
    return [c.strip() for c in re.sub(r"\s#.*$", "", line).split("&&") if c.strip()]


def test_mini_recipe_readme_installs_as_the_readme():
    """recipes/mini/README.md runs the README's install line for the mini recipe (apt's index
    updated first, torch's CPU build before the package), command for command."""
    readme = (REPO_ROOT / "README.md").read_text()
    line = [ln for block in BASH_BLOCK.findall(readme) for ln in block.splitlines() if "recipes/mini/run.sh" in ln]
    assert len(line) == 1, "README.md: expected one line that installs and runs the mini recipe"
    wanted = shell_commands(line[0])
    assert "apt-get update -qq" in wanted and any("download.pytorch.org/whl/cpu" in c for c in wanted)
    block = BASH_BLOCK.findall((REPO_ROOT / "recipes" / "mini" / "README.md").read_text())[0]
    have = [c for ln in block.splitlines() for c in shell_commands(ln)]
    missing = [c for c in wanted if c not in have]
    assert not missing, f"recipes/mini/README.md does not run the README's {missing}"
    assert have.index("apt-get update -qq") < have.index(next(c for c in have if c.startswith("apt-get install")))
