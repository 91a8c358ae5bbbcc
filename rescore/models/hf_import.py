"""A pretrained causal LM as a directory ``--model hf:DIR`` reads (rescore-import-lm).

The source is a GGUF file (llama.cpp's format; transformers reads it with ``gguf_file=``) or a
local ``from_pretrained`` directory. Everything is read offline (``local_files_only``) and no
code from the model is executed: ``trust_remote_code`` is off, and a config or tokenizer that
asks for custom code (``auto_map``) is refused. The output directory holds:

* ``config.json`` and ``model.safetensors``: the model as ``save_pretrained`` writes it. A
  GGUF-loaded model keeps its GGUF link in its config and ``save_pretrained`` refuses it, so it
  is rebuilt from its config (without the quantisation entry) and its state dict (the
  dequantised weights) copied in; the rebuilt model's logits are checked against the loaded one's;
* the tokenizer files, its BOS and EOS set to the chosen sentence-boundary tokens (the tokens
  that start a conversation's stream and end each sentence: rescore.models.hf);
* ``rescore-import.json``: the source (file name, SHA-256), the boundary tokens chosen and the
  candidates seen, the architecture, the dtype and the logit check.

The boundary default prefers the plain document boundary of the vocabulary (``<|endoftext|>``,
``</s>``, ``<|end_of_text|>``, ``<eos>``) to the tokenizer's own EOS where that is a chat
token (an instruct model's ``<|im_end|>``): the N-best hypotheses are plain sentences, not chat
turns. The BOS is the tokenizer's own where it is a document-start token (``<s>``,
``<|begin_of_text|>``, ``<bos>``), else the chosen EOS (GPT-2's convention).
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from rescore.errors import RescoreError
from rescore.io.files import read_json
from rescore.io.outdir import DirReplacement, atomic_output, sha256
from rescore.models.hf import _transformers as hf_transformers
from rescore.models.hf import check_json_files, load_error, load_errors, load_hf
from rescore.progress import library_bars
from rescore.settings import IMPORT_DTYPES

log = logging.getLogger(__name__)

RECORD = "rescore-import.json"
DOC_EOS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>")
DOC_BOS = ("<s>", "<|begin_of_text|>", "<bos>")
DTYPES = {name: getattr(torch, name) for name in IMPORT_DTYPES}  # float32, bfloat16, float16
# the gguf reader's own errors, beyond load_errors(): a truncated file ends inside a struct it unpacks
GGUF_ERRORS = (struct.error,)
PROBE = "the cat sat on the mat and it was closely related to the american lobster"


def _transformers():
    return hf_transformers()


def resolve_source(source) -> Tuple[Path, Optional[str]]:
    """(directory, GGUF file name or None) of SOURCE: a ``.gguf`` file, a directory with one
    ``.gguf`` and no config.json, or a from_pretrained directory (config.json)."""
    p = Path(source)
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise RescoreError("a .gguf file or a from_pretrained directory", path=p,
                               got=f"a file of suffix {p.suffix or '(none)'}")
        return p.parent, p.name
    if not p.is_dir():
        raise RescoreError("a .gguf file or a from_pretrained directory", path=p, got="no such file or directory")
    if (p / "config.json").is_file():
        return p, None
    ggufs = sorted(x.name for x in p.glob("*.gguf"))
    if len(ggufs) == 1:
        return p, ggufs[0]
    raise RescoreError("a from_pretrained directory (config.json) or a directory with one .gguf file",
                       path=p, got=f"{len(ggufs)} .gguf files and no config.json")


def _refuse_custom_code(directory: Path) -> None:
    """A config or tokenizer config naming custom code (``auto_map``) is refused: only the
    architectures of the installed transformers are loaded. (Every JSON file of the dir is read
    first: a broken one is an error naming it.)"""
    check_json_files(directory)
    for name in ("config.json", "tokenizer_config.json"):
        f = directory / name
        if not f.is_file():
            continue
        data = read_json(f, finite=False)
        if isinstance(data, dict) and data.get("auto_map"):
            raise RescoreError("a model of an architecture transformers ships (no custom code: "
                               "rescore never runs code from a model directory)", path=f,
                               got=f"auto_map {sorted(data['auto_map'])}")


def _special_tokens(tokenizer) -> List[str]:
    """The special tokens of the tokenizer: its named ones and its added special tokens."""
    out = list(dict.fromkeys(str(t) for t in tokenizer.all_special_tokens))
    for t in getattr(tokenizer, "added_tokens_decoder", {}).values():
        if getattr(t, "special", False) and str(t) not in out:
            out.append(str(t))
    return out


def _token_id(tokenizer, token: str, option: str) -> int:
    ids = tokenizer.convert_tokens_to_ids([token])
    unk = tokenizer.unk_token_id
    if not ids or ids[0] is None or (ids[0] == unk and token != tokenizer.unk_token):
        raise RescoreError(f"a token of the vocabulary for {option}", got=token)
    return int(ids[0])


def choose_boundary(tokenizer, bos: Optional[str] = None, eos: Optional[str] = None) -> Tuple[str, str, str]:
    """(BOS, EOS, how each was chosen): ``bos``/``eos`` where given, else the module
    docstring's defaults."""
    vocab = tokenizer.get_vocab()
    why = []
    if eos is None:
        eos = next((t for t in DOC_EOS if t in vocab), None)
        if eos is not None and eos == tokenizer.eos_token:
            why.append(f"EOS {eos}: the tokenizer's own, a document boundary")
        elif eos is not None:
            why.append(f"EOS {eos}: the vocabulary's document boundary (the tokenizer's own EOS is "
                       f"{tokenizer.eos_token})")
        elif tokenizer.eos_token is not None:
            eos = str(tokenizer.eos_token)
            why.append(f"EOS {eos}: the tokenizer's own (no plain document-boundary token in the vocabulary)")
        else:
            raise RescoreError("a tokenizer with an EOS token or one of " + ", ".join(DOC_EOS) + " (else give --eos)",
                               got="none")
    else:
        why.append(f"EOS {eos}: --eos")
    if bos is None:
        own = tokenizer.bos_token
        if own is not None and str(own) in DOC_BOS:
            bos = str(own)
            why.append(f"BOS {bos}: the tokenizer's own, a document start")
        else:
            bos = eos
            why.append(f"BOS {bos}: the EOS (the tokenizer's own BOS is {own})")
    else:
        why.append(f"BOS {bos}: --bos")
    _token_id(tokenizer, eos, "--eos")
    _token_id(tokenizer, bos, "--bos")
    return bos, eos, "; ".join(why)


def _plain_copy(model, dtype: torch.dtype):
    """The model rebuilt from its config without a quantisation entry, its state dict copied:
    a model save_pretrained writes (a GGUF-loaded one is refused)."""
    tf = _transformers()
    cfg = model.config
    cfg_dict = cfg.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg_dict.pop("_name_or_path", None)
    new_cfg = type(cfg).from_dict(cfg_dict)
    new_cfg.dtype = dtype
    plain = tf.AutoModelForCausalLM.from_config(new_cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    tied = set(getattr(plain, "_tied_weights_keys", None) or {})
    if unexpected or [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]:
        raise RescoreError("a state dict that fits the model rebuilt from its config",
                           got=f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    plain.tie_weights()
    return plain.eval()


def _probe_logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits.float()


def _inputs(directory: Path, gguf: Optional[str]) -> List[Path]:
    """The files an import reads: the GGUF file, or the files of the from_pretrained dir (not
    its subdirectories: an earlier import written inside it is not an input)."""
    if gguf is not None:
        return [directory / gguf]
    return [f for f in directory.iterdir() if f.is_file()]


def import_lm(source, out_dir, bos: Optional[str] = None, eos: Optional[str] = None,
              dtype: str = "float32") -> dict:
    """Write SOURCE (a GGUF file or a from_pretrained directory) to ``out_dir`` as a directory
    rescore.models.hf.load_hf reads (module docstring); returns the record written."""
    directory, gguf = resolve_source(source)
    out = Path(out_dir)
    if out.resolve() == directory.resolve():
        raise RescoreError("an output directory other than the source's", path=out, got="the source directory")
    target = DirReplacement(out, RECORD, _inputs(directory, gguf), kind="an earlier import")
    target.check()  # (before the model is read: an OUT_DIR that cannot be written is refused first)
    if gguf is None:
        _refuse_custom_code(directory)
    tf = _transformers()
    library_bars()  # (no bars of shard loading; the GGUF conversion's by rescore.progress's rule)
    kw = dict(local_files_only=True, trust_remote_code=False)
    if gguf is not None:
        kw["gguf_file"] = gguf
        try:
            import gguf as _  # noqa: F401  (lazy: gguf is the optional 'hf' extra)
        except ImportError:
            raise RescoreError("the gguf package to read a GGUF file (pip install 'rescore[hf]')",
                               path=directory / gguf, got="gguf not installed") from None
    src = directory / gguf if gguf else directory
    log.info("reading %s (offline, no code from the model)", src)
    try:
        tokenizer = tf.AutoTokenizer.from_pretrained(str(directory), **kw)
        model = tf.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, **kw).eval()
    except (*load_errors(), *GGUF_ERRORS, ImportError) as err:
        raise load_error("a causal LM and tokenizer transformers can load from local files",
                         directory if gguf is None else src, err) from None
    specials = _special_tokens(tokenizer)
    bos, eos, why = choose_boundary(tokenizer, bos, eos)
    log.info("sentence boundary: %s (special tokens: %s)", why, " ".join(specials))
    reference = _probe_logits(model, tokenizer)
    if gguf is not None or getattr(model.config, "quantization_config", None) is not None:
        model = _plain_copy(model, DTYPES[dtype])
    tokenizer.bos_token, tokenizer.eos_token = bos, eos
    from safetensors import SafetensorError  # (comes with transformers)

    with target as tmp:
        try:
            model.to(DTYPES[dtype]).save_pretrained(str(tmp), safe_serialization=True)
        except SafetensorError as err:  # its writer's I/O errors (a full disk, the file-size limit) are its own
            raise RescoreError("room to write the model (free disk space, and a file-size limit above its size)",
                               path=out / "model.safetensors", got=f"SafetensorError: {err}") from None
        tokenizer.save_pretrained(str(tmp))
        back = load_hf(str(tmp), torch.device("cpu"))
        diff = float((_probe_logits(back.model, back.tokenizer) - reference).abs().max())
        if dtype == "float32" and diff > 1e-4:
            raise RescoreError("the written model's logits equal the source's (to 1e-4)", path=src,
                               got=f"max |difference| {diff:.3g}")
        if back.eos_id != _token_id(tokenizer, eos, "--eos") or back.bos_id != _token_id(tokenizer, bos, "--bos"):
            raise RescoreError("the chosen boundary tokens in the written tokenizer", path=src,
                               got=f"BOS {back.bos_id}, EOS {back.eos_id}")
        record = {"source": src.name, "format": "gguf" if gguf else "from_pretrained",
                  "sha256": sha256(src) if gguf else None, "architecture": type(model).__name__,
                  "parameters": sum(p.numel() for p in model.parameters()), "dtype": dtype,
                  "bos_token": bos, "eos_token": eos, "boundary_choice": why,
                  "special_tokens": specials, "probe_max_abs_logit_diff": diff,
                  "transformers": tf.__version__}
        with atomic_output(tmp / RECORD, "w") as f:
            f.write(json.dumps(record, indent=2) + "\n")
    log.info("wrote %s: %s, %d parameters, %s; logits within %.2g of the source's", out,
             record["architecture"], record["parameters"], dtype, diff)
    return record
