"""The input checks of every command that reads references or models, said before the numbers lie.

A wrong input rarely fails loudly: an LM whose vocabulary does not match the hypotheses scores
them all as ``<unk>``, and integer archives read through the wrong words.txt give words that have
nothing to do with what was said, yet both give a WER. These checks look at the words alone
(no LM is run), so they also run with ``--nn-costs``, where only the words.txt check applies.

This module is their one home; each command calls one function of it, so a check says the same
words wherever it runs:

* :func:`check_nbest_input` -- a loaded N-best set: rescore-nbest (every input format, and the
  Kaldi steps that run it), rescore-tune (an N-best dir or a step's output dir) and rescore-tune
  --refine-model. Each LM's vocabulary, the symbol table, and with references: their style
  against the hypotheses' words (:func:`style_check`, rescore.metrics.refnorm), the first pass
  against them, the LM training text and each model's fingerprint of it (rescore.nbest.refs), and
  a ``--params`` setting tuned on this very set (:func:`params_check`).
* :func:`check_text_input` -- rescore-wer: the style, each HYP_TEXT as a first pass, the training text.
* :func:`check_model_text` -- rescore-ppl: its TEXT against the training text and the fingerprints.

The vocabulary of each LM (:func:`vocabulary_check`): the share of hypothesis tokens (all
hypotheses of the N-best set) outside the LM vocabulary, the same share of reference tokens
where there are references, and how many words of the words.txt (when one is known) the LM does
not have. A Hugging Face LM (``--model hf:DIR``) has no word vocabulary: its tokenizer turns
every word into pieces, so it is not checked (a line in the log says so).

- above ``OOV_WARN_RATE`` (20 %) of hypothesis tokens: a warning;
- above ``OOV_ERROR_RATE`` (50 %): an error (exit 1) unless ``--allow-oov-rate`` is given.

On the real dev set (tts-wikitext2-dev) an LM of every word of wikitext2-asr's training text
leaves 0.9 % of the hypothesis tokens (0.1 % of the reference tokens) outside its vocabulary,
one of its 10,000 most frequent words 5.0 %, of its 5,000 most frequent 9.9 %: far below the
warning. When most of the tokens outside the vocabulary are in it after changing letter case
or Unicode normalisation (NFC/NFD), the message says so (e.g. "the hypotheses look upper-case
while the LM vocabulary is lower-case").

The symbol table (:func:`symbol_table_check`): when the words come from integer archives mapped
through words.txt (``words`` without ``words_text``) and there are references, the first pass
(rank 1 of each utterance) is compared with the references. A first-pass WER above
``MAX_FIRST_PASS_WER`` (90 %) or fewer than ``MIN_TOKEN_OVERLAP`` (20 %) of its tokens found in
the reference of their utterance means the words are not the recognizer's: most likely a
words.txt of another graph (the real dev set: WER 20.6 %, 81 % of the tokens found; through a
words.txt of the same words with shuffled ids: WER 103 %, 0.04 % found).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterable, List, Mapping, Optional, Sequence, Union

from rescore.errors import RescoreError
from rescore.formats.kaldi import words_txt_of
from rescore.metrics.record import JsonRecord
from rescore.metrics.refnorm import reference_style_hint
from rescore.metrics.report import format_input_checks
from rescore.metrics.spelling import reference_spelling_hint, spelling_hint  # noqa: F401  (also this module's)
from rescore.metrics.wer import align
# (the first-pass thresholds are also this module's: the symbol table check uses them)
from rescore.nbest.refs import MAX_FIRST_PASS_WER, MIN_TOKEN_OVERLAP, first_pass_check, reference_checks, \
    training_text_checks
from rescore.settings import is_hf_spec

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

OOV_WARN_RATE = 20.0  # percent of hypothesis tokens outside the LM vocabulary: a warning above
OOV_ERROR_RATE = 50.0  # ... an error above, unless allowed (--allow-oov-rate)
ALLOW_OPTION = "--allow-oov-rate"
SPECIALS = ("<eos>", "<unk>", "<s>", "</s>", "<eps>")


def _rate(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


@dataclass
class VocabularyCheck(JsonRecord):
    """One LM's vocabulary against the N-best set's words (rates in percent)."""

    model: str
    vocab_size: int
    hyp_tokens: int
    hyp_oov_tokens: int
    hyp_oov_rate: float
    ref_tokens: Optional[int] = None
    ref_oov_tokens: Optional[int] = None
    ref_oov_rate: Optional[float] = None
    words_txt: Optional[str] = None
    words_txt_words: Optional[int] = None
    words_txt_oov: Optional[int] = None
    hint: Optional[str] = None
    warnings: List[str] = field(default_factory=list)


def vocabulary_check(model: str, vocab: Collection[str], hyp_tokens: Iterable[str],
                     ref_tokens: Optional[Iterable[str]] = None, *, lexicon: Optional[Sequence[str]] = None,
                     words_txt: Optional[PathLike] = None, what: str = "hypotheses") -> VocabularyCheck:
    """How much of the hypotheses (and references, and the words.txt words ``lexicon``) lies
    outside ``vocab``; warnings above OOV_WARN_RATE and for a case/normalisation mismatch
    (``what``: what the hypothesis tokens are called in its hint)."""
    vocab = set(vocab)
    hyp = Counter(hyp_tokens)  # (one C-level count, then the specials out)
    for special in SPECIALS:
        hyp.pop(special, None)
    oov = Counter({w: n for w, n in hyp.items() if w not in vocab})
    n_hyp, n_oov = sum(hyp.values()), sum(oov.values())
    c = VocabularyCheck(model, len(vocab), n_hyp, n_oov, _rate(n_oov, n_hyp))
    if ref_tokens is not None:
        ref = [w for w in ref_tokens if w not in SPECIALS]
        c.ref_tokens = len(ref)
        c.ref_oov_tokens = sum(1 for w in ref if w not in vocab)
        c.ref_oov_rate = _rate(c.ref_oov_tokens, c.ref_tokens)
    if lexicon is not None:
        c.words_txt = None if words_txt is None else str(words_txt)
        c.words_txt_words = len(lexicon)
        c.words_txt_oov = sum(1 for w in lexicon if w not in vocab)
    c.hint = spelling_hint(vocab, oov, what)
    if c.hyp_oov_rate > OOV_WARN_RATE or c.hint:
        c.warnings.append(f"{c.hyp_oov_rate:.1f} % of the hypothesis tokens are outside the vocabulary of {model} "
                          f"({len(vocab)} words; a warning above {OOV_WARN_RATE:g} %): they are all scored as <unk>"
                          + (f"; {c.hint}" if c.hint else ""))
    return c


def text_vocabulary_warning(model: str, vocab: Collection[str], tokens: Iterable[str],
                            text: PathLike) -> Optional[str]:
    """rescore-ppl's check of a text against an LM's vocabulary (vocabulary_check): a warning
    when more than OOV_WARN_RATE of its tokens are outside it (an LM of other text, or another
    language), or when letter case or Unicode form explains most of those; None otherwise."""
    c = vocabulary_check(model, vocab, tokens, what="sentences")
    if c.hyp_oov_rate <= OOV_WARN_RATE and not c.hint:
        return None
    return (f"{c.hyp_oov_rate:.1f} % of the tokens of {text} are out-of-vocabulary (OOV) for {model} "
            f"({c.vocab_size} words; a warning above {OOV_WARN_RATE:g} %): each is scored as <unk>, so the "
            f"perplexity is not that of the words" + (f"; {c.hint}" if c.hint else ""))


@dataclass
class SymbolTableCheck(JsonRecord):
    """The first pass (rank 1) of integer archives mapped through words_txt, against the
    references: its WER and the share of its tokens found in their utterance's reference."""

    words_txt: Optional[str]
    first_pass_wer: float
    token_overlap: float
    warnings: List[str] = field(default_factory=list)


def symbol_table_check(first_pass: Mapping[str, Sequence[str]], refs: Mapping[str, Sequence[str]],
                       words_txt: Optional[PathLike]) -> SymbolTableCheck:
    """A warning naming words_txt when the first pass shares almost nothing with the references
    (WER above MAX_FIRST_PASS_WER or token overlap below MIN_TOKEN_OVERLAP)."""
    utts = [u for u in refs if u in first_pass]
    stats, _ = align({u: refs[u] for u in utts}, {u: first_pass[u] for u in utts})
    found = sum(sum((Counter(first_pass[u]) & Counter(refs[u])).values()) for u in utts)
    tokens = sum(len(first_pass[u]) for u in utts)
    wer = stats.wer if stats.ref_words else 0.0  # (no reference words: nothing to compare)
    c = SymbolTableCheck(None if words_txt is None else str(words_txt), wer, _rate(found, tokens))
    if stats.ref_words and tokens and (c.first_pass_wer > MAX_FIRST_PASS_WER or c.token_overlap < MIN_TOKEN_OVERLAP):
        c.warnings.append(f"the first pass (rank 1) has a WER of {c.first_pass_wer:.1f} % and only "
                          f"{c.token_overlap:.1f} % of its tokens are in the references (a warning above "
                          f"{MAX_FIRST_PASS_WER:g} % WER or below {MIN_TOKEN_OVERLAP:g} % overlap): the word ids "
                          f"were most likely mapped through the wrong words.txt ({words_txt}); use the "
                          f"graph's own (exp/.../graph/words.txt, --words-txt)")
    return c


@dataclass
class NoteCheck(JsonRecord):
    """A check that has only something to say when it finds something: the references written
    another way than the hypotheses, a setting tuned on the set it is applied to."""

    check: str
    line: str = ""
    warnings: List[str] = field(default_factory=list)


def style_check(ref_tokens: Iterable[str], hyp_tokens: Iterable[str],
                lexicon: Collection[str] = ()) -> Optional[NoteCheck]:
    """The references written another way than the hypotheses' words (and those of words.txt,
    ``lexicon``): punctuation, case, typographic quotes (rescore.metrics.refnorm) or Unicode form
    (rescore.metrics.spelling); None when they are written alike."""
    ref_tokens = ref_tokens if isinstance(ref_tokens, list) else list(ref_tokens)  # (read twice)
    hyp_tokens = hyp_tokens if isinstance(hyp_tokens, list) else list(hyp_tokens)
    hint = reference_style_hint(ref_tokens, hyp_tokens, lexicon) or \
        reference_spelling_hint(ref_tokens, set(hyp_tokens).union(lexicon))
    if not hint:
        return None
    return NoteCheck("references", "references   written another way than the hypotheses' words", [hint])


def tuned_on_warning(nbest_dir: PathLike, tuned_on: PathLike) -> Optional[str]:
    """The warning when the N-best set ``nbest_dir`` is the set a setting was tuned on
    (``tuned_on``: that set, or a step's output dir holding it as archives.JOB): its WER is then
    not a held-out figure. None otherwise."""
    here, there = Path(nbest_dir).resolve(), Path(tuned_on).resolve()
    if here != there and there not in here.parents:
        return None
    return (f"{nbest_dir} is the N-best set the setting was tuned on ({tuned_on}): its WER is not a held-out figure "
            f"(tune on a dev set and apply the setting to a test set, or rescore-tune --cross-validate)")


def params_check(nbest_dir: PathLike, params_file: Optional[PathLike]) -> Optional[NoteCheck]:
    """A --params file (what rescore-tune --params-out writes) whose ``tuned_on`` is this N-best
    set: a warning (tuned_on_warning); None otherwise, and for a file without ``tuned_on``."""
    if params_file is None:
        return None
    from rescore.io.files import read_json  # (lazy: keeps rescore.io out of the start-up)

    d = read_json(params_file)
    tuned_on = d.get("tuned_on") if isinstance(d, dict) else None
    if not isinstance(tuned_on, str):
        return None
    w = tuned_on_warning(nbest_dir, tuned_on)
    return None if w is None else NoteCheck("params", f"params       {params_file}: tuned on {tuned_on}", [w])


def log_checks(records: Iterable[Mapping]) -> None:
    """Each check's summary line in the log, then its warnings as warnings."""
    records = list(records)
    for c in records:
        if c.get("line"):
            log.info("%s", " ".join(c["line"].split()))
    for c in records:
        for w in c.get("warnings") or []:
            log.warning("%s", w)


@dataclass
class InputChecks(JsonRecord):
    """What a command checked of its input: each LM's vocabulary, the symbol table, and the
    references' checks (their style, the first pass, the training texts, the setting's set)."""

    vocabulary: List[VocabularyCheck] = field(default_factory=list)
    symbol_table: Optional[SymbolTableCheck] = None
    references: List[JsonRecord] = field(default_factory=list)  # rescore.nbest.refs' (each: line, warnings)

    @property
    def warnings(self) -> List[str]:
        return ([w for v in self.vocabulary for w in v.warnings] + (self.symbol_table.warnings
                                                                    if self.symbol_table else [])
                + [w for c in self.references for w in c.warnings])


def model_vocabulary(path: PathLike) -> List[str]:
    """The words of a rescore checkpoint (its vocabulary; nothing else of it is used here; the
    dict read is kept for the model's loading, which follows)."""
    from rescore.models import read_checkpoint  # (lazy: keeps torch out of rescore-nbest's start-up)

    vocab = read_checkpoint(path, "cpu", keep=True)["vocab"]
    if not isinstance(vocab, (list, tuple)) or not all(isinstance(w, str) for w in vocab):
        raise RescoreError("a checkpoint whose vocab is a list of words", path=path)
    return list(vocab)


def _lexicon(words_txt: Optional[Path]) -> Optional[List[str]]:
    from rescore.io.symbols import read_vocabulary  # (lazy: keeps rescore.io out of rescore-nbest's start-up)

    return read_vocabulary(words_txt).words[2:] if words_txt is not None else None


def check_nbest_input(nbest, models: Sequence[PathLike] = (), words_txt: Optional[PathLike] = None,
                      allow_oov_rate: bool = False, *, fmt: str = "kaldi",
                      train_sentences: Optional[Sequence[Sequence[str]]] = None,
                      train_text: Optional[PathLike] = None, params_file: Optional[PathLike] = None) -> InputChecks:
    """Every check of a loaded N-best set (rescore.nbest.sets.NbestSet) before it is scored or
    tuned, the same for rescore-nbest, rescore-tune (and --refine-model) and the Kaldi steps that
    call them: each LM checkpoint of ``models`` against its words; the symbol table when the
    words come from integer archives; with references, their style against the hypotheses', the
    first pass against them (rescore.nbest.refs, format ``fmt``), the LM training text
    (``train_sentences`` of ``train_text``) and each model's fingerprint of it, and a
    ``params_file`` tuned on this set. Logs the summary and the warnings; an LM with more than
    OOV_ERROR_RATE of the hypothesis tokens outside its vocabulary is a RescoreError unless
    allow_oov_rate."""
    # the words.txt given, else the one beside the input (a Kaldi dir's: found when it was loaded)
    wt = nbest.kaldi.words_txt if nbest.kaldi is not None and words_txt is None else words_txt_of(nbest.path, words_txt)
    lexicon = _lexicon(wt) if models else None  # (the style check needs the hypotheses' words alone)
    hyp_tokens = list(itertools.chain.from_iterable(h.words for u in nbest.utterances() for h in u.hyps))
    ref_tokens = None if nbest.refs is None else [w for r in nbest.refs.values() for w in r]
    checks = InputChecks()
    for m in models:
        if is_hf_spec(m):  # a subword LM: no word vocabulary, every word is scored by its pieces
            log.info("vocabulary   %s: a subword LM (no word vocabulary), not checked", m)
            continue
        checks.vocabulary.append(vocabulary_check(str(m), model_vocabulary(m), hyp_tokens, ref_tokens,
                                                  lexicon=lexicon, words_txt=wt))
    if nbest.refs is not None:
        style = style_check(ref_tokens, hyp_tokens, lexicon or ())
        checks.references += [style] if style else []
        if nbest.kaldi is not None and nbest.kaldi.ids_only:
            first = {u.id: u.hyps[0].words for u in nbest.utterances()}
            checks.symbol_table = symbol_table_check(first, nbest.refs, wt)
        checks.references += reference_checks(nbest, fmt, train_sentences, None if train_text is None
                                              else str(train_text), first_pass=checks.symbol_table is None,
                                              models=[str(m) for m in models])
    tuned = params_check(nbest.path, params_file)
    checks.references += [tuned] if tuned else []
    for line in format_input_checks(checks.as_dict(), warnings=False):
        if line:
            log.info("%s", " ".join(line.split()))
    for w in checks.warnings:
        log.warning("%s", w)
    for v in checks.vocabulary:
        if v.hyp_oov_rate > OOV_ERROR_RATE and not allow_oov_rate:
            raise RescoreError(f"an LM whose vocabulary covers the hypotheses (at most {OOV_ERROR_RATE:g} % of "
                               f"their tokens outside it; {ALLOW_OPTION} scores them anyway)", path=v.model,
                               got=f"{v.hyp_oov_rate:.1f} % of {v.hyp_tokens} tokens of {nbest.path} outside its "
                                   f"{v.vocab_size} words" + (f"; {v.hint}" if v.hint else ""))
    return checks


def check_text_input(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Mapping[str, Sequence[str]]],
                     train_sentences: Optional[Sequence[Sequence[str]]] = None,
                     train_text: Optional[PathLike] = None) -> List[JsonRecord]:
    """The checks of rescore-wer's input, those of check_nbest_input that apply to texts:
    references (utt -> words) against each hypothesis text (its path -> utt -> words): their
    style, the 1-best against them as a first pass, and the LM training text. Logged as
    check_nbest_input logs them; returns the records."""
    hyp_tokens = [w for h in hyps.values() for ws in h.values() for w in ws]
    records: List[JsonRecord] = []
    style = style_check((w for r in refs.values() for w in r), hyp_tokens)
    records += [style] if style else []
    for path, h in hyps.items():
        c = first_pass_check(h, refs, str(path), "text")
        records += [c] if c is not None else []
    records += training_text_checks(refs, train_sentences, None if train_text is None else str(train_text))
    log_checks(records)
    return records


def check_model_text(sentences: Sequence[Sequence[str]], text: PathLike, models: Sequence[PathLike],
                     train_sentences: Optional[Sequence[Sequence[str]]] = None,
                     train_text: Optional[PathLike] = None) -> List[JsonRecord]:
    """rescore-ppl's check of its TEXT (sentences) as check_nbest_input checks references: against
    the LM training text and each model's fingerprint of it (a perplexity on a text the LM was
    trained on is not a held-out figure either). Logged; returns the records."""
    refs = {f"{text}:{i + 1}": s for i, s in enumerate(sentences)}
    records = training_text_checks(refs, train_sentences, None if train_text is None else str(train_text),
                                   [str(m) for m in models])
    log_checks(records)
    return records
