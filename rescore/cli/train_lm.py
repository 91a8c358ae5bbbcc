"""rescore-train-lm: train an LSTM, GRU or Transformer word LM with a softmax or pointer head, and a
full softmax or a class-factored output layer."""

from __future__ import annotations

import logging
import sys

import click

from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import (MAX_BATCH, MAX_LAYERS, MAX_SEED, MAX_STEPS, MAX_THREADS, MAX_TOKENS, MAX_VOCAB,
                                 MAX_WIDTH, Count, Need, Real)
from rescore.jobs.train_lm import AUTO_CLASSES, TrainLmJob
from rescore.settings import BODY_NAMES, TRANSFORMER_BODIES
from rescore.train.options import DEFAULT_LR, TrainOptions, parse_save_every  # torch-free: --help stays instant


class Classes(click.ParamType):
    """--classes: a number of word classes, or 'auto'."""

    name = "C|auto"

    def convert(self, value, param, ctx):
        if value == AUTO_CLASSES or isinstance(value, int):
            return value
        try:
            return Count(1, MAX_WIDTH).convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected an integer or auto (classes in [1, {MAX_WIDTH}]), got {value!r}", param, ctx)


TRANSFORMER = Need(lambda p: p["arch"] in TRANSFORMER_BODIES,
                   f"--arch {' or '.join(TRANSFORMER_BODIES)} (a Transformer's setting)")
# What each option needs to act (rescore.cli.options.Need): a body's or a head's options the body
# or head; and --help's sections
NEEDS = {
    **{name: TRANSFORMER for name in ("--n-heads", "--context", "--positions", "--ff-mult")},
    "--history": Need(lambda p: p["head"] != "softmax", "a --head that keeps a history (not softmax)"),
    "--memory-aug": Need(lambda p: p["head"] == "pointer", "--head pointer (its memory augmentation)"),
    "--coverage": Need(lambda p: p["head"] == "pointer-generator", "--head pointer-generator (its coverage loss)"),
    "--classes": Need(lambda p: p["output"] == "class", "--output class (its word classes)"),
}
GROUPS = {
    "Input": ["--train", "--valid", "--words-txt", "--max-vocab"],
    "Model": ["--arch", "--head", "--hidden", "--layers", "--dropout", "--output", "--classes", "--self-norm",
              "--n-heads", "--context", "--positions", "--ff-mult"],
    "Carry and pointer": ["--history", "--memory-aug", "--coverage"],
    "Training": ["--epochs", "--epoch-batches", "--max-minutes", "--optimizer", "--lr", "--warmup", "--anneal",
                 "--max-anneals", "--clip", "--seed"],
    "Output": ["--out-dir", "--resume", "--save-every"],
    "Performance": ["--device", "--threads", "--batch-size", "--eval-batch-size", "--bptt"],
}


@command(groups=GROUPS, needs=NEEDS)
@click.option("--train", "train", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training text, one sentence per line.")
@click.option("--valid", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Validation text: learning-rate annealing, early stop, best model.")
@click.option("--out-dir", required=True, type=click.Path(file_okay=False),
              help="Output directory: model.pt (best on valid), last.pt, train.json.")
@click.option("--arch", type=click.Choice(BODY_NAMES), default="lstm",
              help="Body. kaldi-transformer: Kaldi's steps/pytorchnn Transformer (post-LayerNorm, "
                   "absolute positions), with --positions sinusoidal and an even --hidden.")
@click.option("--head", default="softmax",
              help="Output head: softmax, pointer (implicit cache pointer), or another name "
                   "registered in rescore.models.HEADS (psmm, pointer-generator).")
@click.option("--memory-aug", is_flag=True, help="Pointer: memory augmentation m_k = v . h_k.")
@click.option("--history", type=Count(1, MAX_TOKENS), default=None, show_default="--bptt",
              help="L, history slots of the pointer head.")
@click.option("--bptt", type=Count(1, MAX_TOKENS), default=100, help="T, tokens per training chunk.")
@click.option("--hidden", type=Count(1, MAX_WIDTH), default=256, help="H, hidden = embedding size (tied).")
@click.option("--layers", type=Count(1, MAX_LAYERS), default=2, help="LSTM layers / Transformer blocks.")
@click.option("--dropout", type=Real(0.0, 1.0, high_open=True), default=0.2, help="Dropout probability.")
@click.option("--n-heads", type=Count(1, MAX_WIDTH), default=4, help="Transformer attention heads.")
@click.option("--context", type=Count(1, MAX_TOKENS), default=None, show_default="--bptt",
              help="Transformer attention window W (KV-cache size).")
@click.option("--positions", type=click.Choice(["learned", "sinusoidal", "none"]),
              default="learned", help="Transformer positions (learned = relative bias).")
@click.option("--ff-mult", type=Count(1, MAX_LAYERS), default=4, help="Transformer feed-forward width / H.")
@click.option("--coverage", "coverage_weight", type=Real(0.0), default=0.0, metavar="LAMBDA",
              help="Pointer-generator: coverage (See et al. 2017) with loss weight LAMBDA; 0: off.")
@click.option("--self-norm", type=Real(0.0), default=0.0, metavar="ALPHA",
              help="Self-normalisation: add ALPHA * (log Z)^2 to the loss (Devlin et al. 2014), "
                   "Z the head's softmax normaliser (over V + L for the pointer), so that "
                   "rescore-nbest --normalize none can skip it; 0: off.")
@click.option("--output", type=click.Choice(["softmax", "class"]), default="softmax",
              help="Output layer. softmax: one softmax over the V words, V x H per token. "
                   "class: class-factored (Mikolov et al. 2011), P(class | h) P(word | class, h), "
                   "exact, ~(C + V/C) x H per token in training and scoring instead of V x H: "
                   "it pays with a large vocabulary (no --max-vocab: 30k words on wikitext2), "
                   "where the full softmax dominates a step (7.9x training tokens/s there for "
                   "a 2x256 LSTM, docs/benchmarks.md). "
                   "Heads: softmax, pointer, psmm, pointer-generator; --self-norm with the "
                   "softmax head (it then self-normalises both factors).")
@click.option("--classes", type=Classes(), default="auto", metavar="C|auto",
              help="Word classes of --output class, binned by training frequency; auto: "
                   "round(sqrt(V)) of the vocabulary trained (174 for wikitext-2's 30,379 "
                   "words), where a token costs least. Stored in the checkpoint.")
@click.option("--epochs", type=Count(1, MAX_STEPS), default=10, help="Maximum epochs.")
@click.option("--batch-size", type=Count(1, MAX_BATCH), default=20, help="Parallel streams per process.")
@click.option("--eval-batch-size", type=Count(1, MAX_BATCH), default=10, help="Parallel streams for validation.")
@click.option("--optimizer", type=click.Choice(["sgd", "adam"]), default="sgd",
              help="SGD (annealed on valid loss) or Adam (with --warmup) for Transformers.")
@click.option("--lr", type=Real(0.0, low_open=True), default=None,
              show_default=", ".join(f"{lr:g} with --optimizer {opt}" for opt, lr in DEFAULT_LR.items()),
              help="Initial learning rate.")
@click.option("--warmup", type=Count(0, MAX_STEPS), default=0, help="Linear learning-rate warm-up steps.")
@click.option("--anneal", type=Real(1.0), default=4.0, help="Learning-rate divisor when valid loss stalls.")
@click.option("--max-anneals", type=Count(1, MAX_STEPS), default=3, help="Early stop after this many stalls.")
@click.option("--clip", type=Real(0.0), default=0.25, help="Gradient-norm clipping (0: none).")
@click.option("--max-vocab", type=Count(3, MAX_VOCAB), default=None, show_default="all",
              help="Keep the most frequent training words (counting <eos>, <unk>).")
@click.option("--words-txt", type=click.Path(exists=True, dir_okay=False),
              help="Vocabulary from a Kaldi words.txt (all but <eps>, <s>, </s>, #n) instead of "
                   "the training text; words outside it are <unk>, as in Kaldi's pytorchnn "
                   "recipes.")
@click.option("--epoch-batches", type=Count(1, MAX_STEPS), default=None, show_default="the whole text",
              help="Batches per epoch (cycling through the text).")
@click.option("--max-minutes", type=Real(0.0), default=0.0, metavar="M",
              help="Training-time budget: stop at the first epoch end after M minutes of "
                   "training steps (validation not counted): this process's CPU time on a CPU "
                   "(so a busy machine delays a run but does not shrink it), wall time on a "
                   "GPU; with --epoch-batches for short epochs. 0: no budget.")
@click.option("--seed", type=Count(0, MAX_SEED), default=1, help="Random seed.")
@click.option("--device", default="auto", help="auto, cpu, cuda, cuda:N.")
@click.option("--threads", type=Count(0, MAX_THREADS), default=0, help="CPU threads per process (0: torch default).")
@click.option("--resume", is_flag=True,
              help="Continue from OUT_DIR/last.pt, exactly where it stopped (same options "
                   "needed; --epochs, --max-anneals, --max-minutes, --save-every, --device, --threads may "
                   "change). Without it, an OUT_DIR with an earlier run is refused.")
@click.option("--save-every", default="10m", metavar="N|Nm",
              help="Also write OUT_DIR/last.pt every N steps, or every N minutes (Nm); "
                   "0: at epoch ends only.")
@verbose_option
def main(train, valid, out_dir, arch, head, memory_aug, history, bptt, hidden, layers, dropout,
         n_heads, context, positions, ff_mult, coverage_weight, self_norm, output, classes, epochs,
         batch_size,
         eval_batch_size, optimizer, lr, warmup, anneal, max_anneals, clip, max_vocab,
         words_txt, epoch_batches, max_minutes, seed, device, threads, resume, save_every, verbose):
    """Train a word LM on TRAIN (concatenated sentences, BPTT chunks) and keep the best
    model on VALID as OUT_DIR/model.pt. Runs under torchrun for several processes.

    OUT_DIR/last.pt is written at every epoch end, every --save-every and on Ctrl-C or
    SIGTERM; --resume continues from it to the same weights as a run never stopped. OUT_DIR's
    train.json says "status": "running" until the run ends ("done", "interrupted", "failed")."""
    setup_logging(verbose)
    model = dict(arch=arch, head=head, hidden=hidden, layers=layers, dropout=dropout,
                 history=bptt if history is None else history,
                 memory_aug=memory_aug, n_heads=n_heads,
                 context=bptt if context is None else context, positions=positions,
                 ff_mult=ff_mult, coverage=coverage_weight > 0,
                 coverage_weight=coverage_weight, self_norm=self_norm,
                 output=output, classes=classes)
    try:
        with errors_to_exit():
            steps, minutes = parse_save_every(save_every)
            opts = TrainOptions(train=train, valid=valid, out_dir=out_dir, epochs=epochs,
                                batch_size=batch_size, eval_batch_size=eval_batch_size, bptt=bptt,
                                optimizer=optimizer,
                                lr=DEFAULT_LR[optimizer] if lr is None else lr, warmup=warmup,
                                anneal=anneal, max_anneals=max_anneals, clip=clip,
                                max_vocab=max_vocab, words_txt=words_txt,
                                epoch_batches=epoch_batches, max_minutes=max_minutes, seed=seed,
                                device=device, threads=threads, resume=resume,
                                save_every_steps=steps, save_every_minutes=minutes)
            summary = TrainLmJob(options=opts, model=model).run()
    except KeyboardInterrupt:
        sys.exit(130)
    logging.getLogger("rescore.train").info("done: %s", summary)


attach(main, "rescore-train-lm")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
