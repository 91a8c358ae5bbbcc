"""The output dir of a Kaldi step (recipes/steps/lmrescore_nbest.sh and the steps built on it) as
one N-best set: every job's ``archives.JOB`` (JOB = 1 .. the dir's ``num_jobs``), so that a decode
run with several jobs is tuned as a whole (rescore-tune STEP_OUTPUT_DIR).

Layout (what the step writes)::

    DIR/num_jobs                   nj
    DIR/words.txt                  the old lang dir's (checks each job's words against words_text)
    DIR/archives.JOB/words_text    (and words, acwt, lmwt.nolm, lmwt.withlm, ali: an N-best dir)
    DIR/archives.JOB/lmwt.nn       the NN LM costs of the job's hypotheses (one model)
    DIR/archives.JOB/lmwt.nn.K     model K's costs, with several models

Each job is read and checked as an N-best dir of its own (errors name its files and lines); the
set is their utterances with references and conversations from the decode's whole data dir, as
load_nbest_dir forms them (a recording whose utterances two jobs share is one conversation).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.io.kaldi import read_nn_costs
from rescore.nbest.combine import NnCosts
from rescore.formats.kaldi import kaldi_dir
from rescore.nbest.sets import assemble_set, load_nbest_dir

log = logging.getLogger(__name__)
PathLike = Union[str, Path]


def step_jobs(path: PathLike) -> Optional[List[Path]]:
    """The ``archives.JOB`` dirs of a step's output dir, or None when PATH is not one (no
    ``num_jobs`` or no ``archives.1``); an error when ``num_jobs`` is not a number or a job's
    dir is missing."""
    d = Path(path)
    nj_file = d / "num_jobs"
    if not (nj_file.is_file() and (d / "archives.1").is_dir()):
        return None
    text = nj_file.read_text().strip()
    if not text.isdigit() or int(text) < 1:
        raise RescoreError("a number of jobs >= 1", path=nj_file, line=1, got=text or "an empty file")
    jobs = [d / f"archives.{n}" for n in range(1, int(text) + 1)]
    for j in jobs:
        if not j.is_dir():
            raise RescoreError(f"the archives of every job ({text} in {nj_file})", path=j, got="no such directory")
    return jobs


def default_cost_names(jobs: Sequence[Path]) -> Tuple[str, ...]:
    """The NN LM cost files of a step's jobs: lmwt.nn.1 .. lmwt.nn.K when the step scored K > 1
    models (their shares are then tuned too), else lmwt.nn; () when no job has any. Every job
    must have the same: a job without the costs another has is an error naming its missing file
    (tuning the jobs that have none at weight 0 only would hide it)."""
    def names(job: Path) -> Tuple[str, ...]:
        k = 0
        while (job / f"lmwt.nn.{k + 1}").is_file():
            k += 1
        if k > 1:
            return tuple(f"lmwt.nn.{i}" for i in range(1, k + 1))
        return ("lmwt.nn",) if (job / "lmwt.nn").is_file() else ()

    found = [names(j) for j in jobs]
    most = max(found, key=len)
    for job, have in zip(jobs, found):
        missing = [n for n in most if n not in have]
        if missing:
            other = jobs[found.index(most)]
            raise RescoreError(f"the NN LM costs of every job, as {other / missing[0]} (the step's rescore-nbest "
                               f"failed or was not run for this job?)", path=job / missing[0], got="no such file")
    return most


def cost_files(jobs: Sequence[Path], names: Sequence[str]) -> List[List[Path]]:
    """[model][job] -> the cost file ``archives.JOB/NAME``; an error naming the first missing one."""
    out = []
    for name in names:
        if Path(name).name != str(name):
            raise RescoreError("a file name of every archives.JOB (e.g. lmwt.nn) with a step's output dir",
                               path=name)
        files = [j / name for j in jobs]
        for f in files:
            if not f.is_file():
                raise RescoreError(f"NN LM costs of every job ('{name}')", path=f, got="no such file")
        out.append(files)
    return out


def load_step_output(path: PathLike, data_dir: Optional[PathLike], words_txt: Optional[PathLike] = None, *,
                     allow_missing: bool = False, cost_names: Sequence[str] = ()):
    """(NbestSet of every job's utterances, NnCosts of ``cost_names`` or None) of a step's output
    dir; each job checked on its own, costs against its own hypotheses."""
    jobs = step_jobs(path)
    if jobs is None:
        raise RescoreError("a step's output dir (num_jobs and archives.1 ...)", path=path)
    files = cost_files(jobs, cost_names)
    if words_txt is None and (Path(path) / "words.txt").is_file():  # the step's copy of the lang dir's
        words_txt = Path(path) / "words.txt"
    utts, seen, merged = [], {}, [dict() for _ in files]
    for n, job in enumerate(jobs):
        part = load_nbest_dir(job, None, words_txt)
        for u in part.utterances():
            if u.id in seen:
                raise RescoreError(f"each utterance in one job only ('{u.id}' is in {seen[u.id]} too)", path=job)
            seen[u.id] = job
            utts.append(u)
        for k, per_job in enumerate(files):
            costs = NnCosts.check(part, [read_nn_costs(per_job[n])], [per_job[n]])
            merged[k].update(costs.model(0))
    log.info("%s: %d jobs, %d utterances", path, len(jobs), len(utts))
    nbest = assemble_set(path, utts, data_dir, allow_missing=allow_missing)
    costs = None
    if files:
        sources = [f"{Path(path) / 'archives.*' / name}" for name in cost_names]
        costs = NnCosts.check(nbest, merged, sources)
    return nbest, costs


def step_input_files(path: PathLike, cost_names: Sequence[str]) -> List[Path]:
    """The files reading a step's output dir reads (for the checks that no output overwrites one)."""
    files = [Path(path) / "num_jobs", Path(path) / "words.txt"]
    for j in step_jobs(path) or []:
        files += [p for p in kaldi_dir(j).archives.values() if p is not None]
        files += [j / n for n in cost_names]
    return files
