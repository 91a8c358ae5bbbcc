# shellcheck shell=bash
# How jobs are run, as in Kaldi's egs/*/s5/cmd.sh: run.pl runs them on this machine;
# on a cluster use queue.pl (Grid Engine) or slurm.pl and give the options your queue needs
# (e.g. export cuda_cmd="queue.pl --gpu 1 --mem 16G"). See http://kaldi-asr.org/doc/queue.html.

export decode_cmd="run.pl --mem 4G"  # Kaldi's lattice/N-best jobs of the rescoring step
# Neural LM training and rescore-nbest (on the GPU when there is one).  run.pl ignores --gpu;
# --max-jobs-run 1 keeps the rescoring jobs from sharing one GPU all at once.
export cuda_cmd="run.pl --max-jobs-run 1"
