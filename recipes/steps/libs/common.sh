# shellcheck shell=bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# What every rescore step (recipes/steps/*.sh) does first, and the checks they share, sourced
# right after the step's configuration section (as Kaldi's steps source utils/parse_options.sh):
#
#   help_message="<what the step does>
#   Usage: $0 [options] <arg> ...
#    e.g.: $0 ..."
#   needs="utils/int2sym.pl"                  # files of the recipe dir the step runs (optional)
#   . "$(dirname "$0")/libs/common.sh"
#
# It prints the command line (for the logs); adds to $help_message every option of the
# configuration section with its default and its comment (the one place an option is described),
# and prints that on --help, anywhere; checks that the step runs in a Kaldi recipe directory
# (path.sh, steps/, utils/parse_options.sh and $needs) before it sources anything from there,
# naming what is missing and where to run from; then sources path.sh and utils/parse_options.sh
# (Kaldi's prints $help_message on --help too) under 'set -eo pipefail', then 'set -u'.
# The check_* functions validate options and inputs before any work: each names the option or
# the file and what was expected, and exits 1.
# (help_message, needs and the option variables come from the step; oldlm, nj, model_files and
# model_opts are set for it.)
# shellcheck disable=SC2154,SC2034

echo "$0 $*"  # the command line, for the logs

# --help, the option names and usage_exit: libs/help.sh (a recipe's run.sh sources it before
# its path.sh, so that --help works without Kaldi).
# shellcheck source=help.sh
. "$(dirname "${BASH_SOURCE[0]}")/help.sh"

missing=
for f in path.sh steps/ utils/parse_options.sh ${needs:-}; do
  case "$f" in
    */) [ -d "$f" ] || missing="$missing, $f" ;;
    utils/parse_options.sh|path.sh) [ -f "$f" ] || missing="$missing, $f" ;;
    *) [ -x "$f" ] || missing="$missing, $f" ;;
  esac
done
if [ -n "$missing" ]; then
  echo "$0: must run in a Kaldi recipe directory, but $PWD has no ${missing#, }"
  echo "$0: cd to your recipe (the directory with path.sh, cmd.sh, steps/ and utils/, e.g."
  echo "$0: \$KALDI_ROOT/egs/swbd/s5c) and run this script there by its path: $(cd "$(dirname "$0")" && pwd)/$(basename "$0") ..."
  exit 1
fi

# Kaldi's path.sh and parse_options.sh read unset variables, hence 'set -u' only after them.
set -eo pipefail
# shellcheck disable=SC1091
. ./path.sh
# shellcheck disable=SC1091
. utils/parse_options.sh
set -u

# --- checks of options and inputs -----------------------------------------------------------

fail() { echo "$0: $*"; exit 1; }

# "a, b or c"
one_of() {
  local out=$1
  shift
  while [ $# -gt 1 ]; do out="$out, $1"; shift; done
  [ $# -eq 1 ] && out="$out or $1"
  echo "$out"
}

# check_choice <var> <choice>...: the option's value is one of the choices.
check_choice() {
  local var=$1 c
  shift
  for c in "$@"; do [ "${!var}" = "$c" ] && return 0; done
  fail "--${var//_/-} must be $(one_of "$@"), got '${!var}'"
}

# check_number <var> <kind>: real (any finite number), >0, >=0, 0..1, int>=0 or int>=1.
check_number() {
  local var=$1 kind=$2 what
  case "$kind" in
    real) what="a number" ;; '>0'|'>=0') what="a number $kind" ;; 0..1) what="a number in [0, 1]" ;;
    int*) what="a whole number ${kind#int}" ;;
  esac
  awk -v x="${!var}" -v kind="$kind" 'BEGIN {
    if (kind ~ /^int/ ? x !~ /^[0-9]+$/ : x !~ /^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$/) exit 1
    v = x + 0
    if (!(v > -1e300 && v < 1e300)) exit 1
    if (kind == ">0" && !(v > 0) || kind == ">=0" && !(v >= 0) || kind == "0..1" && !(v >= 0 && v <= 1)) exit 1
    if (kind == "int>=1" && !(v >= 1)) exit 1 }' ||
    fail "--${var//_/-} must be $what, got '${!var}'"
}

# check_bool <var>...: true or false (the options whose default is neither, or set by a caller).
check_bool() {
  local var
  for var in "$@"; do check_choice "$var" true false; done
}

# check_device <var>: auto, cpu, cuda or cuda:N (as the rescore commands take it).
check_device() {
  case "${!1}" in auto|cpu|cuda|cuda:[0-9]|cuda:[0-9][0-9]) ;;
    *) fail "--${1//_/-} must be auto, cpu, cuda or cuda:N, got '${!1}'" ;;
  esac
}

# check_files <file>...: each exists.
check_files() {
  local f
  for f in "$@"; do [ -f "$f" ] || fail "expected file $f to exist"; done
}

# check_words_txt <file>: a Kaldi symbol table, "<word> <integer id>" on every line.
check_words_txt() {
  check_files "$1"
  awk -v step="$0" -v file="$1" 'NF != 2 || $2 !~ /^[0-9]+$/ {
         printf "%s: %s:%d: expected <word> <integer id> (a Kaldi words.txt), got: %s\n", step, file, FNR, $0
         bad = 1; exit 1 }
       END { if (!bad && NR == 0) { printf "%s: %s: expected a Kaldi words.txt, got an empty file\n", step, file; exit 1 } }' \
    "$1" || exit 1
}

# check_old_lm <lang-dir>: sets oldlm to its G.carpa, else its G.fst (the LM of the decoding).
check_old_lm() {
  if [ -f "$1/G.carpa" ]; then
    oldlm=$1/G.carpa
  elif [ -f "$1/G.fst" ]; then
    oldlm=$1/G.fst
  else
    fail "expected $1/G.carpa or $1/G.fst to exist (the LM used in decoding)"
  fi
}

# check_decode_dir <decode-dir>: sets nj from its num_jobs; every lat.JOB.gz exists.
check_decode_dir() {
  local n
  check_files "$1/num_jobs" "$1/lat.1.gz"
  nj=$(< "$1/num_jobs")
  case "$nj" in
    ''|*[!0-9]*|0) fail "expected a number of jobs in $1/num_jobs, got '$nj'" ;;
  esac
  for n in $(seq "$nj"); do
    [ -f "$1/lat.$n.gz" ] || fail "expected file $1/lat.$n.gz to exist (num_jobs is $nj)"
  done
}

# check_models <a[:b...]> <mix>: one model or several as a colon-separated list, each a dir with
# model.pt, a checkpoint file (not empty) or hf:DIR, a Hugging Face model directory (what
# rescore-import-lm writes: config.json beside its weights); with a mix, one share per model, each
# >= 0, summing to 1. Sets model_files (the models as rescore-nbest takes them) and model_opts
# (--model each, --mix).
check_models() {
  local m list i
  model_files=()
  model_opts=()
  IFS=: read -r -a list <<< "$1"
  [ ${#list[@]} -eq 0 ] && fail "expected a model dir or checkpoint, got '$1'"
  for ((i = 0; i < ${#list[@]}; i++)); do
    m=${list[i]}
    [ -z "$m" ] && fail "expected a model dir or checkpoint between the colons of '$1'"
    if [ "$m" = hf ]; then  # hf:DIR: the next field is the directory
      i=$((i + 1))
      m=${list[i]:-}
      [ -n "$m" ] || fail "expected hf:DIR, a Hugging Face model directory, in '$1'"
      [ -f "$m/config.json" ] ||
        fail "expected hf:$m to be a Hugging Face model directory (config.json, as rescore-import-lm writes), got no $m/config.json"
      m=hf:$m
    else
      [ -d "$m" ] && m=$m/model.pt
      check_files "$m"
      [ -s "$m" ] || fail "expected $m to be a model (model.pt of rescore-train-lm), got an empty file"
    fi
    model_files+=("$m")
    model_opts+=(--model "$m")
  done
  [ -z "$2" ] && return 0
  [ "$(awk -F, '{ print NF }' <<< "$2")" -eq ${#model_files[@]} ] ||
    fail "--mix needs one share per model (${#model_files[@]} in '$1'), got '$2'"
  awk -F, '{ for (i = 1; i <= NF; i++) { if ($i !~ /^([0-9]+[.]?[0-9]*|[.][0-9]+)$/) exit 1; s += $i }
             exit (s - 1 > 1e-6 || 1 - s > 1e-6) }' <<< "$2" ||
    fail "--mix must be shares >= 0 summing to 1, one per model, e.g. 0.6,0.4; got '$2'"
  model_opts+=(--mix "$2")
}

# check_programs <program>...: each is on PATH (path.sh puts Kaldi's there).
check_programs() {
  local prog missing=
  for prog in "$@"; do
    command -v "$prog" >/dev/null 2>&1 || missing="$missing $prog"
  done
  [ -z "$missing" ] && return 0
  echo "$0: not found on PATH:$missing"
  echo "$0: Kaldi's binaries come from \$KALDI_ROOT through path.sh; the rescore-* commands from"
  echo "$0: the bin/ of the Python environment rescore is installed in, added at the end of PATH in"
  echo "$0: path.sh (export PATH=\$PATH:\$HOME/rescore/.venv/bin)."
  exit 1
}

# check_passed_options <program> <var>: every --option in the value of var is one of the program's.
check_passed_options() {
  local opt help
  [ -n "${!2}" ] || return 0
  help=$("$1" --help 2>&1) || fail "$1 --help failed: $help"
  for opt in ${!2}; do
    case "$opt" in
      --*) grep -q -e "${opt%%=*}[ ,=]" -e "${opt%%=*}\$" <<< "$help" ||
             fail "--${2//_/-}: $opt is not an option of $1 (see $1 --help)" ;;
    esac
  done
}

# read_params: with --params FILE (what rescore-tune --params-out writes: "weight", "inv_acwt",
# "wip" and, with several models, "mix"), set weight, inv_acwt, wip (and mix) from it; they are
# checked as the options are. nbest_inv_acwt keeps --inv-acwt: the acoustic scale the N-best
# lists are cut at stays the one of the lists the setting was tuned on.
read_params() {
  local flat v key
  nbest_inv_acwt=$inv_acwt  # the N-best lists stay cut at --inv-acwt, as on the set tuned on
  [ -n "${params:-}" ] || return 0
  check_files "$params"
  flat=$(tr -d ' \t\n\r' < "$params")
  for key in weight inv_acwt wip; do
    v=$(sed -n "s/.*\"$key\":\([-+0-9.eE]*\)[,}].*/\1/p" <<< "$flat")
    [ -n "$v" ] || fail "--params $params: expected a setting written by rescore-tune --params-out (a number" \
                        "\"$key\"), got none"
    printf -v "$key" '%s' "$v"
  done
  v=$(sed -n 's/.*"mix":\[\([-+0-9.eE,]*\)\].*/\1/p' <<< "$flat")
  if [ -n "$v" ]; then mix=$v; fi
  echo "$0: setting from $params: weight $weight, inv-acwt $inv_acwt, wip $wip${mix:+, mix $mix}"
}

# check_step_inputs <old-lang-dir> <model> <data-dir> <input-decode-dir> <output-decode-dir>: the
# options and inputs lmrescore_nbest.sh and lmrescore_lattice.sh share (their own are theirs):
# the numbers, choices and switches, the old lang dir (sets oldlm), the data dir, --train-text,
# the decode dir (sets nj), an output dir that is not the input one, the models (check_models).
check_step_inputs() {
  read_params
  check_number stage 'int>=1'
  check_number inv_acwt '>0'
  check_number weight 0..1
  check_number wip real
  [ -n "$max_tokens" ] && check_number max_tokens 'int>=1'
  [ "$oov_penalty" = auto ] || check_number oov_penalty '>=0'
  check_choice state_carry none first-pass rescored
  check_device device
  check_bool keep_ali skip_scoring
  check_old_lm "$1"
  check_words_txt "$1/words.txt"
  check_files "$3/utt2spk" ${train_text:+"$train_text"}
  check_decode_dir "$4"
  [ -d "$5" ] && [ "$(cd "$4" && pwd -P)" = "$(cd "$5" && pwd -P)" ] &&
    fail "expected an output dir other than the input dir $4"
  check_models "$2" "$mix"
}

# --- pieces of the stages --------------------------------------------------------------------

# The flag of fstproject that keeps the output side: OpenFst renamed it in 1.7.9; try the new
# one on a one-state FST.
fstproject_output_flag() {
  if echo 0 | fstcompile | fstproject --project_type=output >/dev/null 2>&1; then
    echo "--project_type=output"
  else
    echo "--project_output=true"
  fi
}

# score_decode_dir <data-dir> <lang-dir> <decode-dir>: local/score.sh, unless --skip-scoring true
# (check_scoring made sure before stage 1 that there is one).
score_decode_dir() {
  $skip_scoring && return 0
  [ -x local/score.sh ] ||
    fail "cannot score: local/score.sh does not exist or is not executable (--skip-scoring true: do not score)"
  echo "$0: scoring"
  # $scoring_opts holds options: it must split.
  # shellcheck disable=SC2086
  local/score.sh --cmd "$cmd" $scoring_opts "$1" "$2" "$3" ||
    fail "scoring failed (skip it with --skip-scoring true)"
}

# check_scoring: a step that scores at its end (--skip-scoring false) needs the recipe's
# local/score.sh; without it the step stops before any work rather than after the rescoring.
check_scoring() {
  $skip_scoring && return 0
  [ -x local/score.sh ] && return 0
  fail "local/score.sh does not exist or is not executable in $PWD: the step scores its output with it" \
       "(run it from your recipe's directory, or give --skip-scoring true to rescore without scoring)"
}

# best_wer <decode-dir>: the best line of local/score.sh's grid in the dir (its wer_* files, or
# the score_*/*.sys of sclite scoring) through utils/best_wer.sh; empty when it has none.
best_wer() {
  local files
  [ -x utils/best_wer.sh ] || return 0
  files=$(find "$1" -maxdepth 1 -name 'wer_*' -type f | sort)
  if [ -n "$files" ]; then
    # shellcheck disable=SC2086  # a list of file names without spaces (Kaldi's)
    grep -H WER $files | utils/best_wer.sh
    return 0
  fi
  files=$(find "$1" -mindepth 2 -maxdepth 2 -path '*/score_*/*.sys' -type f | sort)
  # shellcheck disable=SC2086
  [ -n "$files" ] && grep -H Sum $files | utils/best_wer.sh
  return 0
}

# wer_summary <data-dir> <input-decode-dir> <output-decode-dir>: the first pass against the
# rescored output at the end of a step: the best of local/score.sh's grid (LMWT and penalty,
# tuned on this set itself) in each dir, then both 1-bests at the step's own setting
# (--weight, --inv-acwt, --wip, e.g. tuned on dev by rescore-tune and given with --params):
# rank 1 of the N-best lists and the rescored text, scored by rescore-wer.
wer_summary() {
  local data=$1 indir=$2 dir=$3 first rescored w
  [ -f "$data/text" ] || { echo "$0: no $data/text: no WER"; return 0; }
  first=$(best_wer "$indir")
  rescored=$(best_wer "$dir")
  echo "$0: WER against $data/text"
  echo "$0:   first pass, best of local/score.sh's grid: ${first:-none (no wer_* or score_*/*.sys in $indir)}"
  echo "$0:   rescored,   best of local/score.sh's grid: ${rescored:-none (no wer_* or score_*/*.sys in $dir)}"
  [ -f "$dir/text" ] && [ -f "$dir/text.first_pass" ] || return 0
  echo "$0:   at the step's setting (weight $weight, inv-acwt $inv_acwt, wip $wip):"
  w=$(rescore-wer --allow-missing "$data/text" "$dir/text.first_pass" 2>/dev/null | grep '^%WER') || w=failed
  echo "$0:   first pass, rank 1 of the N-best at inv-acwt ${nbest_inv_acwt:-$inv_acwt} ($dir/text.first_pass): $w"
  w=$(rescore-wer --allow-missing "$data/text" "$dir/text" 2>/dev/null | grep '^%WER') || w=failed
  echo "$0:   rescored ($dir/text): $w"
}

# lm_systems <models> <a:b>: the models, then their interpolation a+b when every part is one of them.
lm_systems() {
  local part name=${2//:/+}
  for part in ${2//:/ }; do
    case " $1 " in *" $part "*) ;; *) name=; break ;; esac
  done
  echo "$1${name:+ $name}"
}

# --- for a recipe's run.sh ----------------------------------------------------------------------

# in_stage <n> <what>: stage n is between --stage and --stop-stage (then it says so).
in_stage() {
  [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ] || return 1
  echo "$0: stage $1: $2"
}

# recipe_dirs <default-kaldi-dir>: kaldi_dir, the finished Kaldi system (absolute; the default
# when --kaldi-dir is empty), steps (rescore's recipes/steps) and lmdata (the LM text, here).
recipe_dirs() {
  kaldi_dir=$(cd "${kaldi_dir:-$1}" 2>/dev/null && pwd) ||
    fail "expected the finished Kaldi system in ${kaldi_dir:-$1} (--kaldi-dir, or \$KALDI_ROOT in path.sh)"
  steps=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  lmdata=data/rescore
}

# check_stage <step> <arg>...: the step run with --check-only true (its options, checked before the
# recipe's first stage); what it says only when it fails.
check_stage() {
  local out
  out=$("$1" --check-only true "${@:2}" 2>&1) || { echo "$out"; exit 1; }
}

# The option names of a script's configuration section.
config_names() {
  awk '/^# Begin configuration section/ { on = 1; next } /^# End configuration section/ { on = 0 }
       on && /^[A-Za-z_][A-Za-z0-9_]*=/ { sub(/=.*/, ""); print }' "$1"
}

# step_options <step>: sets opts to "--name value" for every option of the step's configuration
# section that this script's configuration section has too: a recipe passes its settings on.
step_options() {
  local name ours
  ours=" $(config_names "$0" | tr '\n' ' ') "
  opts=()
  for name in $(config_names "$1"); do
    case "$ours" in *" $name "*) opts+=("--${name//_/-}" "${!name}") ;; esac
  done
}
