"""The ablation table: every system tuned by two-fold cross-validation on the dev
N-best dir, compared by a paired bootstrap, a difference whose CI covers 0 marked as none.

    python -m tools.experiments.ablation --nbest-dir D/nbest --data-dir D/data --train-text T --out-dir OUT \\
        --system first-pass=first-pass --system lstm=exp/lstm/lmwt.nn \\
        --system lstm-ptrmem=exp/ptr/lmwt.nn --pair lstm-ptrmem:lstm

Per system (``--system NAME=COSTS``; COSTS is ``first-pass`` for no NN LM, a lmwt.nn of the
N-best dir, or ``A.nn+B.nn`` for two models interpolated, their shares swept over --mixes):
rescore-tune --cross-validate (rescore.jobs.tune.TuneJob): tune on half 1 of the conversations,
decode half 2 with it, and the other way round; the pooled 1-best goes to OUT/NAME.txt. Then
rescore.metrics.compare_systems: every system against the first (the baseline) and each
``--pair A:B`` (A against B), overall and, with --train-text, per rare-word bucket. The bootstrap
resamples whole conversations (the halves' unit) when the data dir groups utterances.

Writes OUT/ablation.md (the tables), OUT/ablation.json (everything: each system's folds and
settings, the compare_systems results) and OUT/NAME.txt; prints the tables. Nothing is written
before every system has been tuned.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import click


from rescore.cli.common import command, parse_grid, setup_logging, verbose_option  # noqa: E402
from rescore.errors import OptionError, RescoreError  # noqa: E402

log = logging.getLogger("ablation")
FIRST_PASS = "first-pass"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # a system's name is a file name in OUT


def _tune_defaults() -> Dict[str, str]:
    """rescore-tune's grid defaults, so that the two tune the same grid unless told otherwise."""
    from rescore.cli.tune import main as tune_main

    return {p.name: p.default for p in tune_main.params if p.name in ("weights", "inv_acwts", "wips", "mixes")}


TUNE = _tune_defaults()


def parse_system(spec: str) -> Tuple[str, List[str]]:
    """'NAME=COSTS' -> (NAME, [lmwt.nn paths]); COSTS 'first-pass' gives no paths, 'A+B' two."""
    if "=" not in spec:
        raise OptionError("NAME=COSTS (COSTS: first-pass, a lmwt.nn, or A.nn+B.nn)", option="--system", got=spec)
    name, costs = spec.split("=", 1)
    if not NAME_RE.match(name):
        raise OptionError("a NAME of letters, digits and ._+- (it names OUT/NAME.txt)", option="--system", got=spec)
    if not costs:
        raise OptionError("NAME=COSTS with COSTS given (first-pass, or a lmwt.nn path)", option="--system", got=spec)
    return name, [] if costs == FIRST_PASS else costs.split("+")


def parse_pair(spec: str, names: Sequence[str]) -> Tuple[str, str]:
    """'A:B' -> (A, B), both names of --system, A != B."""
    parts = spec.split(":")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise OptionError("A:B with two different system names", option="--pair", got=spec)
    for p in parts:
        if p not in names:
            raise OptionError(f"names of --system ({', '.join(names)})", option="--pair", got=spec)
    return parts[0], parts[1]


def tune_job(nbest_dir: str, data_dir: str, words_txt: Optional[str], costs: List[str], grids: dict,
             allow_missing: bool = False):
    """The cross-validating TuneJob of one system (checked when built, before any work); with
    several cost files, their shares are swept over grids["mixes"] as rescore-tune --mixes does."""
    from rescore.nbest.combine import mix_grid
    from rescore.jobs.tune import TuneJob

    return TuneJob(nbest_dir=nbest_dir, data_dir=data_dir, words_txt=words_txt,
                   nn_costs=tuple(costs),
                   weights=parse_grid(grids["weights"], "--weights"),
                   inv_acwts=parse_grid(grids["inv_acwts"], "--inv-acwts"),
                   wips=parse_grid(grids["wips"], "--wips"),
                   mixes=mix_grid(parse_grid(grids["mixes"], "--mixes"), len(costs)) if len(costs) > 1 else None,
                   cross_validate=True, allow_missing=allow_missing)


def covers_zero(ci: Optional[Sequence[float]]) -> bool:
    """A difference whose CI covers 0 is no difference."""
    return ci is not None and ci[0] <= 0.0 <= ci[1]


def run_ablation(*, nbest_dir: str, data_dir: str, systems: Sequence[Tuple[str, List[str]]],
                 pairs: Sequence[Tuple[str, str]] = (), grids: Optional[dict] = None,
                 words_txt: Optional[str] = None, train_text: Optional[str] = None, num_buckets: int = 10,
                 draws: int = 1000, seed: int = 0, confidence: float = 0.95, allow_missing: bool = False,
                 out_dir: Optional[str] = None) -> dict:
    """Cross-validated tuning of every system and the comparisons (see the module doc); out_dir
    (where write_outputs will write) is checked before any work: no output is an input. Returns
    {"systems": [{"name", "costs", "pooled_wer", "half_wer": {"1", "2"} (each half under the
    other's setting), "settings": {"1", "2"} (tuned on that half), "pooled_first_pass_wer",
    "cv": combine.cross_validate's result}], "baseline": compare_systems of all (first =
    baseline), "pairs": [{"a", "b", "comparison": compare_systems of (b, a)}], "hyps": {name: utt
    -> words}, "bootstrap_unit"}."""
    from rescore.metrics import compare_systems
    from rescore.nbest.sets import load_nbest_dir
    from rescore.jobs.tune import tune_nbest_dir
    from rescore.vocab import count_words, read_sentences

    grids = {**TUNE, **(grids or {})}
    names = [n for n, _ in systems]
    if not systems:
        raise OptionError("at least one --system", option="--system", got="none")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise OptionError("a different NAME for each system", option="--system", got=dup[0])
    for _, costs in systems:
        for p in costs:
            if not Path(p).is_file():
                raise RescoreError("a lmwt.nn file (NN LM costs of the N-best dir)", path=p, got="no such file")
    jobs = [tune_job(nbest_dir, data_dir, words_txt, costs, grids, allow_missing) for _, costs in systems]
    if out_dir is not None:
        from rescore.io.outdir import check_not_input

        inputs = [p for j in jobs for p in j.inputs()] + ([Path(train_text)] if train_text else [])
        for f in output_files(out_dir, names):
            check_not_input(f, inputs, "--out-dir")
    nbest = load_nbest_dir(nbest_dir, data_dir, words_txt, allow_missing=allow_missing)
    if nbest.refs is None:
        raise RescoreError("references ('text' in the data dir)", path=data_dir)
    train_counts = count_words(read_sentences(train_text)) if train_text else None

    rows, hyps = [], {}
    for (name, costs), job in zip(systems, jobs):
        log.info("system %s: cross-validated tuning (%s)", name, " + ".join(costs) or "no NN LM")
        cv = tune_nbest_dir(job)
        f1, f2 = cv["folds"]  # f1: tuned on half 1, reported on half 2
        hyps[name] = {u.id: u.hyps[cv["pooled_choice"][u.id]].words for u in nbest.utterances()}
        rows.append({"name": name, "costs": costs or FIRST_PASS, "pooled_wer": cv["pooled_wer"],
                     "half_wer": {"1": f2["held_out_wer"], "2": f1["held_out_wer"]},
                     "settings": {"1": f1["best"], "2": f2["best"]},
                     "pooled_first_pass_wer": cv["pooled_first_pass_wer"],
                     "cv": {k: v for k, v in cv.items() if k != "pooled_choice"}})
        for f in cv["folds"]:
            for k in [k for k in f if k.endswith("_choice")]:
                del f[k]
    groups = None
    if nbest.grouping != "utterance":
        groups = {u.id: c.id for c in nbest.conversations for u in c.utterances}
    opts = dict(train_counts=train_counts, num_buckets=num_buckets, groups=groups, grouping=nbest.grouping,
                draws=draws, seed=seed, confidence=confidence)
    base = compare_systems(nbest.refs, hyps, **opts).as_dict()
    pair_rows = [{"a": a, "b": b,
                  "comparison": compare_systems(nbest.refs, {b: hyps[b], a: hyps[a]}, **opts).as_dict()}
                 for a, b in pairs]
    return {"nbest_dir": nbest_dir, "data_dir": data_dir, "train_text": train_text, "grids": grids,
            "num_utts": nbest.num_utts, "num_conversations": len(nbest.conversations),
            "grouping": nbest.grouping, "systems": rows, "baseline": base, "pairs": pair_rows, "hyps": hyps}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def _diff_cell(d: dict, conf: str) -> str:
    """'-1.23 [-1.80, -0.70]', with 'no difference' when the CI covers 0."""
    if d.get("wer_diff") is None:
        return "-"
    cell = f"{d['wer_diff']:+.2f}"
    if d.get("ci") is not None:
        cell += f" [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
        if covers_zero(d["ci"]):
            cell += " no difference"
    return cell


def _p(p: Optional[float]) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def verdict(cmp: dict, a: str, b: str) -> str:
    """One sentence: is a better than b, significantly (CI not covering 0), overall and on which
    rare-word buckets."""
    d = cmp["differences"][0]
    if d["ci"] is None:
        return f"{a} against {b}: no bootstrap, no verdict."

    def word(ci):
        return "no difference" if covers_zero(ci) else ("significantly better" if ci[1] < 0 else "significantly worse")

    better = [r["bucket"] for r in cmp.get("buckets") or [] if r["differences"][a]["ci"]
              and r["differences"][a]["ci"][1] < 0]
    worse = [r["bucket"] for r in cmp.get("buckets") or [] if r["differences"][a]["ci"]
             and r["differences"][a]["ci"][0] > 0]
    line = f"Verdict: {a} against {b}: overall {word(d['ci'])}"
    if cmp.get("buckets"):
        line += (f"; significantly better on buckets: {', '.join(map(str, better)) or 'none'}; significantly "
                 f"worse on buckets: {', '.join(map(str, worse)) or 'none'} (0 = rarest)")
    return line + "."


def format_tables(res: dict) -> str:
    """The markdown of the ablation: systems against the baseline, the pairs (overall and per
    rare-word bucket), the tuned settings, how the CIs were drawn."""
    from rescore.metrics import describe_bootstrap
    from rescore.jobs.tune import format_setting

    base = res["baseline"]
    boot = base["bootstrap"]
    conf = f"{100 * boot['confidence']:g} %" if boot else "95 %"
    diffs = {d["system"]: d for d in base["differences"]}
    name0 = base["baseline"]
    folds = res["systems"][0]["cv"]["folds"]
    out = [f"Two-fold cross-validated tuning on {res['nbest_dir']} ({res['num_utts']} utterances, "
           f"{res['num_conversations']} conversations by {res['grouping']}; half 1 = the first "
           f"{folds[0]['dev_conversations']} conversations in the N-best dir's order, half 2 = the other "
           f"{folds[1]['dev_conversations']}): each half is decoded with the setting tuned on the other half; "
           f"pooled = all utterances so decoded.", "",
           f"| system | pooled WER % | half 1 (tuned on 2) | half 2 (tuned on 1) | diff vs {name0} [{conf} CI] "
           f"| p | rel. % |", "|---|---:|---:|---:|---|---:|---:|"]
    for s in res["systems"]:
        d = diffs.get(s["name"])
        cells = [s["name"], _pct(s["pooled_wer"]), _pct(s["half_wer"]["1"]), _pct(s["half_wer"]["2"])]
        if d is None:
            cells += ["(baseline)", "", ""]
        else:
            rel = "-" if d["relative_change"] is None else f"{d['relative_change']:+.1f}"
            cells += [_diff_cell(d, conf), _p(d["p_value"]), rel]
        out.append("| " + " | ".join(cells) + " |")
    if len(res["systems"]) > 1:
        best = min(res["systems"][1:], key=lambda s: s["pooled_wer"])
        d = diffs[best["name"]]
        rel = "-" if d["relative_change"] is None else f"{d['relative_change']:+.1f} %"
        out += ["", f"Best system: {best['name']}, pooled WER {_pct(best['pooled_wer'])} %, {rel} relative to "
                    f"{name0}; diff in points [{conf} CI]: {_diff_cell(d, conf)}."]
    out += ["", "Tuned settings (each applied to the other half):"]
    for s in res["systems"]:
        out.append(f"- {s['name']}: tuned on half 1: {format_setting(s['settings']['1'])}; "
                   f"tuned on half 2: {format_setting(s['settings']['2'])}")
    for p in res["pairs"]:
        c = p["comparison"]
        a, b = p["a"], p["b"]
        d = c["differences"][0]
        sa, sb = (next(x for x in c["systems"] if x["name"] == n) for n in (a, b))
        out += ["", f"{a} against {b} (diff = WER({a}) - WER({b}); < 0: {a} makes fewer errors):", "",
                f"| scope | ref tokens | WER {b} % | WER {a} % | diff [{conf} CI] | p | rel. % |",
                "|---|---:|---:|---:|---|---:|---:|"]
        rel = "-" if d["relative_change"] is None else f"{d['relative_change']:+.1f}"
        out.append(f"| all | {c['ref_words']} | {_pct(sb['wer'])} | {_pct(sa['wer'])} | {_diff_cell(d, conf)} "
                   f"| {_p(d['p_value'])} | {rel} |")
        for r in c.get("buckets") or []:
            rb, ra, dd = r["systems"][b]["wer"], r["systems"][a]["wer"], r["differences"][a]
            rng = r["train_count_range"]
            scope = f"bucket {r['bucket']} (train count {rng[0]}-{rng[1]})" if rng else f"bucket {r['bucket']}"
            rel = f"{100 * (ra - rb) / rb:+.1f}" if rb else "-"
            out.append(f"| {scope} | {r['ref_tokens']} | {rb:.2f} | {ra:.2f} | {_diff_cell(dd, conf)} "
                       f"| {_p(dd['p_value'])} | {rel} |")
        out += ["", verdict(c, a, b)]
    out += ["", describe_bootstrap(boot, "the reference system") + "; 'no difference': the CI covers 0."]
    return "\n".join(out)


def output_files(out_dir: str, names: Sequence[str]) -> List[Path]:
    """What write_outputs writes: OUT/NAME.txt per system, OUT/ablation.json, OUT/ablation.md."""
    out = Path(out_dir)
    return [out / f"{n}.txt" for n in names] + [out / "ablation.json", out / "ablation.md"]


def write_outputs(out_dir: str, res: dict) -> str:
    """OUT/NAME.txt per system, OUT/ablation.json and OUT/ablation.md (atomic writes); returns the markdown."""
    from rescore.io.files import atomic_output, write_json

    out = Path(out_dir)
    for name, h in res["hyps"].items():
        with atomic_output(out / f"{name}.txt") as f:
            for u, words in h.items():
                f.write(" ".join([u, *words]) + "\n")
    md = format_tables(res)
    write_json(out / "ablation.json", {k: v for k, v in res.items() if k != "hyps"})
    with atomic_output(out / "ablation.md") as f:
        f.write(md + "\n")
    return md


@command()
@click.option("--nbest-dir", required=True, type=click.Path(file_okay=False), help="The dev N-best dir.")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="Its data dir (text = references; segments/utt2spk = conversations).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table for 'words' ids (found beside the N-best dir when not given).")
@click.option("--train-text", type=click.Path(dir_okay=False), help="LM training text: the pairs per rare-word bucket.")
@click.option("--buckets", "num_buckets", type=click.IntRange(min=1), default=10, help="Number of rare-word buckets.")
@click.option("--system", "systems", multiple=True, required=True, metavar="NAME=COSTS",
              help="A system (repeat; the first is the baseline): COSTS is 'first-pass' (no NN LM), a lmwt.nn of the "
                   "N-best dir, or A.nn+B.nn (two models, their mix tuned).")
@click.option("--pair", "pairs", multiple=True, metavar="A:B",
              help="Also compare system A with system B (e.g. lstm-ptrmem:lstm), overall and per bucket.")
@click.option("--out-dir", required=True, type=click.Path(file_okay=False),
              help="Where NAME.txt, ablation.md and ablation.json go.")
@click.option("--weights", default=TUNE["weights"], help="NN LM weights (as rescore-tune).")
@click.option("--inv-acwts", default=TUNE["inv_acwts"], help="Inverse acoustic scales (as rescore-tune).")
@click.option("--wips", default=TUNE["wips"], help="Word insertion penalties (as rescore-tune).")
@click.option("--mixes", default=TUNE.get("mixes"),
              help="First model's share for A.nn+B.nn systems (as rescore-tune; default: its grid).")
@click.option("--bootstrap", "draws", type=click.IntRange(min=0), default=1000,
              help="Paired bootstrap draws (0: none).")
@click.option("--seed", type=int, default=0, help="Seed of the bootstrap.")
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              help="Level of the CIs.")
@click.option("--allow-missing", is_flag=True, help="References without an N-best are dropped with a warning.")
@verbose_option
def main(nbest_dir, data_dir, words_txt, train_text, num_buckets, systems, pairs, out_dir, weights, inv_acwts, wips,
         mixes, draws, seed, confidence, allow_missing, verbose):
    """Tune each --system by two-fold cross-validation on the dev N-best dir (rescore-tune
    --cross-validate: each half of the conversations decoded with the setting tuned on the
    other), then compare the pooled hypotheses by a paired bootstrap over the conversations:
    every system against the first, and each --pair A:B, overall and per rare-word bucket. A
    difference whose CI covers 0 is printed as "no difference". Writes OUT/ablation.md,
    OUT/ablation.json and OUT/NAME.txt (the pooled 1-best) once every system is tuned.

    \b
    python -m tools.experiments.ablation --nbest-dir D/nbest --data-dir D/data --train-text T \\
        --out-dir OUT --system first-pass=first-pass --system lstm=lstm/lmwt.nn \\
        --system lstm-ptrmem=ptr/lmwt.nn --pair lstm-ptrmem:lstm
    """
    setup_logging(verbose)
    parsed = [parse_system(s) for s in systems]
    pair_list = [parse_pair(p, [n for n, _ in parsed]) for p in pairs]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OptionError("a directory", option="--out-dir", got=out_dir)
    res = run_ablation(nbest_dir=nbest_dir, data_dir=data_dir, systems=parsed, pairs=pair_list,
                       grids={"weights": weights, "inv_acwts": inv_acwts, "wips": wips, "mixes": mixes},
                       words_txt=words_txt, train_text=train_text, num_buckets=num_buckets, draws=draws, seed=seed,
                       confidence=confidence, allow_missing=allow_missing, out_dir=out_dir)
    click.echo(write_outputs(out_dir, res))


if __name__ == "__main__":
    main()
