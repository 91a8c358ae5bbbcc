"""The jobs of rescore-lattice, the Python steps of lattice rescoring by path cover
(rescore.nbest.lattice) between the Kaldi binaries of recipes/steps/lmrescore_lattice.sh:

* :class:`CoverJob` (``cover``): the path cover of each lattice written as an N-best archive;
* :class:`ApplyJob` (``apply``): every arc given the NN LM cost of its best history (the scored
  paths of the cover), added to the lattice;
* :class:`LatticeTuneJob` (``tune``): the NN LM weight, inv-acwt and word insertion penalty tuned
  on rescored lattices the way rescore-tune tunes them on N-best lists, with the WER tuned on the whole set and
split-half (tuned on the first half of the conversations, reported on the second:
rescore.nbest.combine.split_half).

The weight is not a lattice-time choice (it is in the graph costs), so each weight is its own
rescored decode dir (recipes/steps/lmrescore_lattice.sh --stage 4 --weight W into DIR_W). The
1-best of every (inv-acwt, wip) comes from rescore.nbest.lattice.best_paths (what
lattice-add-penalty | lattice-best-path give), the errors from rescore.metrics.word_errors. A
DIR_W holds lat.*.gz, read with Kaldi's lattice-copy (on PATH).

Each job is checked when built, like rescore.jobs.nbest's: an OptionError (exit 2) before any work
for a bad scale or weight, or an output path that is an input. Output files are written whole or
not at all.
"""

from __future__ import annotations

import glob
import io
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

from rescore.errors import RescoreError, check
from rescore.io.files import write_json
from rescore.io.kaldi import invert_symbol_table, read_nn_costs, read_symbol_table, read_table
from rescore.io.outputs import check_output_file
from rescore.nbest.lattice import (CoverStats, Lattice, best_paths, check_scales, iter_lattices, nbest_costs_by_words,
                                   open_text, rescore_lattices, write_cover_nbest, write_lattices)

log = logging.getLogger("rescore-lattice")


@dataclass(frozen=True)
class CoverJob:
    """rescore-lattice cover: the path cover of each lattice of ``lats`` (text CompactLattices, '-':
    stdin) written to ``nbest_out`` as linear lattices keyed <utt>-<k>, best first ('-': stdout; a
    .gz output is gzipped). Checked when built."""

    lats: str
    nbest_out: str
    acoustic_scale: float  # of the path costs (1 / inv_acwt), as lattice-path-cover's
    lm_scale: float = 1.0  # of the graph costs of the path costs

    def __post_init__(self):
        check_scales(self.acoustic_scale, self.lm_scale)
        if self.nbest_out != "-":
            check_output_file(self.nbest_out, "NBEST_OUT", inputs=[self.lats])

    def run(self) -> CoverStats:
        """Write the cover; returns its counts (logged)."""
        with open_text(self.lats) as f:
            stats = write_cover_nbest(iter_lattices(f, self.lats), self.nbest_out, self.acoustic_scale,
                                      self.lm_scale)
        log.info("%d lattices, %d arcs: %d paths (%.1f per lattice)", stats.lattices, stats.arcs,
                 stats.paths, stats.paths / max(stats.lattices, 1))
        return stats


@dataclass(frozen=True)
class ApplyJob:
    """rescore-lattice apply: ``weight`` x the estimated NN LM cost added to every word arc and final
    weight of ``lats``, written to ``lats_out`` ('-': stdout). ``archives`` is the N-best dir of the
    cover paths after rescore-nbest (words, lmwt.nn); the path cover is recomputed with the same
    scales as the cover's. Checked when built."""

    lats: str
    archives: str
    lats_out: str
    acoustic_scale: float
    weight: float  # NN LM weight w: graph cost += w * NN cost
    lm_scale: float = 1.0

    def __post_init__(self):
        check_scales(self.acoustic_scale, self.lm_scale, self.weight)
        if self.lats_out != "-":
            check_output_file(self.lats_out, "LATS_OUT", inputs=[self.lats, *self.inputs()])

    def inputs(self) -> Tuple[Path, Path]:
        """The two archives read from ``archives``: words and lmwt.nn."""
        return Path(self.archives) / "words", Path(self.archives) / "lmwt.nn"

    def run(self) -> CoverStats:
        """Rescore and write the lattices; returns the counts (logged)."""
        words_path, nn = self.inputs()
        words = read_table(words_path, "ints").as_dict()
        costs = nbest_costs_by_words(words, read_nn_costs(nn), nn, words_path)
        stats = CoverStats()
        with open_text(self.lats) as f:
            n = write_lattices(self.lats_out, rescore_lattices(iter_lattices(f, self.lats), costs,
                                                               self.acoustic_scale, self.weight, self.lm_scale,
                                                               stats, source=words_path))
        log.info("%d lattices rescored (%d arcs, %d paths; %d word arcs without an NN cost)", n,
                 stats.arcs, stats.paths, stats.uncovered)
        return stats


def read_lattice_dir(d: str) -> Dict[str, Lattice]:
    """The lattices of a decode dir's lat.*.gz (Kaldi's binary archives, through lattice-copy)."""
    lats = {}
    for path in sorted(glob.glob(f"{d}/lat.*.gz")):
        try:
            r = subprocess.run(["lattice-copy", f"ark:gunzip -c {path}|", "ark,t:-"], capture_output=True)
        except FileNotFoundError:
            raise RescoreError("Kaldi's lattice-copy on PATH (to read lat.*.gz)", path=path) from None
        if r.returncode != 0:
            raise RescoreError("lattices lattice-copy can read", path=path,
                               got=r.stderr.decode(errors="replace").strip()[-300:])
        for lat in iter_lattices(io.StringIO(r.stdout.decode()), path):
            lats[lat.key] = lat
    if not lats:
        raise RescoreError("a decode dir with lattices (lat.*.gz)", path=d, got="none")
    return lats


def tune_lattices(nbest_dir: str, data_dir: str, words_txt: str, dirs: Mapping[float, str],
                  inv_acwts: Sequence[float], wips: Sequence[float]) -> dict:
    """The best (weight, inv_acwt, wip) by WER over every utterance, and split-half: tuned on the
    first half of the conversations, the WER on the second. ``dirs``: weight -> rescored decode
    dir. Ties go to the first in grid order (smallest weight, inv_acwt, wip)."""
    # (lazy: cover and apply, run once per Kaldi job of a recipe, start without the N-best stack)
    from rescore.metrics import word_errors
    from rescore.nbest.combine import split_half
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(nbest_dir, data_dir, words_txt)
    first, second = split_half(nbest)
    halves = [[u.id for u in first.utterances()], [u.id for u in second.utterances()]]
    refs = nbest.refs
    if refs is None:
        raise RescoreError("a data dir with references (text)", path=data_dir)
    sym = invert_symbol_table(read_symbol_table(words_txt))
    settings = [(a, p) for a in inv_acwts for p in wips]
    errors: Dict[Tuple[float, float, float], Dict[str, int]] = {}
    for w, d in sorted(dirs.items()):
        lats = read_lattice_dir(d)
        missing = [u for u in refs if u not in lats]
        if missing:
            raise RescoreError(f"a lattice for every utterance of {nbest_dir}", path=d,
                               got=f"none for {len(missing)} utterances, e.g. {missing[0]}")
        per = {s: {} for s in settings}
        cache = {}
        for u in refs:
            for s, ids in zip(settings, best_paths(lats[u], [1.0 / a for a in inv_acwts], wips)):
                if (u, ids) not in cache:
                    cache[(u, ids)] = word_errors(refs[u], [sym[i] for i in ids])
                per[s][u] = cache[(u, ids)]
        for (a, p), e in per.items():
            errors[(w, a, p)] = e
        log.info("weight %g: %s (%d lattices)", w, d, len(lats))

    def wer(key, utts):
        return 100.0 * sum(errors[key][u] for u in utts) / sum(len(refs[u]) for u in utts)

    def tune(utts):
        return min(sorted(errors), key=lambda k: wer(k, utts))

    every = list(refs)
    best_all, best_a = tune(every), tune(halves[0])
    return {"tuned_all": {"weight": best_all[0], "inv_acwt": best_all[1], "wip": best_all[2],
                          "wer": wer(best_all, every), "utts": len(every)},
            "split_half": {"weight": best_a[0], "inv_acwt": best_a[1], "wip": best_a[2],
                           "tuned_wer": wer(best_a, halves[0]), "held_out_wer": wer(best_a, halves[1]),
                           "tuned_utts": len(halves[0]), "held_out_utts": len(halves[1])}}


def format_tuned(out: dict) -> str:
    a, s = out["tuned_all"], out["split_half"]
    return (f"tuned on {a['utts']} utterances: WER {a['wer']:.2f} % (weight {a['weight']:g} inv_acwt "
            f"{a['inv_acwt']:g} wip {a['wip']:g})\n"
            f"split half: tuned on {s['tuned_utts']} (weight {s['weight']:g} inv_acwt {s['inv_acwt']:g} "
            f"wip {s['wip']:g}), held out {s['held_out_utts']}: WER {s['held_out_wer']:.2f} %")


@dataclass(frozen=True)
class LatticeTuneJob:
    """rescore-lattice tune: the best (weight, inv_acwt, wip) by WER on rescored lattices, over every
    utterance and split-half (tune_lattices). ``dirs``: weight -> the decode dir rescored with it.
    Checked when built."""

    nbest_dir: str  # an N-best dir of the same utterances: their conversations (the halves)
    data_dir: str  # references (text) and conversations
    words_txt: str  # the lattices' words.txt
    dirs: Mapping[float, str]
    inv_acwts: Sequence[float]
    wips: Sequence[float]
    report: Optional[str] = None  # the result as JSON

    def __post_init__(self):
        for option, values in (("W=DIR", self.dirs), ("--inv-acwts", self.inv_acwts), ("--wips", self.wips)):
            check(len(values) > 0, "at least one value", option, "none")
        check_output_file(self.report, "--report", [self.nbest_dir, self.data_dir, self.words_txt,
                                                    *self.dirs.values()])

    def run(self) -> str:
        """Tune; write --report; returns the readable result (format_tuned)."""
        out = tune_lattices(self.nbest_dir, self.data_dir, self.words_txt, self.dirs, self.inv_acwts, self.wips)
        if self.report:
            write_json(self.report, out)
        return format_tuned(out)
