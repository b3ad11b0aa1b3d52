#!/bin/sh
# Power cuts at length (issue 42, point 6): runs PowerCutTests.testBatchSurvivesPowerCuts
# with many cuts (default 50) on the LazyFS-style FUSE layer (Sources/FerryTestSupport/
# PowerCutMount.swift). Needs root (or a usable /dev/fuse) and python3-fusepy.
#   scripts/power-cut.sh [cuts] [seed]
# FERRY_POWERCUT_ALL_CHECKS=1 is set: checks the CI run leaves out (known findings) run too.
set -eu
cd "$(dirname "$0")/.."
cuts=${1:-50}
seed=${2:-$(date +%s)}
swift build --build-tests
bin=$(swift build --show-bin-path)
FERRYD_PATH=$bin/ferryd FERRY_CLI_PATH=$bin/ferry \
FERRY_POWERCUT_CUTS=$cuts FERRY_POWERCUT_SEED=$seed FERRY_POWERCUT_ALL_CHECKS=1 \
    swift test --skip-build --disable-swift-testing --filter PowerCutTests.testBatchSurvivesPowerCuts
