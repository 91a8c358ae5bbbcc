#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# N-best rescoring of a Kaldi decode directory with a neural LM trained by
# rescore (LSTM or Transformer; softmax or implicit-cache-pointer head).
# A drop-in replacement for steps/pytorchnn/lmrescore_nbest_pytorchnn.sh and
# steps/rnnlmrescore.sh: the output directory holds rescored lat.JOB.gz that
# local/score.sh scores as before.
#
# Per job JOB of the input decode directory (Kaldi binaries in capitals):
#   stage 1  LATTICE-TO-NBEST                  -> nbest1.JOB.gz (graph cost with the old LM)
#   stage 2  old-LM removal, G.carpa: LATTICE-LMRESCORE-CONST-ARPA --lm-scale=-1.0
#            G.fst: compose with FSTPROJECT(G, output side) and subtract
#                                              -> nbest2.JOB.gz (graph cost without it)
#   stage 3  NBEST-TO-LINEAR                   -> archives.JOB/{ali,words,lmwt.nolm,acwt,lmwt.withlm}
#   stage 4  utils/int2sym.pl                  -> archives.JOB/words_text
#   stage 5  rescore-nbest, state carried along the job's conversations; with run.pl all jobs in
#            one process (rescore-nbest --jobs 1:nj, --one-process)
#                                              -> archives.JOB/{lmwt.nn,lmwt.interp,text,report.json}
#   stage 6  LINEAR-TO-NBEST | NBEST-TO-LATTICE -> lat.JOB.gz
#   then     local/score.sh (unless --skip-scoring true), and the WER of the first pass and of the
#            rescored output: the best of local/score.sh's grid in the input and output dirs
#            (utils/best_wer.sh) and both 1-bests at the step's setting (rescore-wer)
#
# The old LM, G.carpa or G.fst, give different lmwt.nolm for the same N-best: G.carpa removes the
# explicit n-gram cost of the words (lattice-lmrescore-const-arpa), while the G.fst path removes
# the cost of the best path through G, which may take a backoff arc where the n-gram exists and
# so come out lower than the explicit n-gram (Kaldi's own lmrescore_nbest_pytorchnn.sh does the
# same).  A hypothesis G.fst cannot accept at all is dropped with a warning and the others are
# renumbered; an utterance that loses every hypothesis keeps its first-pass best path (stage 3).
#
# lmwt.interp is the new graph cost g0 + (1-w)*l_ng + w*l_nn (the log-linear interpolation of rescore-nbest --help),
# with g0 = lmwt.nolm and l_ng = lmwt.withlm - lmwt.nolm, so that local/score.sh can
# sweep the LM weight and the word insertion penalty on the rescored lattices as usual.
#
# Several NN LMs (e.g. an LSTM and a Transformer) are interpolated when the model argument is a
# colon-separated list, exp/rescore/lstm:exp/rescore/transformer: l_nn = sum_k mix_k * l_nn_k
# with the shares of --mix (default: equal), w stays the total NN weight.  Each model is scored
# on its own (archives.JOB/lmwt.nn.1 ... lmwt.nn.K; lmwt.nn holds the mixed costs), so
# rescore-tune --nn-costs archives.JOB/lmwt.nn.1 --nn-costs archives.JOB/lmwt.nn.2 can tune the
# shares.  With --state-carry rescored every model carries its state from the best hypothesis
# by the mixed cost (rescore-nbest scores them in lockstep; --rescore-opts "--mix-carry own":
# each from the best under its own cost, fixed + w * l_nn_k); none and first-pass give exactly
# the mix of one-model runs.
#
# A cascade of two models (a cheap one first, e.g. the class LSTM, then an expensive one, e.g.
# hf:exp/rescore/smollm2): --rescore-opts "--cascade-top 10" (and/or "--cascade-margin M")
# has the second score only each utterance's top 10 under the first; the others keep the first's
# cost and cannot win (their lmwt.interp carries 10000 nats more, so local/score.sh never picks
# them either).  Each archives.JOB then has lmwt.cascade, the ranking, and rescore-tune OUT_DIR
# --nn-costs lmwt.nn.1 --nn-costs lmwt.nn.2 --cascade lmwt.cascade --cascade-tops 1:10:1 tunes K
# without scoring again (docs/hf.md#a-cascade).
#
# Run it from a Kaldi recipe directory (one with path.sh, cmd.sh, steps/, utils/,
# local/score.sh).  The output directory should sit beside the input one (e.g.
# exp/chain/tdnn/decode_eval2000_nnlm beside exp/chain/tdnn/decode_eval2000):
# Kaldi's scoring scripts look for ../final.mdl.

# Begin configuration section.
cmd=run.pl            # how to run the Kaldi jobs: run.pl, queue.pl, slurm.pl [options]
rescore_cmd=          # how to run the rescore-nbest jobs (e.g. "queue.pl --gpu 1"); empty: --cmd
one_process=auto      # true: stage 5 rescores every job in one rescore-nbest process (--jobs 1:nj):
                      # torch and the model loaded once, the jobs' conversations batched together;
                      # less CPU, but one process's threads (OMP_NUM_THREADS, else torch's default)
                      # where nj processes would run side by side; false: one process per job
                      # ($rescore_cmd JOB=1:nj), e.g. over a cluster; auto: true for run.pl
stage=1               # first stage to run (1-6), for partial reruns
N=100                 # hypotheses per utterance (lattice-to-nbest --n), a whole number >= 1
params=               # a setting tuned on dev: the JSON rescore-tune --params-out writes (of the step's
                      # output dir on dev); its weight, inv_acwt, wip (and mix) replace --weight,
                      # --inv-acwt, --wip (--mix) in rescoring, and a tuned cascade's limits apply
                      # with two models (unless --rescore-opts gives them); the N-best lists are
                      # still cut at --inv-acwt, as those of the dev run were
inv_acwt=10           # inverse acoustic scale (Kaldi's LMWT, > 0) for the N-best lists and for
                      # picking each utterance's best hypothesis when carrying state
weight=0.8            # NN LM weight w in [0, 1] in the log-linear interpolation with the old LM
mix=                  # with several models (a:b): their shares of the NN term, >= 0 and summing
                      # to 1, e.g. 0.6,0.4; empty: equal shares
wip=0.0               # word insertion penalty for rescore-nbest's 1-best (state carry, text);
                      # not part of lmwt.interp: local/score.sh sweeps its own
state_carry=rescored  # none | first-pass | rescored: whose best hypothesis starts the next utterance
carry_scope=data      # data: carry along each recording (segments) or speaker (utt2spk) of the
                      # data dir, in time order; job: along all utterances of a lattice archive in
                      # archive order, as Kaldi's steps/pytorchnn scorer does
device=auto           # auto | cpu | cuda | cuda:N, for rescore-nbest
max_tokens=           # tokens per batch of rescore-nbest; empty: its default
rescore_opts=         # more rescore-nbest options (rescore-nbest --help), e.g. "--precision bf16"
                      # or "--cache-window 1000 --cache-theta 0.6 --cache-lambda 0.3"
train_text=           # LM training text: rare-word bucket WERs in each job's report, and the
                      # training words for --oov-penalty auto
oov_penalty=auto      # nats per word outside the LM vocabulary (>= 0), or auto: ln(the number of
                      # word types outside it, of the old lang dir's words.txt and --train-text);
                      # auto by default: the step always knows words.txt
keep_ali=true         # false: drop the alignments from the N-best (smaller archives)
skip_scoring=false    # true: do not run local/score.sh; false: the step needs it (it stops before any
                      # work when the recipe has no executable local/score.sh)
scoring_opts=         # extra options for local/score.sh
# End configuration section.

help_message="Rescore the N-best lists of a Kaldi decode directory with a neural LM from rescore.
The NN LM is log-linearly interpolated with the old n-gram LM (weight --weight).

Usage: $0 [options] <old-lang-dir> <model-dir-or-checkpoint> <data-dir> <input-decode-dir> <output-decode-dir>
 e.g.: $0 --cmd \"\$decode_cmd\" --N 100 --weight 0.8 data/lang_sw1_fsh_fg exp/rescore/lstm_pointer \\
         data/eval2000_hires exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg exp/chain/tdnn7q_sp/decode_eval2000_lstm_pointer
Run it from the Kaldi recipe directory (path.sh, cmd.sh, steps/, utils/, local/score.sh), by
its path in rescore (e.g. ~/rescore/recipes/steps/lmrescore_nbest.sh).
The old lang dir needs words.txt and G.carpa or G.fst (the LM used in decoding); a model dir
needs model.pt (what rescore-train-lm writes); hf:DIR is a Hugging Face model (rescore-import-lm).
Several models, interpolated with the shares of --mix: a colon-separated list, e.g.
exp/rescore/lstm:exp/rescore/transformer or exp/rescore/lstm:hf:exp/rescore/smollm2.  The output dir
gets lat.JOB.gz (scored by local/score.sh as before), archives.JOB/ and the 1-best in text."
needs="utils/int2sym.pl utils/split_data.sh"
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -eq 5 ] || usage_exit
oldlang=$1 model=$2 data=$3 indir=$4 dir=$5

# Every option and input, before any work.
check_number N 'int>=1'
check_choice carry_scope data job
check_choice one_process auto true false
check_step_inputs "$oldlang" "$model" "$data" "$indir" "$dir"
model=$(IFS=:; echo "${model_files[*]}")
[ -z "$rescore_cmd" ] && rescore_cmd=$cmd
if [ "$one_process" = auto ]; then  # one process where the jobs would run on this machine
  one_process=false
  [ "$(basename "${rescore_cmd%% *}")" = run.pl ] && one_process=true
fi

# The programs the stages call; path.sh puts Kaldi's on PATH, rescore-nbest comes from
# rescore's environment (installed from its repository or its wheel, docs/getting-started.md;
# its bin/ added at the end of PATH in path.sh).
if [ "$oldlm" == "$oldlang/G.carpa" ]; then
  remove_bins="lattice-lmrescore-const-arpa"
else
  remove_bins="lattice-scale lattice-compose lattice-1best fstproject fstcompile"
fi
$keep_ali || remove_bins="lattice-rmali $remove_bins"
# $remove_bins is a list of names: it must split.
# shellcheck disable=SC2086
check_programs "${cmd%% *}" "${rescore_cmd%% *}" lattice-to-nbest $remove_bins \
  nbest-to-linear linear-to-nbest nbest-to-lattice rescore-nbest gzip awk
check_passed_options rescore-nbest rescore_opts
check_scoring

acwt=$(awk -v x="$nbest_inv_acwt" 'BEGIN { printf "%.8g", 1.0 / x }')  # (--inv-acwt, also with --params)
adir=$dir/archives
mkdir -p "$dir/log"
cp "$indir/num_jobs" "$dir/num_jobs"

# Stage 1.  The N-best lists depend on the acoustic scale: use one close to the best LMWT.
if [ "$stage" -le 1 ]; then
  echo "$0: converting lattices to $N-best lists (acoustic scale $acwt)"
  if $keep_ali; then
    $cmd JOB=1:"$nj" "$dir/log/lat2nbest.JOB.log" \
      lattice-to-nbest --acoustic-scale="$acwt" --n="$N" \
        "ark:gunzip -c $indir/lat.JOB.gz|" "ark:|gzip -c >$dir/nbest1.JOB.gz" || exit 1
  else
    $cmd JOB=1:"$nj" "$dir/log/lat2nbest.JOB.log" \
      lattice-to-nbest --acoustic-scale="$acwt" --n="$N" \
        "ark:gunzip -c $indir/lat.JOB.gz|" ark:- \| \
      lattice-rmali ark:- "ark:|gzip -c >$dir/nbest1.JOB.gz" || exit 1
  fi
fi

# Stage 2.  Remove the old LM from the graph cost.
if [ "$stage" -le 2 ]; then
  echo "$0: removing the old LM scores ($oldlm)"
  if [ "$oldlm" == "$oldlang/G.carpa" ]; then
    $cmd JOB=1:"$nj" "$dir/log/remove_old.JOB.log" \
      lattice-lmrescore-const-arpa --lm-scale=-1.0 \
        "ark:gunzip -c $dir/nbest1.JOB.gz|" "$oldlm" "ark:|gzip -c >$dir/nbest2.JOB.gz" || exit 1
  else
    project_opt=$(fstproject_output_flag)
    # Each N-best entry is a linear FST: negate, compose with the old LM's acceptor, take the
    # best path through G (backoff or not), negate again = graph cost minus the old LM cost.
    $cmd JOB=1:"$nj" "$dir/log/remove_old.JOB.log" \
      lattice-scale --acoustic-scale=-1 --lm-scale=-1 "ark:gunzip -c $dir/nbest1.JOB.gz|" ark:- \| \
      lattice-compose ark:- "fstproject $project_opt $oldlm |" ark:- \| \
      lattice-1best ark:- ark:- \| \
      lattice-scale --acoustic-scale=-1 --lm-scale=-1 ark:- "ark:|gzip -c >$dir/nbest2.JOB.gz" || exit 1
  fi
fi

# Stage 3.  Split the N-best lists into text archives (Kaldi's linear form, key <utt>-<rank>).
if [ "$stage" -le 3 ]; then
  echo "$0: writing the N-best lists as text archives in $adir.*"
  for n in $(seq "$nj"); do mkdir -p "$adir.$n"; done
  $cmd JOB=1:"$nj" "$dir/log/to_linear.JOB.log" \
    nbest-to-linear "ark:gunzip -c $dir/nbest2.JOB.gz|" \
      "ark,t:$adir.JOB/ali.kept" "ark,t:$adir.JOB/words.kept" "ark,t:$adir.JOB/lmwt.nolm.kept" \
      "ark,t:$adir.JOB/acwt.kept" '&&' \
    nbest-to-linear "ark:gunzip -c $dir/nbest1.JOB.gz|" "ark,t:$adir.JOB/ali.all" \
      "ark,t:$adir.JOB/words.all" "ark,t:$adir.JOB/lmwt.withlm.all" "ark,t:$adir.JOB/acwt.all" || exit 1
  # A hypothesis the old LM cannot accept (G.fst without a path for its words) is dropped by
  # the composition of stage 2.  Keep every archive on the same keys, renumbered contiguous from
  # 1 per utterance (what rescore-nbest and Kaldi's readers expect); an utterance that lost every
  # hypothesis keeps its first-pass best (rank 1 of nbest1) as its only entry, its old-LM cost
  # taken as 0 (lmwt.nolm = lmwt.withlm), so its lattice is that path.
  for n in $(seq "$nj"); do
    a=$adir.$n
    awk 'NR == FNR { kept[$1] = 1; next }
         function flush() { if (utt != "" && k == 0) print first, utt "-1", "all" }
         { u = $1; sub(/-[0-9]+$/, "", u)
           if (u != utt) { flush(); utt = u; first = $1; k = 0 }
           if ($1 in kept) print $1, utt "-" (++k), "kept" }
         END { flush() }' "$a/lmwt.nolm.kept" "$a/lmwt.withlm.all" > "$a/keys.map"
    # archive name, its source for kept and for rescued entries -> renumbered archive
    for spec in "ali ali.kept ali.all" "words words.kept words.all" "acwt acwt.kept acwt.all" \
                "lmwt.nolm lmwt.nolm.kept lmwt.withlm.all" "lmwt.withlm lmwt.withlm.all lmwt.withlm.all"; do
      read -r name kept all <<< "$spec"
      awk 'FILENAME == ARGV[1] { new[$1] = $2; src[$1] = $3; order[++m] = $1; next }
           FILENAME == ARGV[2] && src[$1] == "kept" || FILENAME == ARGV[3] && src[$1] == "all" {
             k = $1; sub(/^[^ ]+/, new[k]); line[k] = $0 }
           END { for (i = 1; i <= m; i++) print line[order[i]] }' \
        "$a/keys.map" "$a/$kept" "$a/$all" > "$a/$name"
    done
    n_all=$(wc -l < "$a/lmwt.withlm.all")
    n_kept=$(wc -l < "$a/lmwt.nolm.kept")
    if [ "$n_kept" -ne "$n_all" ]; then
      echo "$0: warning: job $n: $((n_all - n_kept)) of $n_all hypotheses lost in the old-LM removal"
    fi
    awk -v job="$n" -v me="$0" '$3 == "all" { sub(/-1$/, "", $2)
      print me ": warning: job " job ": utterance " $2 " lost every hypothesis in the old-LM " \
            "removal; it keeps its first-pass best path" }' "$a/keys.map"
    [ ! -s "$a/words" ] && echo "$0: job $n: no hypotheses in $a" && exit 1
    rm "$a"/*.kept "$a"/*.all
  done
fi

# Stage 4.  Word strings, for the neural LM (and the symbol table beside them, for rescore-tune).
if [ "$stage" -le 4 ]; then
  cp "$oldlang/words.txt" "$dir/words.txt"
  for n in $(seq "$nj"); do
    utils/int2sym.pl -f 2- "$oldlang/words.txt" < "$adir.$n/words" > "$adir.$n/words_text" || exit 1
  done
fi

# Stage 5.  Neural LM costs and interpolation, one job per lattice archive; utterances are
# rescored in conversation order (segments of the job's data dir, split$nj/JOB as the decode
# split it) with the LM state carried.  An utterance the decode lost is left out with a warning
# in the job's log (--allow-missing); Kaldi's scoring counts it as deleted, as before.  With
# --one-process true one rescore-nbest does every job (--jobs 1:$nj: it replaces JOB in the
# paths as run.pl would, and writes each archives.JOB as that job's own run; one log,
# rescore.log); a bad job fails them all, as run.pl fails the stage.
if [ "$stage" -le 5 ]; then
  echo "$0: rescoring with $model (weight $weight${mix:+, mix $mix}, state carry: $state_carry, device: $device)"
  sdata=$data/split$nj
  if [ ! -f "$sdata/$nj/utt2spk" ]; then
    utils/split_data.sh "$data" "$nj" || exit 1
  fi
  jdata=$sdata/JOB
  if [ "$carry_scope" = job ]; then
    # One conversation per job: every utterance of the split as one speaker, no segments, so
    # rescore-nbest takes them in sorted-id order, which is the archive's order when it is sorted.
    jdata=$dir/carry_data/JOB
    for n in $(seq "$nj"); do
      mkdir -p "$dir/carry_data/$n"
      awk -v spk="job$n" '{ print $1, spk }' "$sdata/$n/utt2spk" > "$dir/carry_data/$n/utt2spk"
      [ -f "$sdata/$n/text" ] && cp "$sdata/$n/text" "$dir/carry_data/$n/text"
      if ! cut -d' ' -f1 "$adir.$n/words_text" | sed 's/-[0-9]*$//' | uniq | LC_ALL=C sort -c 2>/dev/null; then
        echo "$0: warning: job $n: the lattice archive is not in sorted utterance order;" \
             "the state is carried in sorted order"
      fi
    done
  fi
  extra_opts=
  [ -n "$max_tokens" ] && extra_opts="--max-tokens $max_tokens"
  [ -n "$train_text" ] && extra_opts="$extra_opts --train-text $train_text"
  extra_opts="$extra_opts $rescore_opts"
  # With --params the file too (the values are the ones read from it above), so that rescore-nbest
  # says when the setting was tuned on this very set (its tuned_on).
  setting_args=(--weight "$weight" --inv-acwt "$inv_acwt" --wip "$wip")
  [ -n "$params" ] && setting_args+=(--params "$params")
  rescore_args=("$adir.JOB" "$adir.JOB" \
      --data-dir "$jdata" --allow-missing --no-plot --words-txt "$oldlang/words.txt" "${model_opts[@]}" \
      "${setting_args[@]}" \
      --state-carry "$state_carry" --device "$device" --oov-penalty "$oov_penalty")
  # $extra_opts is a list of options: it must split.
  if $one_process; then
    echo "$0: all $nj jobs in one rescore-nbest process (log $dir/log/rescore.log)"
    # shellcheck disable=SC2086
    $rescore_cmd "$dir/log/rescore.log" \
      rescore-nbest --jobs 1:"$nj" "${rescore_args[@]}" $extra_opts || exit 1
  else
    # shellcheck disable=SC2086
    $rescore_cmd JOB=1:"$nj" "$dir/log/rescore.JOB.log" \
      rescore-nbest "${rescore_args[@]}" $extra_opts || exit 1
  fi
  for n in $(seq "$nj"); do
    [ ! -s "$adir.$n/lmwt.interp" ] && echo "$0: rescore-nbest wrote no $adir.$n/lmwt.interp" && exit 1
  done
  # The rescored 1-best of all jobs and rank 1 of their N-best lists (the first pass at
  # --inv-acwt), for rescore-wer.
  cat "$adir".*/text | sort > "$dir/text"
  cat "$adir".*/words_text | awk '{ u = $1; sub(/-[0-9]+$/, "", u); if (u == last) next; last = u
    $1 = u; print }' | sort > "$dir/text.first_pass"
fi

# Stage 6.  Back to lattices with the new graph costs.
if [ "$stage" -le 6 ]; then
  echo "$0: writing the rescored lattices $dir/lat.*.gz"
  $cmd JOB=1:"$nj" "$dir/log/to_lattice.JOB.log" \
    linear-to-nbest "ark:$adir.JOB/ali" "ark:$adir.JOB/words" \
      "ark:$adir.JOB/lmwt.interp" "ark:$adir.JOB/acwt" ark:- \| \
    nbest-to-lattice ark:- "ark:|gzip -c >$dir/lat.JOB.gz" || exit 1
fi

score_decode_dir "$data" "$oldlang" "$dir"

echo "$0: done, rescored lattices in $dir"
wer_summary "$data" "$indir" "$dir"
exit 0
