#!/usr/bin/env bash
# e2e_priority with claims as the scarce resource (worker.max_claims below
# the services with work): priority decides which free service a worker
# claims next (migration 0013).
QW_PRIORITY_SCARCE=claims exec "$(dirname "$0")/e2e_priority.sh"
