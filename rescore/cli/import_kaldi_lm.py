"""rescore-import-kaldi-lm: a model of Kaldi's steps/pytorchnn/train.py as a rescore checkpoint."""

from __future__ import annotations

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import MAX_LAYERS, MAX_TOKENS, MAX_WIDTH, Count
from rescore.jobs.import_lm import ImportKaldiLmJob
from rescore.settings import KALDI_MODEL_TYPES


@command(groups={"Model": ["--model-type", "--embedding-dim", "--hidden-dim", "--nlayers", "--nhead", "--tied",
                           "--context"], "Input": ["--oov", "--sent-boundary"]})
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("vocab", type=click.Path(dir_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--model-type", "--model_type", type=click.Choice(KALDI_MODEL_TYPES), required=True,
              help="Kaldi's --model-type (train.py --model).")
@click.option("--embedding-dim", "--embedding_dim", type=Count(1, MAX_WIDTH), required=True,
              help="Kaldi's --embedding-dim (train.py --emsize).")
@click.option("--hidden-dim", "--hidden_dim", type=Count(1, MAX_WIDTH), required=True,
              help="Kaldi's --hidden-dim (train.py --nhid; a Transformer's feed-forward size).")
@click.option("--nlayers", type=Count(1, MAX_LAYERS), required=True, help="Layers (train.py --nlayers).")
@click.option("--nhead", type=Count(1, MAX_WIDTH), default=2,
              help="Transformer attention heads (train.py --nhead).")
@click.option("--tied", is_flag=True,
              help="The model was trained with train.py --tied: check that its input and "
                   "output weights are equal.")
@click.option("--oov", default="<unk>", help="Kaldi's OOV symbol (compute_sentence_scores.py --oov).")
@click.option("--sent-boundary", default="<s>",
              help="Kaldi's sentence boundary symbol (compute_sentence_scores.py --sent-boundary).")
@click.option("--context", type=Count(1, MAX_TOKENS), default=200,
              help="Transformer: attention window in tokens; the costs equal Kaldi's for "
                   "sentences of up to this many words + 1.")
@verbose_option
def main(model, vocab, out_dir, model_type, embedding_dim, hidden_dim, nlayers, nhead, tied,
         oov, sent_boundary, context, verbose):
    """Turn MODEL (the state_dict Kaldi's steps/pytorchnn/train.py saves) and VOCAB (its
    words.txt) into OUT_DIR/model.pt, a rescore checkpoint that gives the per-sentence costs of
    Kaldi's compute_sentence_scores.py (conventions: rescore/models/kaldi_lm.py). An existing
    OUT_DIR/model.pt is replaced only if an earlier import wrote it."""
    setup_logging(verbose)
    ImportKaldiLmJob(model, vocab, out_dir, model_type=model_type, embedding_dim=embedding_dim, hidden_dim=hidden_dim,
                     nlayers=nlayers, nhead=nhead, tied=tied, oov=oov, sent_boundary=sent_boundary,
                     context=context).run()


attach(main, "rescore-import-kaldi-lm")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
