# Sourced by the scripts that time several rankwise binaries interleaved
# (ops_ratio.sh, op_focus.sh, types_ops.sh): from the repository root,
#   fresh DIR                 empties the output folder DIR
#   in_turn REP BINARY…       the binaries in repetition REP's order, one
#                             a line: reversed on even repetitions, so no
#                             binary always runs first
#   done_with REP REPS        the progress line, with the load average
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
fresh() { rm -rf "$1"; mkdir -p "$1"; }
in_turn() {
  local rep=$1; shift
  if [ $((rep % 2)) = 0 ]; then printf '%s\n' "$@" | tac; else printf '%s\n' "$@"; fi
}
done_with() { echo "repetition $1 of $2 done ($(cut -d' ' -f1-3 /proc/loadavg))" >&2; }
