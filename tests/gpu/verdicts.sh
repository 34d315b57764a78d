# shellcheck shell=bash disable=SC2154 # $bin, $out: the sourcing script's
# Sourced by the scripts of tests/gpu: the lines of a run's verdicts (one `PASS|FAIL|SKIP what`
# line per check, in $bin/verdicts.txt) and their closing summary. A script whose lines go
# elsewhere, or whose check differs, defines its own after sourcing this (criu_cli.sh, room_cli.sh,
# container.sh's check).
#   verdict KIND WHAT              the line, on stdout and in $bin/verdicts.txt
#   check NAME RC [WHY]            PASS where RC is 0, else FAIL (with WHY)
#   verdicts_of                    stdin's `PASS|FAIL what` lines as verdicts, its others echoed
#                                  (a Python check's output)
#   verdict_summary FILE [LABEL]   prints the counts, the FAIL and SKIP lines and $OUT's files;
#                                  succeeds when nothing failed and something passed
verdict() { echo "$1 $2"; echo "$1 $2" >>"$bin/verdicts.txt"; }
check() { if [[ $2 == 0 ]]; then verdict PASS "$1"; else verdict FAIL "$1${3:+: $3}"; fi; }
verdicts_of() {
  local line
  while IFS= read -r line; do
    case $line in PASS* | FAIL*) verdict "${line%% *}" "${line#* }" ;; *) echo "$line" ;; esac
  done
}

verdict_summary() {
  local file=$1 label=${2:-} pass fail skip
  pass=$(grep -c '^PASS ' "$file")
  fail=$(grep -c '^FAIL ' "$file")
  skip=$(grep -c '^SKIP ' "$file")
  echo
  echo "== summary${label:+ ($label)}: $pass PASS, $fail FAIL, $skip SKIP in $SECONDS s"
  grep -E '^(FAIL|SKIP) ' "$file" | sed 's/^/   /'
  ls -l "$out"
  ((fail == 0 && pass > 0))
}
