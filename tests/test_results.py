"""One set of numbers: docs/results.json holds every headline figure (value, unit, command,
machine, day, same-run baseline); the README's results tables and docs/benchmarks.md's summary are
generated from it (python -m tools.results), and no page quotes a headline figure the file lacks.

A headline figure is, concretely:
  - every number in a generated region (checked by regenerating the region: it must be unchanged);
  - in README.md and every docs/*.md page but benchmarks.md, outside fenced code blocks: every
    speed ratio written as a decimal number followed by "x" (21.8x, 3.46x) and every WER written
    as a number with two decimals and a percent sign (15.48 %);
  - in docs/benchmarks.md, whose tables are the measurements behind the file: every such ratio or
    WER set in bold (**...**), the page's way of marking its headline figures.
A quoted figure is in the file when it equals a number in it, or that number rounded to the
quoted decimals (9.45 quoted as 9.5x); a quoted ratio must be one of the file's ratios (a number
under a key that says ratio, or under a key with "_over_" in it), not any number with its digits."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO_ROOT

RESULTS = REPO_ROOT / "docs" / "results.json"
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)x(?![\w])")
WER = re.compile(r"(?<![\w.])(\d{1,2}\.\d{2}) ?%")
BOLD = re.compile(r"\*\*(.+?)\*\*")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
REGION = re.compile(r"<!-- results:[\w-]+ begin.*?<!-- results:[\w-]+ end -->", re.S)


def load_tool():
    from tools import results

    return results


def numbers(obj, ratios_only: bool = False, key: str = "") -> set:
    """Every number anywhere in a JSON value; ``ratios_only``: only the ratios, the numbers under a
    key (or inside a dict under a key) with "ratio" or "_over_" in its name."""
    is_ratio = "ratio" in key or "_over_" in key
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, (int, float)):
        return {float(obj)} if is_ratio or not ratios_only else set()
    if isinstance(obj, dict):
        return set().union(*(numbers(v, ratios_only, key if is_ratio else k) for k, v in obj.items()))
    if isinstance(obj, list):
        return set().union(*(numbers(v, ratios_only, key) for v in obj))
    return set()


def ratios(obj) -> set:
    return numbers(obj, ratios_only=True)


def in_file(quoted: str, known: set) -> bool:
    q = float(quoted)
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return any(abs(k - q) < 1e-9 or abs(round(k, decimals) - q) < 1e-9 for k in known)


def headline_figures(text: str, page: str) -> list:
    """(line number, figure) of every headline ratio or WER the page quotes outside generated
    regions and code blocks."""
    blank = lambda m: "\n" * m.group(0).count("\n")  # keep line numbers
    text = REGION.sub(blank, FENCE.sub(blank, text))
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        spans = [m.group(1) for m in BOLD.finditer(line)] if page == "docs/benchmarks.md" else [line]
        for span in spans:
            found += [(n, m.group(1) + "x") for m in RATIO.finditer(span)]
            found += [(n, m.group(1) + " %") for m in WER.finditer(span)]
    return found


def unknown_figures(text: str, page: str, known: set, known_ratios: set = None) -> list:
    """The headline figures of a page that are not in the file: a WER among ``known`` (every
    number of the file), a ratio among ``known_ratios`` (its ratios; ``known`` where None)."""
    return [f"{page}:{n}: {fig}" for n, fig in headline_figures(text, page)
            if not in_file(fig.rstrip("x %"), known if known_ratios is None or not fig.endswith("x")
                           else known_ratios)]


def pages() -> list:
    return ["README.md"] + sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))


def test_every_figure_says_what_how_where_when_and_against_what():
    results = json.loads(RESULTS.read_text())
    faults = []
    for f in results["figures"]:
        for key in ("id", "what", "value", "unit", "command", "machine", "date", "section"):
            if f.get(key) in (None, ""):
                faults.append(f"{f.get('id')}: no {key}")
        if f.get("machine") not in results["machines"]:
            faults.append(f"{f.get('id')}: machine {f.get('machine')!r} is not described under 'machines'")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(f.get("date"))):
            faults.append(f"{f.get('id')}: date {f.get('date')!r} is not YYYY-MM-DD")
        b = f.get("baseline")
        if f.get("id") != "heldout-first-pass" and not (b and b.get("what") and b.get("value") is not None):
            faults.append(f"{f.get('id')}: no baseline of the same run (what, value)")
    ids = [f["id"] for f in results["figures"]]
    assert len(ids) == len(set(ids)), "figure ids repeat"
    assert not faults, "\n".join(faults)


def test_every_figure_links_to_a_section_of_the_benchmarks_page():
    from tests.test_docs import anchors

    have = anchors((REPO_ROOT / "docs" / "benchmarks.md").read_text())
    missing = [f"{f['id']}: #{f['section']}" for f in json.loads(RESULTS.read_text())["figures"]
               if f["section"] not in have]
    assert not missing, "no such heading in docs/benchmarks.md: " + ", ".join(missing)


def test_generated_regions_are_up_to_date():
    tool = load_tool()
    results = tool.load(RESULTS)
    for page in sorted({p for p, _ in tool.REGIONS}):
        text = (REPO_ROOT / page).read_text()
        assert not tool.missing_regions(text, page), f"{page}: generated region markers missing"
        assert tool.render(text, page, results) == text, \
            f"{page}: a generated table differs from docs/results.json (run python -m tools.results)"


def test_no_page_quotes_a_headline_figure_missing_from_the_results_file():
    results = json.loads(RESULTS.read_text())
    known, known_ratios = numbers(results), ratios(results)
    faults = []
    for page in pages():
        faults += unknown_figures((REPO_ROOT / page).read_text(), page, known, known_ratios)
    assert not faults, ("headline figures not in docs/results.json (add the measurement there, with its "
                        "command and baseline, or quote one that is):\n" + "\n".join(faults))


@pytest.mark.parametrize("text, page, expected", [
    ("rescore is **21.8x** faster; 15.48 % WER", "README.md", ["21.8x", "15.48 %"]),
    ("```\n9.9x inside code\n```\nout 3.46x", "docs/kaldi.md", ["3.46x"]),
    ("a table | 12.34 | 1.5x in benchmarks, not bold", "docs/benchmarks.md", []),
    ("bold in benchmarks: **3.88x less CPU**, **15.59 %**", "docs/benchmarks.md", ["3.88x", "15.59 %"]),
    ("a 2x256 LSTM, 0x10, v1.2x, -21.7 % relative", "README.md", []),
])
def test_what_counts_as_a_headline_figure(text, page, expected):
    assert [fig for _, fig in headline_figures(text, page)] == expected


def test_a_ratio_must_be_one_of_the_files_ratios():
    results = json.loads(RESULTS.read_text())
    known, known_ratios = numbers(results), ratios(results)
    assert 24.5 in known and 24.5 not in known_ratios  # a CPU-s figure, not a ratio
    text = "Scoring takes 24.5x less CPU than Kaldi's scorer; 21.8x on an AVX2 EPYC.\n"
    assert unknown_figures(text, "docs/models.md", known, known_ratios) == ["docs/models.md:1: 24.5x"]
    assert {1.02, 1.34, 5.54} <= known_ratios  # in a dict of ratios, under an "_over_" key, under "ratio"


def test_an_edited_readme_figure_is_caught():
    known = numbers(json.loads(RESULTS.read_text()))
    text = (REPO_ROOT / "README.md").read_text()
    assert not unknown_figures(text, "README.md", known)
    edited = text.replace("21.8x", "23.8x", 1) + "\nIt scores 5.7x faster at 14.99 % WER.\n"
    assert unknown_figures(edited, "README.md", known) == [
        f"README.md:{len(edited.splitlines())}: 5.7x", f"README.md:{len(edited.splitlines())}: 14.99 %"]
    tool = load_tool()
    assert tool.render(edited, "README.md", tool.load(RESULTS)) != edited  # the edited table is rewritten


# --- one dev WER per model -----------------------------------------------------------------------

def number_on(text: str, value: float) -> list:
    """Line numbers where value is written with two decimals (15.59: in a table, in prose, with or
    without %), outside fenced code blocks."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    pattern = re.compile(r"(?<![\w.])" + re.escape(f"{value:.2f}") + r"(?![\d])")
    return [n for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_one_dev_wer_of_the_recommended_model_on_every_page():
    """The recommended model has one dev WER, results.json's: no page but docs/benchmarks.md (where
    each comparison's same-run retraining is its baseline, said as such in one paragraph) quotes a
    retraining's WER, and the pages that give its dev WER give that one."""
    results = json.loads(RESULTS.read_text())
    rec = results["recommended_model"]
    figs = {f["id"]: f for f in results["figures"]}
    canonical = figs[rec["dev_wer_figure"]]["value"]
    faults = []
    for r in rec["retrained"]:
        f = figs[r["figure"]]
        if r["value"] not in (f["value"], f.get("baseline", {}).get("value")):
            faults.append(f"recommended_model: {r['value']} is not the value or baseline of {r['figure']}")
        if r["value"] == canonical:
            faults.append(f"recommended_model: the retraining {r['figure']} has the dev WER itself")
        for page in pages():
            if page == "docs/benchmarks.md":
                continue
            for n in number_on((REPO_ROOT / page).read_text(), r["value"]):
                faults.append(f"{page}:{n}: quotes {r['value']:.2f}, a retraining of the recommended model "
                              f"(its dev WER is {canonical:.2f} %; a comparison gives its same-run difference)")
    bench = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    explained = [p for p in bench.split("\n\n") if f"{canonical:.2f} %" in p
                 and all(f"{r['value']:.2f} %" in p for r in rec["retrained"])]
    if not explained:
        faults.append("docs/benchmarks.md: no paragraph names the dev WER and every retraining's")
    for page in ("README.md", "docs/models.md", "docs/hf.md"):
        if not number_on((REPO_ROOT / page).read_text(), canonical):
            faults.append(f"{page}: does not give the recommended model's dev WER {canonical:.2f}")
    assert not faults, "\n".join(faults)


def test_a_retraining_quoted_outside_the_benchmarks_is_caught():
    assert number_on("| ours | 15.59 | 46.5 |\nours (15.63 %) against it\n```\n15.59\n```\n", 15.59) == [1]
    assert number_on("ours (15.63 %) against it; 115.63, 15.631", 15.63) == [1]
    assert number_on("115.63 and 15.631", 15.63) == []
