#!/usr/bin/env bash
# Drift benchmark: drift-bench the way spoke-bench.sh runs spoke-bench
# (starts exec-b unless running, 1,000 Harness revisions by default,
# BENCH_REVISIONS changes it; stops exec-b if it started it).
set -euo pipefail
BENCH_BIN=drift-bench exec "$(dirname "${BASH_SOURCE[0]}")/spoke-bench.sh"
