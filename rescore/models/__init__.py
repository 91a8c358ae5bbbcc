"""Language models: registry of bodies and heads, ``build_model`` and checkpoints.

A checkpoint is a ``torch.save`` dict of plain data only (loaded with ``weights_only=True``, so
loading never executes code):

    {"format": "rescore-lm", "version": 1,
     "config": ModelConfig as a dict, "vocab": list of words (index = id),
     "state_dict": model weights, ...extra (epoch, optimizer state, best valid loss...)}
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any, Dict, Union

import torch

from rescore.errors import RescoreError
from rescore.io.files import file_key
from rescore.models.base import EMPTY, HeadOutput, LanguageModel, LMState
from rescore.models.bodies import BODIES
from rescore.models.config import ModelConfig
from rescore.models.hf import describe_load_error
from rescore.models.heads import HEADS, register_head
from rescore.models.lm import NeuralLM

# The baseline heads (PSMM, pointer-generator) register themselves in HEADS when their module is
# imported; import them here.
from rescore.models import baselines  # noqa: E402,F401  (psmm, pointer-generator)
from rescore.io.files import atomic_output
from rescore.vocab import Vocabulary

FORMAT = "rescore-lm"
VERSION = 1

__all__ = ["BODIES", "EMPTY", "HEADS", "HeadOutput", "LanguageModel", "LMState", "ModelConfig",
           "NeuralLM", "build_model", "load_checkpoint", "read_checkpoint", "register_head",
           "save_checkpoint"]


def build_model(config: ModelConfig, vocab, counts=None) -> NeuralLM:
    """A freshly initialised model for ``vocab``; sets ``config.vocab_size`` = len(vocab).
    ``counts``: (V,) training counts, the classes of ``config.output == "class"``."""
    config.vocab_size = len(vocab)
    return NeuralLM(config, vocab, counts)


def save_checkpoint(model: LanguageModel, path: Union[str, Path], **extra: Any) -> None:
    """Write weights, config and vocabulary (and ``extra`` plain data) atomically to ``path``."""
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    path = Path(path)
    payload = {"format": FORMAT, "version": VERSION, "config": model.config.to_dict(),
               "vocab": list(model.vocab.words),
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    payload.update(extra)
    # serialized first: torch's writer turns an error of the file's write (a full disk: ENOSPC,
    # EFBIG) into a RuntimeError of its own, which atomic_output could not tell from a bug
    buf = io.BytesIO()
    torch.save(payload, buf)
    with atomic_output(path, "wb") as f:
        f.write(buf.getbuffer())


# Checkpoints read once and not yet loaded into a model: rescore-nbest checks each model's
# vocabulary before it scores, and unpickling a checkpoint's word list (30k strings through
# torch's weights-only unpickler) takes about 0.4 s, so ``load_checkpoint`` takes the dict that
# check read (when the file is unchanged) instead of reading it again. Each entry is taken once.
_READ: Dict[tuple, Dict[str, Any]] = {}


def read_checkpoint(path: Union[str, Path], device="cpu", keep: bool = False) -> Dict[str, Any]:
    """The checkpoint dict, checked to be a rescore LM checkpoint (no code is executed).
    ``keep`` (on the CPU): also hold it for the next ``read_checkpoint(keep=True)`` and
    ``load_checkpoint`` of the unchanged file, which then take it instead of reading again."""
    path = Path(path)
    if not path.is_file():
        raise RescoreError("an existing checkpoint file", path=path)
    key, keep = file_key(path), keep and str(device) == "cpu"
    if keep and key in _READ:  # held already (the checks of each job of a run)
        return _READ[key]
    ckpt = _read_checkpoint(path, device)
    if keep:
        _READ[key] = ckpt
    return ckpt


# What torch.load raises on a file it cannot read: a pickle with code that weights_only refuses
# (UnpicklingError; no code runs), a truncated or corrupt zip (RuntimeError from its zip reader,
# BadZipFile), a truncated pickle (EOFError, UnpicklingError), an unreadable file (OSError), a
# value of a type the weights-only unpickler does not build (ValueError, TypeError), a file that is
# neither zip nor pickle, e.g. text (KeyError of the legacy reader's first byte), a corrupt pickle
# stream (IndexError of the weights-only unpickler's stack, struct.error of a cut length field).
TORCH_LOAD_ERRORS = (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, TypeError, KeyError,
                     IndexError, struct.error, zipfile.BadZipFile)


def load_plain(path: Union[str, Path], expected: str, device="cpu", **kw) -> Any:
    """``torch.load(path, weights_only=True)``: plain data only, no code executed. A file it cannot
    read is a RescoreError naming it (``expected``: what it should have been)."""
    try:
        return torch.load(path, map_location=device, weights_only=True, **kw)
    except TORCH_LOAD_ERRORS as e:
        raise RescoreError(expected, path=path, got=f"{type(e).__name__}: {describe_load_error(e)}") from None


def _read_checkpoint(path: Path, device) -> Dict[str, Any]:
    ckpt = load_plain(path, "a rescore checkpoint (torch.save file of plain data)", device)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise RescoreError(f"a checkpoint with format {FORMAT!r}", path=path,
                           got="a foreign file" if not isinstance(ckpt, dict)
                           else f"format {ckpt.get('format')!r}")
    if ckpt.get("version") != VERSION:
        raise RescoreError(f"checkpoint version {VERSION}", path=path, got=str(ckpt.get("version")))
    for key in ("config", "vocab", "state_dict"):
        if key not in ckpt:
            raise RescoreError(f"a checkpoint with {key!r}", path=path)
    return ckpt


def model_from_checkpoint(ckpt: Dict[str, Any], path=None, device="cpu") -> NeuralLM:
    """Rebuild the model of a checkpoint dict (from ``read_checkpoint``)."""
    if not isinstance(ckpt["config"], dict) or not isinstance(ckpt["vocab"], (list, tuple)) \
            or not all(isinstance(w, str) for w in ckpt["vocab"]) \
            or not isinstance(ckpt["state_dict"], dict):
        raise RescoreError("a checkpoint whose config is a dict, vocab a list of words and "
                           "state_dict a dict of tensors", path=path)
    try:
        config = ModelConfig.from_dict(ckpt["config"], path=path)
        vocab = Vocabulary(ckpt["vocab"])
    except RescoreError as e:
        raise RescoreError(e.expected, path=path, got=e.got) from None
    except TypeError as e:
        raise RescoreError("a model config of known fields", path=path, got=str(e)) from None
    if len(vocab) != config.vocab_size:
        raise RescoreError(f"a vocabulary of {config.vocab_size} words", path=path,
                           got=str(len(vocab)))
    try:
        model = NeuralLM(config, vocab)
        model.load_state_dict(ckpt["state_dict"])
    except (RuntimeError, ValueError) as e:
        raise RescoreError("weights that fit the checkpoint's config", path=path,
                           got=str(e).splitlines()[0][:200]) from None
    for name, t in ckpt["state_dict"].items():  # a diverged run's weights give ppl nan, silently
        if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise RescoreError("finite weights (a run that diverged? train with a lower --lr)",
                               path=path, got=f"NaN or infinity in {name}")
    return model.to(device).eval()


def load_checkpoint(path: Union[str, Path], device="cpu") -> NeuralLM:
    """The model saved at ``path``, on ``device``, in eval mode."""
    path = Path(path)
    kept = _READ.pop(file_key(path), None) if path.is_file() else None  # moved to device below
    for key in [k for k in _READ if k[0] == str(path.resolve())]:  # read before the file changed
        del _READ[key]
    return model_from_checkpoint(kept if kept is not None else read_checkpoint(path, device),
                                 path=path, device=device)
