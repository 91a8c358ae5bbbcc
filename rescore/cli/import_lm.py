"""rescore-import-lm: a pretrained causal LM (a GGUF file or a from_pretrained directory) as a
directory ``--model hf:DIR`` reads."""

from __future__ import annotations

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import Conflict
from rescore.jobs.import_lm import ImportLmJob
from rescore.settings import IMPORT_DTYPES


@command(groups={"Model": ["--eos", "--bos", "--boundary"], "Output": ["--dtype"]},
         conflicts=[Conflict("--boundary", "--bos", "--boundary sets both"),
                    Conflict("--boundary", "--eos", "--boundary sets both")])
@click.argument("source", type=click.Path(exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--eos", metavar="TOKEN",
              help="The end-of-sentence token (scored after every hypothesis, and between the "
                   "carried sentences). Default: the vocabulary's plain document boundary "
                   "(<|endoftext|>, </s>, <|end_of_text|>, <eos>) before the tokenizer's own EOS, "
                   "so an instruct model's chat token <|im_end|> is not taken.")
@click.option("--bos", metavar="TOKEN",
              help="The token that starts a conversation's stream. Default: the tokenizer's own BOS "
                   "where it is a document start (<s>, <|begin_of_text|>, <bos>), else the EOS.")
@click.option("--boundary", metavar="TOKEN", help="Both --bos and --eos.")
@click.option("--dtype", type=click.Choice(IMPORT_DTYPES), default="float32", show_default=True,
              help="The dtype of the weights written (rescore loads them as float32; bfloat16 halves "
                   "the directory and rounds the weights).")
@verbose_option
def main(source, out_dir, eos, bos, boundary, dtype, verbose):
    """Turn SOURCE, a GGUF file (or a directory holding one) or a local from_pretrained
    directory, into OUT_DIR: safetensors weights, the tokenizer with the chosen sentence-boundary
    tokens as its BOS/EOS, and rescore-import.json recording the source, its SHA-256 and the
    choice. Offline; no code from the model is run (a model that needs custom code, auto_map,
    is refused). OUT_DIR may be new or empty; an existing one is replaced only if an earlier
    import wrote it and none of the source's files lies inside it."""
    setup_logging(verbose)
    if boundary is not None:
        bos = eos = boundary
    ImportLmJob(source, out_dir, bos=bos, eos=eos, dtype=dtype).run()


attach(main, "rescore-import-lm")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
