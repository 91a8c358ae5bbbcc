"""Rescored N-best lists back in each recognizer's own format, so that its scoring scripts run on
them unchanged (docs/ecosystems.md has the commands).

Every writer takes a table (rescore.io.interchange.NbestTable) and a cost per hypothesis (lower
is better: rescore-nbest's ``total``, or rescore.nbest.tables.ranking_costs, the same rule for a
table not yet rescored) and returns ``{file name: text}`` for the caller to write (rescore-nbest
into its OUT_DIR, rescore-convert-nbest into TARGET, each as one set: rescore.io.outdir.OutputSet):

* **ESPnet** (:func:`espnet_files`): what ``asr.sh`` leaves in a decode dir for its scoring
  stage: ``text`` and ``score`` (the 1-best, merged) and ``1best_recog/{text,score}``, lines
  ``utt value`` as ESPnet's ``DatadirWriter`` writes them; ``score`` is the log-probability form
  of the cost (-cost). ``asr.sh --stage 13`` scores ``<decode dir>/text``. Speaker k of a
  multi-speaker decode: ``text_spk<k>``, ``score_spk<k>`` and ``1best_recog/{text,score}_spk<k>``,
  the files ``asr.sh``'s multi-speaker scoring reads.
* **NeMo** (:func:`nemo_files`): ``preds_rescored.tsv``, the candidates of each utterance of the
  manifest, in manifest order, best first by the cost, as ``'{}\\t{}\\n'.format(text, -cost)``
  (the lines of ``eval_beamsearch_ngram_ctc.py``); ``manifest_rescored.json``, the manifest's
  entries, each with ``pred_text`` (the 1-best) added: the manifest that NeMo's
  ``speech_to_text_eval.py`` scores (``text`` against ``pred_text``).
* **icefall** (:func:`icefall_files`): ``recogs-<set>-<key>.txt``, ``errs-<set>-<key>.txt`` and
  ``wer-summary-<set>.txt`` as icefall's ``save_results`` writes them (``store_transcripts``
  and ``write_error_stats`` of ``icefall/utils.py``; the alignment is Kaldi's
  ``LevenshteinAlignment``, as ``kaldialign.align`` computes it). They need references.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.io.ecosystems import nemo_manifest

PathLike = Union[str, Path]
WRITE_FORMATS = ("espnet", "nemo", "icefall")
Costs = Mapping[Tuple[str, int], float]  # (utt, rank) -> cost


def ranked(table, costs: Costs):
    """[(utterance, its hypotheses best first)]: by cost, ties in rank order."""
    return [(u, sorted(u.hyps, key=lambda h: (costs[(u.id, h.rank)], h.rank))) for u in table.utterances]


def _score(x: float) -> str:
    return repr(float(x))


# --------------------------------------------------------------------------------------------
# ESPnet


def espnet_names(speaker: Optional[int] = None) -> List[str]:
    """The files of :func:`espnet_files`; speaker k: ``text_spk<k>``, ``score_spk<k>``, as
    ``asr.sh`` merges and scores a multi-speaker decode."""
    sfx = f"_spk{speaker}" if speaker is not None else ""
    return [f"text{sfx}", f"score{sfx}", f"1best_recog/text{sfx}", f"1best_recog/score{sfx}"]


def espnet_files(table, costs: Costs, speaker: Optional[int] = None) -> Dict[str, str]:
    """The 1-best as ESPnet's decode dir holds it (module doc); speaker k: as speaker k's files."""
    text, score = [], []
    for u, hyps in ranked(table, costs):
        best = hyps[0]
        text.append(f"{u.id} {' '.join(best.words)}\n")  # DatadirWriter: f"{key} {value}\n"
        score.append(f"{u.id} {_score(-costs[(u.id, best.rank)])}\n")
    text, score = "".join(text), "".join(score)
    return dict(zip(espnet_names(speaker), (text, score, text, score)))


# --------------------------------------------------------------------------------------------
# NeMo


def nemo_names() -> List[str]:
    return ["preds_rescored.tsv", "manifest_rescored.json"]


def nemo_files(table, costs: Costs, manifest: PathLike) -> Dict[str, str]:
    """The rescored candidates and the manifest with ``pred_text`` (module doc); the table's
    utterances are the manifest's (rescore.io.ecosystems.read_nemo), in its order."""
    entries = nemo_manifest(manifest)
    by_id = {u.id: hyps for u, hyps in ranked(table, costs)}
    missing = [utt for utt, _, _ in entries if utt not in by_id]
    if missing or len(entries) != len(by_id):
        raise RescoreError(f"the utterances of {manifest} (a NeMo input of that manifest)", path=table.path,
                           got=f"{len(by_id)} utterances, {len(missing)} of the manifest's missing")
    preds, lines = [], []
    for utt, entry, _ in entries:
        for h in by_id[utt]:
            preds.append("{}\t{}\n".format(" ".join(h.words), _score(-costs[(utt, h.rank)])))
        item = dict(entry, pred_text=" ".join(by_id[utt][0].words))
        lines.append(json.dumps(item, ensure_ascii=False) + "\n")
    return {"preds_rescored.tsv": "".join(preds), "manifest_rescored.json": "".join(lines)}


# --------------------------------------------------------------------------------------------
# icefall


def icefall_names(test_set: str, key: str = "rescored", suffix: Optional[str] = None) -> List[str]:
    """The file names of icefall's ``save_results``: ``recogs-<set>-<key>.txt``, ``errs-...``,
    ``wer-summary-<set>.txt``; with ``suffix`` (``params.suffix`` of a current zipformer
    decode.py) ``recogs-<set>-<suffix>.txt``, ``errs-<set>-<suffix>.txt``,
    ``wer-summary-<set>-<suffix>.txt``."""
    if suffix is not None:
        return [f"recogs-{test_set}-{suffix}.txt", f"errs-{test_set}-{suffix}.txt",
                f"wer-summary-{test_set}-{suffix}.txt"]
    return [f"recogs-{test_set}-{key}.txt", f"errs-{test_set}-{key}.txt", f"wer-summary-{test_set}.txt"]


def icefall_test_set(path: PathLike) -> str:
    """The test set name of a dump ``nbest-<set>.jsonl`` (docs/ecosystems.md), else its stem."""
    stem = Path(path).name.split(".")[0]
    return stem[len("nbest-"):] if stem.startswith("nbest-") and len(stem) > len("nbest-") else stem


def kaldi_align(ref: Sequence[str], hyp: Sequence[str], eps: str = "*") -> List[Tuple[str, str]]:
    """``kaldialign.align`` without sclite_mode (its ``LevenshteinAlignment``, a copy of Kaldi's
    util/edit-distance-inl.h with strict comparisons in the trace back): unit costs; from the
    end, a match or substitution only where it is strictly cheaper than a deletion and an
    insertion, a deletion only where strictly cheaper than an insertion."""
    m_len, n_len = len(ref), len(hyp)
    e = [[0] * (n_len + 1) for _ in range(m_len + 1)]
    for n in range(n_len + 1):
        e[0][n] = n
    for m in range(1, m_len + 1):
        e[m][0] = e[m - 1][0] + 1
        for n in range(1, n_len + 1):
            sub_or_ok = e[m - 1][n - 1] + (ref[m - 1] != hyp[n - 1])
            e[m][n] = min(sub_or_ok, e[m - 1][n] + 1, e[m][n - 1] + 1)
    out = []
    m, n = m_len, n_len
    while m != 0 or n != 0:
        if m == 0:
            last_m, last_n = m, n - 1
        elif n == 0:
            last_m, last_n = m - 1, n
        else:
            sub_or_ok = e[m - 1][n - 1] + (ref[m - 1] != hyp[n - 1])
            dele, ins = e[m - 1][n] + 1, e[m][n - 1] + 1
            if sub_or_ok < min(dele, ins):
                last_m, last_n = m - 1, n - 1
            elif dele < ins:
                last_m, last_n = m - 1, n
            else:
                last_m, last_n = m, n - 1
        out.append((eps if last_m == m else ref[last_m], eps if last_n == n else hyp[last_n]))
        m, n = last_m, last_n
    out.reverse()
    return out


def store_transcripts(results: Sequence[Tuple[str, List[str], List[str]]]) -> str:
    """icefall's ``store_transcripts``: two lines per cut, ``cut_id:\\tref=[...]`` and
    ``cut_id:\\thyp=[...]`` (Python's list repr)."""
    return "".join(f"{cut_id}:\tref={ref}\n{cut_id}:\thyp={hyp}\n" for cut_id, ref, hyp in results)


def write_error_stats(results: Sequence[Tuple[str, List[str], List[str]]]) -> Tuple[str, float]:
    """icefall's ``write_error_stats`` (without CER or sclite mode): the errs file's text and
    the WER it returns (percent, 2 decimals)."""
    err = "*"
    subs: Dict[Tuple[str, str], int] = defaultdict(int)
    ins: Dict[str, int] = defaultdict(int)
    dels: Dict[str, int] = defaultdict(int)
    words: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    num_corr = 0
    for _, ref, hyp in results:
        for ref_word, hyp_word in kaldi_align(ref, hyp, err):
            if ref_word == err:
                ins[hyp_word] += 1
                words[hyp_word][3] += 1
            elif hyp_word == err:
                dels[ref_word] += 1
                words[ref_word][4] += 1
            elif hyp_word != ref_word:
                subs[(ref_word, hyp_word)] += 1
                words[ref_word][1] += 1
                words[hyp_word][2] += 1
            else:
                words[ref_word][0] += 1
                num_corr += 1
    ref_len = sum(len(r) for _, r, _ in results)
    sub_errs, ins_errs, del_errs = sum(subs.values()), sum(ins.values()), sum(dels.values())
    tot_errs = sub_errs + ins_errs + del_errs
    if ref_len == 0:
        raise RescoreError("references with at least one word (icefall's WER divides by their number)",
                           got="no reference words")
    tot_err_rate = "%.2f" % (100.0 * tot_errs / ref_len)
    out = [f"%WER = {tot_err_rate}",
           f"Errors: {ins_errs} insertions, {del_errs} deletions, {sub_errs} substitutions, over {ref_len} "
           f"reference words ({num_corr} correct)",
           "Search below for sections starting with PER-UTT DETAILS:, SUBSTITUTIONS:, DELETIONS:, INSERTIONS:, "
           "PER-WORD STATS:", "", "PER-UTT DETAILS: corr or (ref->hyp)  "]
    for cut_id, ref, hyp in results:
        ali = [[[x], [y]] for x, y in kaldi_align(ref, hyp, err)]
        for i in range(len(ali) - 1):  # combine successive errors
            if ali[i][0] != ali[i][1] and ali[i + 1][0] != ali[i + 1][1]:
                ali[i + 1][0] = ali[i][0] + ali[i + 1][0]
                ali[i + 1][1] = ali[i][1] + ali[i + 1][1]
                ali[i] = [[], []]
        ali = [[[a for a in x if a != err], [a for a in y if a != err]] for x, y in ali]
        ali = [x for x in ali if x != [[], []]]
        ali = [[err if x == [] else " ".join(x), err if y == [] else " ".join(y)] for x, y in ali]
        out.append(f"{cut_id}:\t" + " ".join(r if r == h else f"({r}->{h})" for r, h in ali))
    out += ["", "SUBSTITUTIONS: count ref -> hyp"]
    out += [f"{count}   {ref} -> {hyp}" for count, (ref, hyp) in sorted([(v, k) for k, v in subs.items()],
                                                                          reverse=True)]
    out += ["", "DELETIONS: count ref"]
    out += [f"{count}   {ref}" for count, ref in sorted([(v, k) for k, v in dels.items()], reverse=True)]
    out += ["", "INSERTIONS: count hyp"]
    out += [f"{count}   {hyp}" for count, hyp in sorted([(v, k) for k, v in ins.items()], reverse=True)]
    out += ["", "PER-WORD STATS: word  corr tot_errs count_in_ref count_in_hyp"]
    for _, word, counts in sorted([(sum(v[1:]), k, v) for k, v in words.items()], reverse=True):
        corr, ref_sub, hyp_sub, n_ins, n_dels = counts
        out.append(f"{word}   {corr} {ref_sub + hyp_sub + n_ins + n_dels} {corr + ref_sub + n_dels} "
                   f"{corr + hyp_sub + n_ins}")
    return "".join(x + "\n" for x in out), float(tot_err_rate)


def icefall_files(table, costs: Costs, refs: Optional[Mapping[str, Sequence[str]]], test_set: str,
                  key: str = "rescored", suffix: Optional[str] = None) -> Dict[str, str]:
    """icefall's ``save_results`` files of the 1-best (module doc; suffix: icefall_names)."""
    if not refs:
        raise RescoreError("references for icefall's recogs/errs files (the dump's 'ref', or --data-dir with a "
                           "'text')", path=table.path, got="none")
    results = []
    for u, hyps in ranked(table, costs):
        if u.id not in refs:
            raise RescoreError(f"a reference for cut '{u.id}'", path=table.path, got="none")
        results.append((u.id, list(refs[u.id]), list(hyps[0].words)))
    results = sorted(results)
    errs, wer = write_error_stats(results)
    names = icefall_names(test_set, key, suffix)
    return {names[0]: store_transcripts(results), names[1]: errs, names[2]: f"settings\tWER\n{key}\t{wer}\n"}


def files_for(fmt: str, table, costs: Costs, *, manifest: Optional[PathLike] = None,
              refs: Optional[Mapping[str, Sequence[str]]] = None, test_set: Optional[str] = None,
              speaker: Optional[int] = None, suffix: Optional[str] = None) -> Dict[str, str]:
    """The files of format ``fmt`` (WRITE_FORMATS); speaker: ESPnet's speaker k of a
    multi-speaker decode; suffix: icefall's ``params.suffix`` (icefall_names)."""
    if fmt == "espnet":
        return espnet_files(table, costs, speaker)
    if fmt == "nemo":
        if manifest is None:
            raise RescoreError("the NeMo manifest (--manifest) to write NeMo's files", path=table.path)
        return nemo_files(table, costs, manifest)
    if fmt == "icefall":
        return icefall_files(table, costs, refs if refs is not None else table.refs,
                             test_set or icefall_test_set(table.path), suffix=suffix)
    raise ValueError(f"format must be one of {WRITE_FORMATS}")


def names_for(fmt: str, test_set: str = "", speaker: Optional[int] = None, suffix: Optional[str] = None) -> List[str]:
    if fmt == "espnet":
        return espnet_names(speaker)
    return nemo_names() if fmt == "nemo" else icefall_names(test_set, suffix=suffix)


def write_files(out, files: Mapping[str, str]) -> List[str]:
    """Write ``files`` ({name: text}, names relative to the dir) into ``out``, a
    rescore.io.outdir.OutputSet (each file atomically, the dir as one set). Returns the names."""
    for name, text in files.items():
        with out.open(name) as f:
            f.write(text)
    return list(files)
