#!/bin/sh
# make demo: a tour of lowbit's number formats with the freshly built CLI.
set -e
lowbit=${1:-build/lowbit}
run() {
    echo "\$ lowbit $*"
    "$lowbit" "$@"
    echo
}
run formats
run cast --to fp8_e4m3 237.4 464 464.0001 1e-9 -0
run cast --to fp8_e4m3 --mode ieee 464.0001 1e6
run cast --to fp4_e2m1 0.25 0.75 2.5 3.5 5 7
run cast --to e8m0 0.3 1.5 3 1e-40
run grid fp4_e2m1
