"""Hugging Face causal LMs as the NN LM of rescore-nbest: ``--model hf:DIR``.

DIR is a local directory as ``save_pretrained`` writes it: a ``config.json``, the weights
(``model.safetensors``, or a ``pytorch_model.bin`` read with ``weights_only``) and the tokenizer
files (``tokenizer.json`` and ``tokenizer_config.json``, or a slow tokenizer's files). Loading
never touches the network (``local_files_only``) and never runs code shipped with a model
(no ``trust_remote_code``). Needs the ``hf`` extra: ``pip install -e '.[hf]'`` in rescore's
repository, or the built wheel with ``[hf]`` (rescore is not on PyPI).

Words and subword pieces: the tokenizer is applied to each word on its own, with the leading
space of GPT-2 style byte-level BPE: the pieces of word ``w`` are ``tokenizer(" " + w)`` (no
special tokens). A SentencePiece-style tokenizer that marks the word start itself (``"a"`` gives
``"▁a"``) gets ``tokenizer(w)`` instead, so no lone space piece is scored. A hypothesis
``w1 .. wn`` is the token sequence ``pieces(w1) .. pieces(wn)``, every word with its leading
space, the first one too. Its costs are word-aligned as those of
rescore's own LMs (the lines of ``lmwt.nn``): the cost of word i is the sum of the costs
``-ln P(piece | everything before)`` of its pieces, then one cost for the end of sentence.

Sentence start and end: a conversation is the token stream
``<bos> s1 <eos> s2 <eos> ...`` (``<bos>``: the tokenizer's BOS token, its EOS token where it has
none, as GPT-2's ``<|endoftext|>`` is both); a hypothesis is scored after the context, and its
end-of-sentence cost is that of the EOS token after its last piece. The context is ``<bos>``
alone without carry; with carry it is the stream of the best hypotheses of the conversation's
earlier utterances, reset at each conversation's start and kept within ``context`` tokens (at
least one: the boundary token) a quarter window at a time (rescore.engine.hf._slide).
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import torch

from rescore.errors import OptionError, RescoreError
from rescore.io.files import read_json
from rescore.progress import library_bars
from rescore.settings import HF_PREFIX as PREFIX
from rescore.settings import OOV_AUTO, EngineSettings, is_hf_spec

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = EngineSettings.hf_context  # tokens of carried context (rescore-nbest --hf-context)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model",
                    "spiece.model", "vocab.txt")
_JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
               "special_tokens_map.json", "added_tokens.json", "model.safetensors.index.json",
               "pytorch_model.bin.index.json")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def _transformers():
    try:
        import transformers  # (lazy: transformers is the optional 'hf' extra)
    except ImportError:
        raise RescoreError("the transformers package for an hf: model "
                           "(the hf extra: pip install -e '.[hf]' in rescore's repository)",
                           got="transformers not installed") from None
    return transformers


def load_errors() -> tuple:
    """What loading a local model dir with transformers raises on files it cannot read: a
    truncated or corrupt ``model.safetensors`` (safetensors' SafetensorError), a
    ``pytorch_model.bin`` with code in its pickle (UnpicklingError of the weights-only unpickler:
    the code never runs) or truncated (EOFError, RuntimeError of torch's zip reader), a config or
    tokenizer file that is not JSON (ValueError; transformers' OSError naming the file), and
    transformers' own refusals (OSError, ValueError, KeyError, TypeError)."""
    from safetensors import SafetensorError  # (safetensors comes with transformers)

    return (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError,
            zipfile.BadZipFile, SafetensorError)


def load_error(expected: str, path: Path, err: BaseException) -> RescoreError:
    """The RescoreError of a load error of model dir ``path`` (:func:`load_errors`), naming the
    file it is about where the error's type tells: safetensors' errors and those of torch's
    reader of ``pytorch_model.bin`` (a pickle, a zip) are about the weights file."""
    name = type(err).__name__
    if name == "error":  # (struct.error, zlib.error: the module says whose)
        name = f"{type(err).__module__}.{name}"
    if name == "SafetensorError":
        candidates = _WEIGHT_FILES
    elif isinstance(err, (pickle.UnpicklingError, EOFError, RuntimeError, zipfile.BadZipFile)):
        candidates = _WEIGHT_FILES[2:] + _WEIGHT_FILES[:2]
    else:
        candidates = ()
    at = next((path / c for c in candidates if (path / c).is_file()), path)
    return RescoreError(expected, path=at, got=f"{name}: {describe_load_error(err)}")


def describe_load_error(err: BaseException) -> str:
    """A load error in one line: the weights-only unpickler's refusal says what it means."""
    if isinstance(err, pickle.UnpicklingError) and "weights only" in str(err).lower():
        return "not plain weights (a pickle with code or other objects; none of it was run)"
    return (str(err).splitlines() or [""])[0][:200]


def _check_dir(path: Path) -> None:
    """A clear error before transformers is asked: it would look on the Hub for a missing dir."""
    if not path.is_dir():
        raise RescoreError("a local model directory (save_pretrained's config.json, weights and "
                           "tokenizer) after hf:", path=path, got="no such directory")
    if not (path / "config.json").is_file():
        raise RescoreError("a config.json in the model directory", path=path, got="none")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        raise RescoreError(f"model weights in the directory (one of {', '.join(_WEIGHT_FILES)})",
                           path=path, got="none")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise RescoreError(f"a tokenizer in the model directory (one of {', '.join(_TOKENIZER_FILES)}; "
                           "tokenizer.save_pretrained writes them)", path=path, got="none")
    check_json_files(path)


def check_json_files(path: Path) -> List[object]:
    """The JSON files of a model dir, each read by rescore's JSON reader: a broken one is an error
    naming it and its line (transformers' own errors name the dir at best). Returns their data."""
    return [read_json(path / name, finite=False) for name in _JSON_FILES if (path / name).is_file()]


class HfLM:
    """A loaded causal LM and its tokenizer, with the word -> pieces mapping (module docstring).

    ``scores_nbest``: a declared capability, that the engine (rescore.engine.score.score_nbest)
    scores it with its own scorer (rescore.engine.hf.score_hf), not through LanguageModel."""

    scores_nbest = True

    def __init__(self, model, tokenizer, path: str, context: int = DEFAULT_CONTEXT):
        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        self.context = context
        self.eos_id = tokenizer.eos_token_id
        if self.eos_id is None:
            raise RescoreError("a tokenizer with an EOS token (the end-of-sentence cost is its)",
                               path=path, got="eos_token None")
        self.bos_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else self.eos_id
        # a token id past the model's embeddings (a tokenizer config naming a token the vocabulary
        # lacks adds it) would be an IndexError in the middle of scoring
        self.num_ids = model.get_input_embeddings().num_embeddings
        for what, tok, i in (("EOS", tokenizer.eos_token, self.eos_id), ("BOS", tokenizer.bos_token, self.bos_id)):
            if not 0 <= i < self.num_ids:
                raise RescoreError(f"a tokenizer whose {what} token is in the model's vocabulary of {self.num_ids} "
                                   f"tokens", path=Path(path) / "tokenizer_config.json", got=f"{tok} (id {i})")
        cfg = model.config
        self.max_positions = int(getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", 0)
                                 or 1 << 30)
        self._pieces: Dict[str, Tuple[int, ...]] = {}
        first = tokenizer.convert_ids_to_tokens(tokenizer("a", add_special_tokens=False)["input_ids"][:1])
        self.space = "" if first and str(first[0]).startswith("\u2581") else " "  # (module docstring)

    def to(self, device: torch.device) -> "HfLM":
        self.model.to(device)
        return self

    def word_pieces(self, word: str) -> Tuple[int, ...]:
        """The token ids of ``" " + word`` (or of ``word`` for a tokenizer that marks the word
        start itself; no special tokens; module docstring); cached."""
        p = self._pieces.get(word)
        if p is None:
            p = tuple(self.tokenizer(self.space + word, add_special_tokens=False)["input_ids"])
            if not p:
                raise RescoreError("a word the tokenizer turns into at least one token", path=self.path,
                                   got=word)
            if max(p) >= self.num_ids:
                raise RescoreError(f"a tokenizer whose tokens are in the model's vocabulary of {self.num_ids} tokens",
                                   path=self.path, got=f"{word} -> token id {max(p)}")
            self._pieces[word] = p
        return p

    def encode(self, words: Sequence[str]) -> Tuple[List[int], List[int]]:
        """(token ids of the hypothesis, number of pieces of each word)."""
        ids: List[int] = []
        lens: List[int] = []
        for w in words:
            p = self.word_pieces(w)
            ids.extend(p)
            lens.append(len(p))
        return ids, lens


def load_hf(spec: str, device: torch.device, context: int = DEFAULT_CONTEXT) -> HfLM:
    """Load ``hf:DIR`` (or DIR) onto ``device``, fp32 weights (autocast on a GPU: the engine's)."""
    path = Path(spec[len(PREFIX):] if is_hf_spec(spec) else spec)
    _check_dir(path)
    tf = _transformers()
    kw = dict(local_files_only=True, trust_remote_code=False)
    try:
        tokenizer = tf.AutoTokenizer.from_pretrained(str(path), **kw)
    except load_errors() as err:
        raise load_error("a tokenizer transformers can load from local files", path, err) from None
    library_bars()  # (no bars of shard loading; the GGUF conversion's by rescore.progress's rule)
    model = None
    for attn in ("sdpa", "eager"):  # both take rescore.engine.hf's tree attention mask
        try:
            model = tf.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32,
                                                            attn_implementation=attn, **kw)
            break
        except load_errors() as err:
            if attn == "eager" or "sdpa" not in str(err).lower():
                raise load_error("a causal LM transformers can load from local files (config.json, "
                                 "safetensors or weights_only weights)", path, err) from None
    lm = HfLM(model.eval(), tokenizer, str(path), context).to(device)
    log.info("Hugging Face LM %s: %s, %d parameters, vocabulary %d, context %d tokens", path,
             type(model).__name__, sum(p.numel() for p in model.parameters()), len(tokenizer), context)
    return lm


def check_settings(settings: EngineSettings, num_models: int = 1) -> None:
    """The engine settings of a job with an hf: model among ``num_models``: those that do not apply
    to a subword LM are refused (OptionError) rather than ignored. The OOV penalty: a number other
    than 0 is refused, 'auto' (rescore-nbest's default with a words.txt or a training text) is 0
    for an hf: model, a tokenizer having no out-of-vocabulary word."""
    if settings.cache_window > 0:
        raise OptionError("no neural cache on an hf: model (it wraps rescore's own LMs)",
                          option="--cache-window", got=str(settings.cache_window))
    if settings.oov_penalty not in (None, OOV_AUTO) and settings.oov_penalty != 0:
        raise OptionError("no OOV penalty on an hf: model (its subword tokenizer has no "
                          "out-of-vocabulary word)", option="--oov-penalty", got=str(settings.oov_penalty))
    if num_models > 1 and settings.state_carry == "rescored" and settings.mix_carry == "mixed":
        raise OptionError("--mix-carry own with an hf: model among several (each carries from its "
                          "own best)", option="--mix-carry", got="mixed")


def load_for_scoring(spec: str, device: torch.device, settings: EngineSettings):
    """rescore.jobs.scoring.load_model for ``hf:DIR``: (model, device, OOV penalty 0), the settings
    checked (check_settings) and its context ``settings.hf_context``."""
    check_settings(settings)
    if settings.oov_penalty == OOV_AUTO:
        log.info("OOV penalty (auto): 0 for %s, a subword LM without out-of-vocabulary words", spec)
    return load_hf(spec, device, settings.hf_context), device, 0.0
