#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Lattice rescoring of a Kaldi decode directory with a neural LM trained by rescore, by
# Kaldi's path-cover method (steps/pytorchnn/lmrescore_lattice_pytorchnn.sh): lattices in,
# rescored lattices out, local/score.sh as usual.  The interface is that of
# lmrescore_nbest.sh (same arguments, same options where they mean the same).
#
# Per job JOB of the input decode directory (Kaldi binaries in capitals):
#   stage 1  LATTICE-PRUNE | LATTICE-EXPAND     -> expanded/lat.JOB.gz (arcs of high posterior
#                                                  get histories of their own)
#   stage 2  rescore-lattice cover              -> cover/nbest1.JOB.gz: the best path through
#                                                  every arc and final state, as an N-best list
#   stage 3  lmrescore_nbest.sh --stage 2 on those paths: old-LM removal, NBEST-TO-LINEAR,
#            rescore-nbest (our engine, LM state and pointer history carried along each
#            conversation from the rescored best path)   -> cover/archives.JOB/lmwt.nn
#   stage 4  rescore-lattice apply: each arc gets the NN cost of its word after its best
#            history, graph cost += w * that; then old LM -w * l_ng:
#            LATTICE-LMRESCORE-CONST-ARPA (G.carpa) or LATTICE-LMRESCORE (G.fst)
#                                               -> lat.JOB.gz; 1-best -> text
#   then     local/score.sh (unless --skip-scoring true)
#
# The new graph cost of every path is g0 + (1-w)*l_ng + w*l_nn~, l_nn~ the sum of its arcs'
# estimated NN costs (exact for every path of the cover whose arcs' best paths it is).
# Lattices go through Python in Kaldi's text form (rescore/nbest/lattice.py says why and how).
#
# Run it from a Kaldi recipe directory (path.sh, cmd.sh, steps/, utils/, local/score.sh), with
# recipes/steps/lmrescore_nbest.sh beside this script.

# Begin configuration section.
cmd=run.pl            # how to run the Kaldi jobs: run.pl, queue.pl, slurm.pl [options]
rescore_cmd=          # how to run the rescore-nbest jobs (e.g. "queue.pl --gpu 1"); empty: --cmd
stage=1               # first stage to run (1-4), for partial reruns
inv_acwt=10           # inverse acoustic scale (Kaldi's LMWT, > 0) for pruning, expansion, the path
                      # cover and picking each utterance's best path when carrying state
weight=0.8            # NN LM weight w in [0, 1] in the log-linear interpolation with the old LM
mix=                  # with several models (a:b, as lmrescore_nbest.sh): their shares, >= 0 and
                      # summing to 1, e.g. 0.6,0.4; empty: equal shares
beam=5                # lattice-prune --beam (> 0; Kaldi's pytorchnn default)
epsilon=0.5           # lattice-expand --epsilon (in [0, 1]): arcs of posterior above it get unique histories
wip=0.0               # word insertion penalty for the carried best path and for 'text';
                      # not part of the lattices: local/score.sh sweeps its own
state_carry=rescored  # none | first-pass | rescored: whose best path starts the next utterance
device=auto           # auto | cpu | cuda | cuda:N, for rescore-nbest
max_tokens=           # tokens per batch of rescore-nbest; empty: its default
rescore_opts=         # more rescore-nbest options (rescore-nbest --help), e.g. "--precision bf16"
train_text=           # LM training text: rare-word bucket WERs in each job's report, and the
                      # training words for --oov-penalty auto
oov_penalty=auto      # nats per word outside the LM vocabulary (>= 0), or auto: ln(the number of
                      # word types outside it, of the old lang dir's words.txt and --train-text);
                      # auto by default: the step always knows words.txt
keep_ali=true         # false: drop the alignments from the cover paths (smaller archives)
skip_scoring=false    # true: do not run local/score.sh
scoring_opts=         # extra options for local/score.sh
# End configuration section.

help_message="Rescore the lattices of a Kaldi decode directory with a neural LM from rescore, by path cover.
The NN LM is log-linearly interpolated with the old n-gram LM (weight --weight).

Usage: $0 [options] <old-lang-dir> <model-dir-or-checkpoint> <data-dir> <input-decode-dir> <output-decode-dir>
 e.g.: $0 --cmd \"\$decode_cmd\" --weight 0.8 data/lang_sw1_fsh_fg exp/rescore/lstm_pointer \\
         data/eval2000_hires exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg exp/chain/tdnn7q_sp/decode_eval2000_lstm_pointer_lat
Run it from the Kaldi recipe directory (path.sh, cmd.sh, steps/, utils/, local/score.sh), by
its path in rescore (e.g. ~/rescore/recipes/steps/lmrescore_lattice.sh), with
lmrescore_nbest.sh beside it.
The old lang dir needs words.txt and G.carpa or G.fst (the LM used in decoding); a model dir
needs model.pt (what rescore-train-lm writes); hf:DIR is a Hugging Face model (rescore-import-lm);
several models, interpolated with the shares of --mix: a colon-separated list, e.g.
exp/rescore/lstm:exp/rescore/transformer or exp/rescore/lstm:hf:exp/rescore/smollm2.  The output dir
gets lat.JOB.gz (scored by local/score.sh as before) and the 1-best in text."
needs="utils/int2sym.pl utils/split_data.sh"
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -eq 5 ] || usage_exit
oldlang=$1 model=$2 data=$3 indir=$4 dir=$5

nbest_step=$(dirname "$0")/lmrescore_nbest.sh

# Every option and input, before any work (the N-best step checks its share again at stage 3).
check_number beam '>0'
check_number epsilon 0..1
check_step_inputs "$oldlang" "$model" "$data" "$indir" "$dir"
[ -x "$nbest_step" ] || fail "expected $nbest_step (the N-best step it calls) to exist"

# Its own programs and those of the N-best step's stages 2-6 (which it runs at stage 3).
if [ "$oldlm" == "$oldlang/G.carpa" ]; then
  old_bins="lattice-lmrescore-const-arpa"
else
  old_bins="lattice-lmrescore lattice-scale lattice-compose lattice-1best fstproject fstcompile"
fi
# $old_bins is a list of names: it must split.
# shellcheck disable=SC2086
check_programs "${cmd%% *}" ${rescore_cmd:+"${rescore_cmd%% *}"} lattice-prune lattice-expand lattice-copy \
  lattice-best-path lattice-add-penalty $old_bins nbest-to-linear linear-to-nbest nbest-to-lattice \
  rescore-lattice rescore-nbest gzip awk
check_passed_options rescore-nbest rescore_opts
check_scoring

acwt=$(awk -v x="$inv_acwt" 'BEGIN { printf "%.8g", 1.0 / x }')
neg_weight=$(awk -v x="$weight" 'BEGIN { printf "%.8g", -x }')
exp_dir=$dir/expanded
cover=$dir/cover
mkdir -p "$dir/log" "$exp_dir" "$cover"
cp "$indir/num_jobs" "$dir/num_jobs"
cp "$indir/num_jobs" "$exp_dir/num_jobs"

# Stage 1.  Prune, then expand, at the acoustic scale of the rescoring.
if [ "$stage" -le 1 ]; then
  echo "$0: pruning (beam $beam) and expanding (epsilon $epsilon) the lattices"
  $cmd JOB=1:"$nj" "$dir/log/prune_expand.JOB.log" \
    lattice-prune --acoustic-scale="$acwt" --beam="$beam" "ark:gunzip -c $indir/lat.JOB.gz|" ark:- \| \
    lattice-expand --acoustic-scale="$acwt" --epsilon="$epsilon" ark:- "ark:|gzip -c >$exp_dir/lat.JOB.gz" || exit 1
fi

# Stage 2.  The path cover, as the N-best lists the N-best step's stage 2 starts from.
if [ "$stage" -le 2 ]; then
  echo "$0: path cover of every lattice"
  $cmd JOB=1:"$nj" "$dir/log/cover.JOB.log" \
    lattice-copy "ark:gunzip -c $exp_dir/lat.JOB.gz|" ark,t:- \| \
    rescore-lattice cover --acoustic-scale="$acwt" - "$cover/nbest1.JOB.gz" || exit 1
fi

# Stage 3.  Old-LM removal and NN LM costs of the paths: the N-best step from its stage 2.
if [ "$stage" -le 3 ]; then
  echo "$0: scoring the paths with $model (N-best step, stages 2-5)"
  "$nbest_step" --stage 2 --cmd "$cmd" --rescore-cmd "${rescore_cmd:-$cmd}" \
    --inv-acwt "$inv_acwt" --weight "$weight" --mix "$mix" --wip "$wip" --state-carry "$state_carry" \
    --device "$device" --max-tokens "$max_tokens" --rescore-opts "$rescore_opts" \
    --train-text "$train_text" --oov-penalty "$oov_penalty" --keep-ali "$keep_ali" \
    --skip-scoring true "$oldlang" "$model" "$data" "$exp_dir" "$cover" || exit 1
fi

# Stage 4.  Arc NN costs into the lattices, the old LM's weighted cost out.
if [ "$stage" -le 4 ]; then
  echo "$0: writing the rescored lattices $dir/lat.*.gz (weight $weight)"
  if [ "$oldlm" == "$oldlang/G.carpa" ]; then
    $cmd JOB=1:"$nj" "$dir/log/apply.JOB.log" \
      lattice-copy "ark:gunzip -c $exp_dir/lat.JOB.gz|" ark,t:- \| \
      rescore-lattice apply --acoustic-scale="$acwt" --weight="$weight" - "$cover/archives.JOB" - \| \
      lattice-lmrescore-const-arpa --lm-scale="$neg_weight" ark:- "$oldlm" "ark:|gzip -c >$dir/lat.JOB.gz" || exit 1
  else
    project_opt=$(fstproject_output_flag)
    $cmd JOB=1:"$nj" "$dir/log/apply.JOB.log" \
      lattice-copy "ark:gunzip -c $exp_dir/lat.JOB.gz|" ark,t:- \| \
      rescore-lattice apply --acoustic-scale="$acwt" --weight="$weight" - "$cover/archives.JOB" - \| \
      lattice-lmrescore --lm-scale="$neg_weight" ark:- "fstproject $project_opt $oldlm |" \
        "ark:|gzip -c >$dir/lat.JOB.gz" || exit 1
  fi
  # The 1-best of the rescored lattices at --inv-acwt and --wip, for rescore-wer.
  $cmd JOB=1:"$nj" "$dir/log/best_path.JOB.log" \
    lattice-add-penalty --word-ins-penalty="$wip" "ark:gunzip -c $dir/lat.JOB.gz|" ark:- \| \
    lattice-best-path --acoustic-scale="$acwt" ark:- ark,t:"$dir/best.JOB.tra" || exit 1
  for n in $(seq "$nj"); do
    utils/int2sym.pl -f 2- "$oldlang/words.txt" < "$dir/best.$n.tra"
  done | sort > "$dir/text"
fi

score_decode_dir "$data" "$oldlang" "$dir"
wer_summary "$data" "$indir" "$dir"

echo "$0: done, rescored lattices in $dir"
exit 0
