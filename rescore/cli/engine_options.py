"""The NN LM scoring options of rescore-nbest: ``--model``, ``--split`` and the engine's settings,
generated from the fields of ``rescore.settings.EngineSettings`` (their choices, defaults and
help), so that each setting is spelled once.

Kept apart from rescore/cli/nbest.py so that command stays readable: it adds ``@engine_options``
and turns the values into an EngineSettings with ``engine_settings``.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import click

from rescore.cli.options import MAX_BATCH, MAX_TOKENS, MAX_WINDOW, Count, Need, Real
from rescore.settings import OOV_AUTO, EngineSettings, is_hf_spec, option_name


class OovPenalty(click.ParamType):
    """A finite number of nats >= 0, or 'auto' (resolved once the model and the training text are
    loaded)."""

    name = "NATS|auto"

    def convert(self, value, param, ctx):
        if value == OOV_AUTO:
            return value
        try:
            return Real(0.0).convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected a finite number of nats >= 0 or '{OOV_AUTO}', got {value!r}", param, ctx)


# The type of each numeric setting (rescore.cli.options: finite, in range, bounded where memory
# follows the value); a numeric setting without one fails at import.
_TYPES = {
    "max_tokens": Count(1, MAX_TOKENS),
    "conv_batch": Count(1, MAX_BATCH),
    "cache_window": Count(0, MAX_WINDOW),
    "cache_theta": Real(0.0, low_open=True),
    "cache_lambda": Real(0.0, 1.0, high_open=True),
    "history_min_posterior": Real(0.0, 1.0),
    "hf_context": Count(1, MAX_TOKENS),
    "oov_penalty": OovPenalty(),
}


_MODEL = click.option(
    "--model", type=click.Path(dir_okay=False), multiple=True,
    help="LM checkpoint (rescore-train-lm): score every hypothesis with it and write "
         "OUT_DIR/lmwt.nn (Kaldi pytorchnn format) instead of reading --nn-costs. "
         "Repeat it (--model A --model B) to interpolate several NN LMs with --mix: "
         "each is scored on its own (its own vocabulary, body and OOV penalty) into "
         "OUT_DIR/lmwt.nn.1 ... lmwt.nn.K, and lmwt.nn holds the mixed costs. "
         "hf:DIR: a Hugging Face causal LM (save_pretrained's directory, local files "
         "only; the hf extra: pip install -e '.[hf]'), its subword costs summed per word.")
_SPLIT = click.option(
    "--split", "split_spec", metavar="K/N",
    help="Score only job K of N (contiguous runs of --conv-batch blocks of "
         "conversations); `cat` the jobs' lmwt.nn in job order to get exactly the "
         "one-process file. A job parses only its conversations' entries (every "
         "key and the data dir are still checked; a bad value is the error of the "
         "job that owns it). Each job needs its own OUT_DIR (Kaldi's archives.JOB): "
         "a dir that holds another job's outputs is refused.")
_AFTER = {"conv_batch": _SPLIT}  # --split's place among the settings in --help


def _option(f, help=None) -> click.Option:
    """The click option of one EngineSettings field (its metadata: help, choices; its type of
    _TYPES; help: another help text)."""
    meta = f.metadata
    kw = {"help": help or meta["help"], "default": f.default}
    if meta["choices"] is not None:
        kw["type"] = click.Choice(meta["choices"])
    elif f.name in _TYPES:
        kw["type"] = _TYPES[f.name]
    elif f.default is not MISSING and not isinstance(f.default, str):
        raise TypeError(f"EngineSettings.{f.name}: a numeric setting needs its option type in _TYPES")
    if meta["show_default"] is not None:
        kw["show_default"] = meta["show_default"]
    return click.option(option_name(f.name), f.name, **kw)


def _options() -> list:
    out = [_MODEL]
    for f in fields(EngineSettings):
        out.append(_option(f))
        if f.name in _AFTER:
            out.append(_AFTER[f.name])
    return out


def engine_options(f):
    """Add --model, --split and one option per engine setting (keyword arguments ``model``,
    ``split_spec`` and the settings' field names)."""
    for opt in reversed(_options()):
        f = opt(f)
    return f


def engine_option(name: str, help: str):
    """The click option of the engine setting ``name`` (its choices, default and type) with
    another help text: for a command that passes a few settings on (rescore-tune --refine-model)."""
    return _option(next(f for f in fields(EngineSettings) if f.name == name), help)


MODEL_NEEDED = "--model (it sets how the NN LM scores; with --nn-costs, or no NN LM, none is run)"


def _model(p) -> bool:
    return bool(p["model"])


def engine_needs() -> dict:
    """What each engine setting needs to act (rescore.cli.options.Need, by option): --model; the
    neural cache's settings a cache; --mix-carry several models that carry the rescored state;
    --hf-context a Hugging Face LM; --schedule the fast engine; --conv-batch, which also sizes
    the blocks of --split, --model or --split."""
    needs = {option_name(f.name): Need(_model, MODEL_NEEDED) for f in fields(EngineSettings)}
    cache = Need(lambda p: _model(p) and p["cache_window"] > 0,
                 "--model with --cache-window > 0 (the neural cache it sets)")
    needs.update({
        "--conv-batch": Need(lambda p: _model(p) or p["split_spec"] is not None,
                             "--model or --split (it sizes the blocks of conversations scored or split)"),
        "--cache-theta": cache,
        "--cache-lambda": cache,
        "--mix-carry": Need(lambda p: len(p["model"]) >= 2 and p["state_carry"] == "rescored",
                            "two or more --model with --state-carry rescored (the carried states it chooses)"),
        "--hf-context": Need(lambda p: any(map(is_hf_spec, p["model"])),
                             "a --model hf:DIR (the carried context of a Hugging Face LM)"),
        "--schedule": Need(lambda p: _model(p) and p["engine"] == "fast",
                           "--model with --engine fast (the fast engine's order of work)"),
    })
    return needs


def engine_settings(values: dict) -> EngineSettings:
    """The EngineSettings of ``@engine_options``' values (``values``: the command's keyword
    arguments; those that are not settings are ignored)."""
    return EngineSettings(**{f.name: values[f.name] for f in fields(EngineSettings)})
