# Sourced by run_cli.sh and criu_cli.sh: the closing summary of a run's verdicts file (one
# `PASS|FAIL|SKIP what` line per check).
#   verdict_summary FILE [LABEL]   prints the counts, the FAIL and SKIP lines and $OUT's files;
#                                  succeeds when nothing failed and something passed
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
