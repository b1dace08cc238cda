#!/bin/bash
# usage: pair.sh ROUNDS "patterns args" libA libB ... : paired ratios (lib/libA) of ops_per_sec, per round
# The pattern benchmarks through ../loose-bins-2core/pairb.sh (which takes any benchmark).
exec "$(dirname "$0")/../loose-bins-2core/pairb.sh" "$1" build/bin/strata-bench-patterns "$2" "${@:3}"
