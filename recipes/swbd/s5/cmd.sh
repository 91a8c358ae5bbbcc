# How jobs are run, as in Kaldi's egs/*/s5/cmd.sh: run.pl runs them on this machine;
# on a cluster use queue.pl (Grid Engine) or slurm.pl and give the options your queue needs
# (e.g. export cuda_cmd="queue.pl --gpu 1 --mem 16G"). See http://kaldi-asr.org/doc/queue.html.

export train_cmd="run.pl --mem 4G"   # CPU jobs: text preparation
export decode_cmd="run.pl --mem 4G"  # Kaldi's lattice/N-best jobs of the rescoring step
export cuda_cmd="run.pl --gpu 1"     # neural LM training and rescore-nbest (GPU when there is one)
