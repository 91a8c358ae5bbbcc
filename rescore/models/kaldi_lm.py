"""Import a neural LM trained by Kaldi's ``steps/pytorchnn/train.py`` as a rescore checkpoint.

Kaldi's train.py saves ``model.state_dict()`` of its model.py ``RNNModel`` (LSTM, GRU) or
``TransformerModel``; its vocabulary file is a words.txt (``word id`` per line). Kaldi's
``compute_sentence_scores.py`` (what ``lmrescore_nbest_pytorchnn.sh`` runs) scores a hypothesis
with it; this module maps each of its conventions onto ours so that our engine gives the same
cost per sentence (the tests hold it to 1e-4):

* **Vocabulary ids.** Kaldi numbers the words of the vocabulary file by their line (first
  occurrence), not by the id column; ``<eps>``, ``#0`` and the like are ordinary rows of its
  softmax. We keep every word at the same index, so the weights are used as they are.
* **Sentence boundary.** Kaldi scores ``<s> w1 .. wn`` -> ``w1 .. wn <s>`` (``--sent-boundary``,
  one symbol for both ends, ``</s>`` unused) and the sentence score is the sum of all n + 1 word
  costs (``lmwt.nn.sum``), end of sentence included. That is our ``<eos> w1 .. wn`` ->
  ``w1 .. wn <eos>``: Kaldi's boundary word becomes our ``<eos>`` (same index).
* **OOV words.** Kaldi maps a word outside its vocabulary to ``--oov`` (``<unk>``) on both the
  input and the target side, with no penalty; Kaldi's OOV symbol becomes our ``<unk>`` (same
  index), and the steps script scores with ``--oov-penalty 0`` to match.
* **Tied weights.** compute_sentence_scores.py builds every model with ``tie_weights=True`` and
  load_state_dict copies ``decoder.weight`` last, so it scores an untied model with the output
  weights as its input embedding too. ``--tied`` checks that the two are equal; without it an
  untied model is imported the way Kaldi scores it, with a warning. Kaldi's scorer cannot load a
  model whose embedding size differs from its hidden size, so neither can we.
* **LSTM / GRU.** ``torch.nn.LSTM``/``GRU`` (sequence-first in Kaldi, batch-first here: the same
  weights) -> our ``lstm``/``gru`` body; the decoder is our tied softmax head.
* **Transformer.** Kaldi's ``TransformerModel`` (built with ``activation="gelu"``): the embedding
  times sqrt(E) plus the interleaved sinusoidal encoding of the absolute position (0 at ``<s>``),
  post-LayerNorm ``TransformerEncoderLayer``s with feed-forward width ``--hidden-dim`` (= E for a
  tied model), a causal mask, no final LayerNorm -> our ``kaldi-transformer`` body
  (rescore.models.bodies), whose window ``context`` plays the causal mask: exact for sentences of
  up to ``context`` tokens. Kaldi's ``pos_encoder.pe`` buffer is checked against the formula.
* **State carry.** Kaldi carries an LSTM's (h, c) from the first-pass best hypothesis of the
  previous utterance of the same job (after running it over the batch's padded length, so the
  state of a hypothesis shorter than the longest one has read padding), never a Transformer's and
  never a GRU's (its scorer indexes the state as an LSTM's (h, c) and fails on a GRU). That is a
  setting of the steps script, not of the model: recipes/steps/pytorchnn/lmrescore_nbest_pytorchnn.sh.
* **Rounding.** Kaldi writes each word cost with 4 decimals; we compare with its unrounded costs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Tuple, Union

import torch

from rescore.errors import RescoreError, check
from rescore.io.lines import iter_lines
from rescore.settings import KALDI_MODEL_TYPES
from rescore.vocab import EOS, UNK, Vocabulary
from rescore.models import ModelConfig
from rescore.models import TORCH_LOAD_ERRORS, build_model, load_plain, save_checkpoint
from rescore.models.bodies import interleaved_sinusoidal

log = logging.getLogger(__name__)

MODEL_TYPES = KALDI_MODEL_TYPES  # LSTM, GRU, Transformer
PathLike = Union[str, Path]


def read_kaldi_vocab(path: PathLike) -> List[str]:
    """Kaldi steps/pytorchnn's vocabulary: the first field of each ``word id`` line, index =
    order of first occurrence (the id column is not used, as in Kaldi's read_vocab)."""
    path = Path(path)
    if not path.is_file():
        raise RescoreError("an existing vocabulary file (Kaldi words.txt: 'word id' per line)",
                           path=path)
    words, seen = [], set()
    for n, line in iter_lines(path):  # UTF-8 and gzip errors name the line
        parts = line.split()
        if len(parts) != 2:
            raise RescoreError("'word id' (two fields)", path=path, line=n, got=line)
        if parts[0] not in seen:
            seen.add(parts[0])
            words.append(parts[0])
    if not words:
        raise RescoreError("a non-empty vocabulary", path=path)
    return words


def kaldi_shapes(model_type: str, ntoken: int, emsize: int, nhid: int, nlayers: int,
                 max_len: int = 5000) -> Dict[str, Tuple[int, ...]]:
    """Name -> shape of the state_dict Kaldi's model.py gives for these options."""
    shapes: Dict[str, Tuple[int, ...]] = {"encoder.weight": (ntoken, emsize),
                                          "decoder.weight": (ntoken, nhid if model_type != "Transformer" else emsize),
                                          "decoder.bias": (ntoken,)}
    if model_type in ("LSTM", "GRU"):
        gates = 4 if model_type == "LSTM" else 3
        for k in range(nlayers):
            shapes[f"rnn.weight_ih_l{k}"] = (gates * nhid, emsize if k == 0 else nhid)
            shapes[f"rnn.weight_hh_l{k}"] = (gates * nhid, nhid)
            shapes[f"rnn.bias_ih_l{k}"] = (gates * nhid,)
            shapes[f"rnn.bias_hh_l{k}"] = (gates * nhid,)
    elif model_type == "Transformer":
        shapes["pos_encoder.pe"] = (max_len, 1, emsize)
        E = emsize
        for k in range(nlayers):
            p = f"transformer_encoder.layers.{k}."
            shapes.update({p + "self_attn.in_proj_weight": (3 * E, E),
                           p + "self_attn.in_proj_bias": (3 * E,),
                           p + "self_attn.out_proj.weight": (E, E),
                           p + "self_attn.out_proj.bias": (E,),
                           p + "linear1.weight": (nhid, E), p + "linear1.bias": (nhid,),
                           p + "linear2.weight": (E, nhid), p + "linear2.bias": (E,),
                           p + "norm1.weight": (E,), p + "norm1.bias": (E,),
                           p + "norm2.weight": (E,), p + "norm2.bias": (E,)})
    else:
        raise RescoreError(f"a model type in {MODEL_TYPES}", got=model_type)
    return shapes


def _load_state_dict(path: Path) -> Dict[str, torch.Tensor]:
    if not path.is_file():
        raise RescoreError("an existing model file (Kaldi steps/pytorchnn/train.py --save)",
                           path=path)
    sd = load_plain(path, "a state_dict saved by torch.save (plain tensors)")
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        if isinstance(sd, dict) and sd.get("format") == "rescore-lm":
            got = "a rescore checkpoint (use it as it is, no import needed)"
        elif isinstance(sd, dict):
            k = next(k for k, v in sd.items() if not isinstance(v, torch.Tensor))
            got = f"a dict whose {k!r} is a {type(sd[k]).__name__}"
        else:
            got = type(sd).__name__
        raise RescoreError("a state_dict (a dict of tensors) as Kaldi's train.py saves it",
                           path=path, got=got)
    for k, v in sd.items():  # a run that diverged: every cost would be NaN
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise RescoreError("finite weights (a training run that diverged?)", path=path,
                               got=f"NaN or infinity in {k}")
    return sd


def _check_replaceable(out_path: Path) -> None:
    """An existing ``out_path`` may only be an earlier import (a re-import replaces it); a model
    that rescore-train-lm trained, or any other file, is not overwritten."""
    if not out_path.exists():
        return
    try:
        ck = torch.load(out_path, map_location="cpu", weights_only=True, mmap=True)
        earlier = isinstance(ck, dict) and isinstance(ck.get("imported_from"), dict)
    except TORCH_LOAD_ERRORS:  # unreadable: not an earlier import either
        earlier = False
    if not earlier:
        raise RescoreError("no model.pt in OUT_DIR, or one an earlier rescore-import-kaldi-lm "
                           "wrote (this one it did not: choose another OUT_DIR)", path=out_path)
    log.info("replacing the earlier import %s", out_path)


def check_state_dict(sd: Dict[str, torch.Tensor], expected: Dict[str, Tuple[int, ...]],
                     path: PathLike, options: str) -> None:
    """Refuse a state_dict whose names or shapes are not those of ``expected``."""
    problems = []
    pe = "pos_encoder.pe"
    missing = [k for k in expected if k not in sd]
    unexpected = [k for k in sd if k not in expected]
    if missing:
        problems.append(f"missing {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    if unexpected:
        problems.append(f"unexpected {', '.join(unexpected[:5])}"
                        + (" ..." if len(unexpected) > 5 else ""))
    for k, shape in expected.items():
        if k not in sd:
            continue
        got = tuple(sd[k].shape)
        ok = got == shape if k != pe else (len(got) == 3 and got[1:] == shape[1:])
        if not ok:
            problems.append(f"{k} has shape {list(got)}, {options} give {list(shape)}")
    if problems:
        raise RescoreError(f"the state_dict of Kaldi's model.py for {options}", path=path,
                           got="; ".join(problems))


def rescore_config(model_type: str, vocab_size: int, emsize: int, nhid: int, nlayers: int,
                   nhead: int, context: int):
    """The ModelConfig of our model that computes what Kaldi's does."""
    if model_type == "Transformer":
        if nhid % emsize:
            raise RescoreError("a Transformer feed-forward size (--hidden-dim) that is a "
                               "multiple of --embedding-dim", got=f"{nhid} and {emsize}")
        return ModelConfig(arch="kaldi-transformer", head="softmax", vocab_size=vocab_size,
                           hidden=emsize, layers=nlayers, dropout=0.0, n_heads=nhead,
                           context=context, positions="sinusoidal", ff_mult=nhid // emsize)
    return ModelConfig(arch=model_type.lower(), head="softmax", vocab_size=vocab_size,
                       hidden=nhid, layers=nlayers, dropout=0.0)


def rescore_vocab(words: List[str], sent_boundary: str, oov: str, path: PathLike) -> Vocabulary:
    """Kaldi's vocabulary with its boundary symbol renamed ``<eos>`` and its OOV symbol renamed
    ``<unk>``, every word at its index."""
    for sym, what in ((sent_boundary, "sentence boundary (--sent-boundary)"),
                      (oov, "OOV symbol (--oov)")):
        if sym not in words:
            raise RescoreError(f"the {what} {sym!r} in the vocabulary", path=path)
    rename = {sent_boundary: EOS, oov: UNK}
    for ours in (EOS, UNK):
        if ours in words and ours not in rename:
            raise RescoreError(f"no word {ours!r} besides the renamed boundary and OOV symbols "
                               f"({sent_boundary!r} -> {EOS}, {oov!r} -> {UNK})", path=path)
    return Vocabulary([rename.get(w, w) for w in words])


def import_kaldi_lm(model_path: PathLike, vocab_path: PathLike, out_path: PathLike, *,
                    model_type: str, embedding_dim: int, hidden_dim: int, nlayers: int,
                    nhead: int = 2, tied: bool = False, oov: str = "<unk>",
                    sent_boundary: str = "<s>", context: int = 200):
    """Write a rescore checkpoint at ``out_path`` for the Kaldi model at ``model_path`` (options
    as Kaldi's scripts give them: --model-type, --embedding-dim = emsize, --hidden-dim = nhid,
    --nlayers, --nhead). Returns the imported NeuralLM (eval mode)."""
    model_path, vocab_path, out_path = Path(model_path), Path(vocab_path), Path(out_path)
    _check_options(model_type, embedding_dim, hidden_dim, nlayers, nhead, context)
    _check_replaceable(out_path)
    words = read_kaldi_vocab(vocab_path)
    vocab = rescore_vocab(words, sent_boundary, oov, vocab_path)
    sd = _load_state_dict(model_path)
    rows = sd["encoder.weight"].shape[0] if "encoder.weight" in sd and sd["encoder.weight"].dim() == 2 else None
    if rows is not None and rows != len(words):  # Kaldi's scorer would index past its softmax
        raise RescoreError(f"as many words as {model_path}'s embedding has rows ({rows}; the "
                           "vocabulary the model was trained with)", path=vocab_path,
                           got=f"{len(words)} words")
    options = (f"--model-type {model_type} --embedding-dim {embedding_dim} --hidden-dim "
               f"{hidden_dim} --nlayers {nlayers} and a vocabulary of {len(words)} words")
    check_state_dict(sd, kaldi_shapes(model_type, len(words), embedding_dim, hidden_dim,
                                      nlayers), model_path, options)
    enc, dec = sd["encoder.weight"], sd["decoder.weight"]
    if tied and not torch.equal(enc, dec):
        raise RescoreError("tied weights (--tied): encoder.weight equal to decoder.weight",
                           path=model_path, got="weights that differ (trained without --tied?)")
    if not tied and not torch.equal(enc, dec):
        log.warning("%s is untied: Kaldi's compute_sentence_scores.py builds every model tied and "
                    "loads decoder.weight last, so it scores this model with decoder.weight as "
                    "its input embedding too; imported the same way", model_path)
    if model_type == "Transformer":
        pe = sd["pos_encoder.pe"][:, 0, :].float()  # (max_len, E)
        want = interleaved_sinusoidal(torch.arange(pe.shape[0]), embedding_dim)
        if not torch.allclose(pe, want, atol=1e-4):
            raise RescoreError("pos_encoder.pe as Kaldi's model.py PositionalEncoding makes it",
                               path=model_path, got="a different position encoding")

    config = rescore_config(model_type, len(words), embedding_dim, hidden_dim, nlayers, nhead,
                            context)
    model = build_model(config, vocab)
    ours = _our_parameters(sd, model_type, nlayers)
    params = dict(model.named_parameters())  # tied weights appear once
    left = set(params) - set(ours)
    assert not left, f"unmapped parameters {sorted(left)}"
    with torch.no_grad():
        for name, value in ours.items():
            params[name].copy_(value.to(params[name].dtype))
    model.eval()
    save_checkpoint(model, out_path, imported_from={
        "kaldi_model": str(model_path), "kaldi_vocab": str(vocab_path), "model_type": model_type,
        "embedding_dim": embedding_dim, "hidden_dim": hidden_dim, "nlayers": nlayers,
        "nhead": nhead, "tied": bool(tied), "oov": oov, "sent_boundary": sent_boundary})
    log.info("imported %s (%s, %d words, %d parameters) into %s", model_path, model_type,
             len(words), sum(p.numel() for p in model.parameters()), out_path)
    return model


def _check_options(model_type: str, embedding_dim: int, hidden_dim: int, nlayers: int, nhead: int,
                   context: int) -> None:
    """An OptionError naming the option for a model shape Kaldi's scorer cannot have built."""
    check(model_type in MODEL_TYPES, f"one of {', '.join(MODEL_TYPES)}", "--model-type", model_type)
    for name, value in (("--embedding-dim", embedding_dim), ("--hidden-dim", hidden_dim),
                        ("--nlayers", nlayers), ("--nhead", nhead), ("--context", context)):
        check(value >= 1, "an integer >= 1", name, value)
    # Kaldi's scorer ties the weights, which needs nhid == emsize
    check(embedding_dim == hidden_dim, "--embedding-dim equal to --hidden-dim (Kaldi's "
          "compute_sentence_scores.py builds every model with tied weights)", "--hidden-dim",
          f"{embedding_dim} and {hidden_dim}")
    check(model_type != "Transformer" or not embedding_dim % nhead, "--embedding-dim divisible by --nhead",
          "--nhead", f"{embedding_dim}, {nhead}")


def _our_parameters(sd: Dict[str, torch.Tensor], model_type: str, nlayers: int) -> Dict[str, torch.Tensor]:
    """Kaldi's parameters under our names (the embedding is Kaldi's decoder.weight: see the
    warning on untied models)."""
    ours = {"embedding.weight": sd["decoder.weight"], "decoder.bias": sd["decoder.bias"]}
    if model_type in ("LSTM", "GRU"):
        for k, v in sd.items():
            if k.startswith("rnn."):
                ours["body." + k] = v
    else:
        for i in range(nlayers):
            p, q = f"transformer_encoder.layers.{i}.", f"body.blocks.{i}."
            ours[q + "in_proj.weight"] = sd[p + "self_attn.in_proj_weight"]
            ours[q + "in_proj.bias"] = sd[p + "self_attn.in_proj_bias"]
            for name in ("self_attn.out_proj", "linear1", "linear2", "norm1", "norm2"):
                for t in ("weight", "bias"):
                    ours[q + name.replace("self_attn.", "") + "." + t] = sd[p + name + "." + t]
    return ours


__all__ = ["MODEL_TYPES", "import_kaldi_lm", "kaldi_shapes", "read_kaldi_vocab"]
