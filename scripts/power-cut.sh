#!/bin/sh
# Power cuts at length (issue 42, point 6): runs PowerCutTests.testBatchSurvivesPowerCuts
# with many cuts on the LazyFS-style FUSE layer (Sources/FerryTestSupport/PowerCutMount.swift),
# first with LazyFS's model (every unsynced byte lost), then with torn cuts (a random
# half of the 4 KiB blocks written since a file's last sync stays, in any order), then
# with strict names (a create, rename or unlink is undone unless its folder was synced).
# Needs root (a usable /dev/fuse) and python3-fusepy.
#   scripts/power-cut.sh [cuts (default 50)] [seed (default: the time)] [modes (default "lazy torn strict")]
# Torn cuts leave holes under a part file's length: ferryd, told by a new boot id that
# the machine restarted, continues each part file only as far as it was synced. The
# negative control, FERRY_POWERCUT_SAME_BOOT=1 scripts/power-cut.sh 20 SEED torn, keeps
# the boot id: then files announced complete hold zeros.
set -u
cd "$(dirname "$0")/.."
cuts=${1:-50}
seed=${2:-$(date +%s)}
modes=${3:-lazy torn strict}
swift build --build-tests || exit 1
bin=$(swift build --show-bin-path)
status=0
for mode in $modes; do
    torn=0; [ "$mode" = torn ] && torn=1
    strict=0; [ "$mode" = strict ] && strict=1
    echo "== $cuts $mode cuts, seed $seed"
    FERRYD_PATH=$bin/ferryd FERRY_CLI_PATH=$bin/ferry \
    FERRY_POWERCUT_CUTS=$cuts FERRY_POWERCUT_SEED=$seed FERRY_POWERCUT_TORN=$torn FERRY_POWERCUT_STRICT=$strict \
        swift test --skip-build --disable-swift-testing --filter PowerCutTests.testBatchSurvivesPowerCuts || status=1
done
exit $status
