"""The example that ends every command's --help, as Kaldi's steps print one (`e.g.: ...`).

One home for them, by command name; each command module attaches its own with its last line,
``attach(main, "rescore-nbest")``. A group's subcommands get theirs under "NAME SUBCOMMAND".
"""

from __future__ import annotations

import click

EXAMPLES = {
    "rescore-nbest": """\
rescore-nbest exp/tri4/decode_dev_nbest exp/tri4/decode_dev_rescored --data-dir data/dev \\
    --model exp/lm/lstm/model.pt --params params.json --oov-penalty auto --train-text lm_train.txt
rescore-nbest --jobs 1:4 exp/tri4/decode_dev_rescore/archives.JOB exp/tri4/decode_dev_rescore/archives.JOB \\
    --data-dir data/dev/split4/JOB --model exp/lm/lstm/model.pt""",
    "rescore-tune": """\
rescore-tune exp/tri4/decode_dev_nbest --data-dir data/dev \\
    --nn-costs exp/tri4/decode_dev_rescored/lmwt.nn --cross-validate --hyp-out dev_cv.txt
rescore-tune exp/chain/tdnn/decode_dev_rescore --data-dir data/dev --params-out params.json
    (a Kaldi step's output dir: every job, and the NN LM costs the step wrote)""",
    "rescore-wer": """\
rescore-wer data/test/text first-pass=first_pass/text rescored=rescored/text \\
    --train-text lm_train.txt --groups data/test/utt2spk --plot compare.png --report compare.json""",
    "rescore-train-lm": """\
rescore-train-lm --train lm_train.txt --valid lm_valid.txt --out-dir exp/lm/lstm \\
    --hidden 256 --layers 2 --output class --dropout 0.2 --bptt 100 --batch-size 20 --epochs 200 \\
    --epoch-batches 500 --max-anneals 4 --seed 1 --max-minutes 80 --threads 1
    (the recommended model, as measured: classes round(sqrt V); --max-minutes is CPU time, so
    keep --threads 1 or raise the budget with the threads)""",
    "rescore-ppl": """\
rescore-ppl exp/lm/lstm/model.pt lm_test.txt --train-text lm_train.txt --plot ce.png
rescore-ppl exp/lm/lstm/model.pt lm_valid.txt --tune-cache --cache-windows 100,500 --cache-thetas 0.1,0.3,0.6""",
    "rescore-make-nbest": """\
rescore-make-nbest data/dev exp/ps/nbest_dev --nbest 100 --nj 2""",
    "rescore-tts-data": """\
rescore-tts-data sentences.txt data/tts_dev --voices rms,slt --nj 2""",
    "rescore-lattice": """\
rescore-lattice cover --acoustic-scale 0.1 lat.1.txt cover/nbest1.1.gz
rescore-lattice apply --acoustic-scale 0.1 --weight 0.8 lat.1.txt cover/archives.1 rescored.1.txt
rescore-lattice tune --nbest-dir exp/decode_dev/nbest --data-dir data/dev --words-txt data/lang/words.txt \\
    0.5=exp/lat_w0.5 0.8=exp/lat_w0.8""",
    "rescore-lattice cover": """\
rescore-lattice cover --acoustic-scale 0.1 lat.1.txt cover/nbest1.1.gz""",
    "rescore-lattice apply": """\
rescore-lattice apply --acoustic-scale 0.1 --weight 0.8 lat.1.txt cover/archives.1 rescored.1.txt""",
    "rescore-lattice tune": """\
rescore-lattice tune --nbest-dir exp/decode_dev/nbest --data-dir data/dev --words-txt data/lang/words.txt \\
    --report tune.json 0.5=exp/lat_w0.5 0.8=exp/lat_w0.8""",
    "rescore-convert-nbest": """\
rescore-convert-nbest exp/tri4/decode_dev_nbest exp/tri4/decode_dev_nbest.tsv
rescore-convert-nbest --from espnet exp/asr/decode_asr_nbest10/test_clean nbest.tsv
rescore-convert-nbest exp/rescored/scores.tsv exp/asr/decode_rescored/test_clean --to espnet""",
    "rescore-import-kaldi-lm": """\
rescore-import-kaldi-lm exp/pytorch_lstm/model.pt data/pytorchnn/words.txt exp/lm/kaldi_lstm \\
    --model-type LSTM --embedding-dim 650 --hidden-dim 650 --nlayers 2""",
    "rescore-import-lm": """\
rescore-import-lm SmolLM2-135M-Instruct.Q4_1.gguf exp/lm/smollm2
rescore-import-lm lm/Qwen2.5-0.5B-Instruct exp/lm/qwen --eos '<|endoftext|>' --dtype bfloat16""",
}


def epilog(name: str) -> str:
    """The --help epilog of command NAME: 'e.g.:' and the example, kept as written (click's \\b)."""
    lines = EXAMPLES[name].splitlines()
    return "\b\ne.g.:\n" + "\n".join("  " + line for line in lines)


def attach(command: click.Command, name: str) -> None:
    """Give COMMAND (and, for a group, each of its subcommands) its example."""
    command.epilog = epilog(name)
    for sub_name, sub in getattr(command, "commands", {}).items():
        sub.epilog = epilog(f"{name} {sub_name}")
