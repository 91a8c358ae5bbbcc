"""The NN LM scoring options of rescore-nbest: ``--model``, ``--split`` and the engine's settings,
generated from the fields of ``rescore.settings.EngineSettings`` (their choices, defaults and
help), so that each setting is spelled once.

Kept apart from rescore/cli/nbest.py so that command stays readable: it adds ``@engine_options``
and turns the values into an EngineSettings with ``engine_settings``.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import click

from rescore.settings import OOV_AUTO, EngineSettings, option_name


class OovPenalty(click.ParamType):
    """A float, or 'auto' (resolved once the model and the training text are loaded)."""

    name = "NATS|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or value == OOV_AUTO:
            return value
        try:
            return float(value)
        except ValueError:
            self.fail(f"expected a number or '{OOV_AUTO}', got {value!r}", param, ctx)


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
    """The click option of one EngineSettings field (its metadata: help, choices, bound; help:
    another help text)."""
    meta = f.metadata
    kw = {"help": help or meta["help"], "default": f.default}
    if meta["choices"] is not None:
        kw["type"] = click.Choice(meta["choices"])
    elif f.name == "oov_penalty":
        kw["type"] = OovPenalty()
    elif f.default is not MISSING and not isinstance(f.default, str):
        kw["type"] = type(f.default)
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


def idle_without_model(model, split_spec=None) -> dict:
    """What each engine setting needs to act (cli.common.refuse_idle_options): --model, but for
    --conv-batch, which also sizes the blocks of --split; None for the settings that act."""
    needs = {f.name: None if model else MODEL_NEEDED for f in fields(EngineSettings)}
    if split_spec is not None:
        needs["conv_batch"] = None
    return needs


def engine_settings(values: dict) -> EngineSettings:
    """The EngineSettings of ``@engine_options``' values (``values``: the command's keyword
    arguments; those that are not settings are ignored)."""
    return EngineSettings(**{f.name: values[f.name] for f in fields(EngineSettings)})
