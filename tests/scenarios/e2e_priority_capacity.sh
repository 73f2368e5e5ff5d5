#!/usr/bin/env bash
# e2e_priority with a shared capacity as the scarce resource:
# priority decides which waiting service gets the capacity's freed units.
QW_PRIORITY_SCARCE=capacity exec "$(dirname "$0")/e2e_priority.sh"
