# shellcheck shell=bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# --help for a rescore step or recipe script, sourced right after its configuration section
# (by libs/common.sh, or by a recipe's run.sh before its path.sh, so that --help needs neither
# Kaldi nor a recipe directory): adds every option of the configuration section, with its default
# and comment, to $help_message; prints it on --help (or -h) and exits 0; an option the script
# does not have: Kaldi's "invalid option" message and the help, exit 1. Defines show_help and
# usage_exit. Sourced twice (run.sh, then common.sh), it does its work once.
# shellcheck disable=SC2154

if [ -z "${_rescore_help_done:-}" ]; then
_rescore_help_done=1

# The configuration section of $1 as help: "--name default   comment" per option, the comment's
# continuation lines below it, comment lines of their own as they are.
options_help() {
  echo "Options (each with its default; '' is empty):"
  awk -v q="'" '/^# Begin configuration section/ { on = 1; next }
       /^# End configuration section/ { on = 0 }
       !on || /^[ \t]*$/ { next }
       /^[A-Za-z_][A-Za-z0-9_]*=/ {
         name = $0; sub(/=.*/, "", name); rest = substr($0, length(name) + 2)
         if (rest ~ /^"/) match(rest, /^"[^"]*"/); else if (substr(rest, 1, 1) == q) match(rest, "^" q "[^" q "]*" q)
         else match(rest, /^[^ \t]*/)
         value = substr(rest, 1, RLENGTH); comment = substr(rest, RLENGTH + 1)
         sub(/^[ \t]*(#[ \t]?)?/, "", comment)
         if (value == "" || value == "\"\"") value = q q
         gsub(/_/, "-", name)
         head = "  --" name " " value
         if (length(head) > 30 && comment != "") { print head; head = "" }
         printf "%-31s %s\n", head, comment; next }
       /^[ \t]+#/ { c = $0; sub(/^[ \t]+#[ \t]?/, "", c); printf "%-31s %s\n", "", c; next }
       /^#/ { c = $0; sub(/^#[ \t]?/, "", c); print c }' "$1" | sed 's/[ \t]*$//'
}

# For printf as its format, as Kaldi's parse_options.sh prints it: % and \ escaped.
help_message=$(printf '%s\n\n%s' "$help_message" "$(options_help "$0")" | sed 's/\\/\\\\/g; s/%/%%/g')

show_help() {
  # shellcheck disable=SC2059  # the help is a printf format, with its % and \ escaped
  printf "$help_message\n"
}
# The help, and exit 1: the step was given the wrong number of arguments.
usage_exit() { show_help; exit 1; }

# --help (or -h) among the options: the help, wherever the step is run from; an option the
# step does not have: Kaldi's "invalid option" message (on stderr), then the help.
for ((i = 1; i <= $#; i += 2)); do
  case "${!i}" in
    --help|-h) show_help; exit 0 ;;
    --*=*|--config) ;;  # (parse_options.sh's own)
    --*) name=${!i#--}
         name=${name//-/_}
         [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [ -n "${!name+x}" ] ||
           { echo "$0: invalid option ${!i}"; show_help; exit 1; } >&2 ;;
    *) break ;;
  esac
done
fi
