#!/usr/bin/env bash
# Ferry's quick start: a real 64 MiB download through ferryd, driven by the ferry CLI.
#
#   make demo                      (builds the release binaries, then runs this)
#   BIN=path/to/bin bash scripts/demo.sh
#
# Without a session bus (a console, ssh, CI) the demo brings its own with
# dbus-run-session. The daemon keeps its state in a temp dir, so nothing is left behind.
# FERRY_DEMO_RATE caps the speed in bytes/s (default 16 MiB/s, so the progress bar
# has a few seconds to show; 0 = as fast as loopback goes).
set -euo pipefail

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\ndemo: %s\n' "$*" >&2; exit 1; }

if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
    command -v dbus-run-session >/dev/null || die "dbus-run-session not found (run 'make deps')"
    echo "No session bus here: starting a private one with dbus-run-session."
    exec dbus-run-session -- bash "$0" "$@"
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$(cd "$repo" && swift build -c release --show-bin-path)}
rate=${FERRY_DEMO_RATE:-16777216}
for exe in ferryd ferry; do
    [ -x "$BIN/$exe" ] || die "$BIN/$exe not found: run 'make build' first"
done
for tool in python3 curl dbus-send sha256sum; do
    command -v "$tool" >/dev/null || die "$tool not found (run 'make deps')"
done

name_owned() {
    dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.NameHasOwner string:org.ferry.Ferry1 2>/dev/null | grep -q 'boolean true'
}
if name_owned; then
    # Another ferryd (an installed one, say) serves this bus: keep out of its way.
    echo "A ferryd is already running on your session bus; the demo uses a private bus instead."
    exec env -u DBUS_SESSION_BUS_ADDRESS bash "$0" "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-demo.XXXXXX")
server_pid=""
ferryd_pid=""
cleanup() {
    status=$?
    set +e
    trap - EXIT INT TERM
    [ -n "$ferryd_pid" ] && kill "$ferryd_pid" 2>/dev/null && wait "$ferryd_pid" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    if [ "$status" -ne 0 ] && [ -s "$work/ferryd.log" ]; then
        echo "--- last lines of the ferryd log ---" >&2
        tail -n 30 "$work/ferryd.log" >&2
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

served="$work/www/ferry-demo-64MiB.bin"
downloads="$work/downloads"
mkdir -p "$work/www" "$downloads" "$work/state"

say "Making a 64 MiB file of random bytes"
head -c $((64 * 1024 * 1024)) /dev/urandom > "$served"
echo "$served"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/$(basename "$served")"
say "Serving it at $url"
python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" \
    >"$work/http.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -sfI "$url" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || die "the HTTP server did not start: $(cat "$work/http.log")"
    sleep 0.1
done
curl -sfI "$url" >/dev/null || die "the HTTP server does not answer on port $port"

say "Starting the daemon: $BIN/ferryd (log: $work/ferryd.log)"
XDG_STATE_HOME="$work/state" "$BIN/ferryd" >"$work/ferryd.log" 2>&1 </dev/null &
ferryd_pid=$!
for _ in $(seq 100); do
    name_owned && break
    kill -0 "$ferryd_pid" 2>/dev/null || die "ferryd exited early"
    sleep 0.1
done
name_owned || die "ferryd did not take the name org.ferry.Ferry1 on the bus"
echo "ferryd (pid $ferryd_pid) owns org.ferry.Ferry1 on $DBUS_SESSION_BUS_ADDRESS"

if [ "$rate" != 0 ]; then
    say "Capping the speed at $((rate / 1024 / 1024)) MiB/s over D-Bus (Manager.SpeedLimit), so you can watch"
    dbus-send --session --print-reply --dest=org.ferry.Ferry1 /org/ferry/Ferry1 \
        org.freedesktop.DBus.Properties.Set string:org.ferry.Ferry1.Manager \
        string:SpeedLimit "variant:uint64:$rate" >/dev/null \
        || echo "(could not set SpeedLimit; going on at full speed)"
fi

say "ferry get $url -d $downloads --wait"
"$BIN/ferry" get "$url" -d "$downloads" --wait || die "the download did not complete (ferry exit status $?)"

say "ferry ls"
"$BIN/ferry" ls

say "Checking the download"
downloaded="$downloads/$(basename "$served")"
[ -f "$downloaded" ] || die "$downloaded not found; the download directory holds: $(ls -A "$downloads")"
want=$(sha256sum "$served" | cut -d' ' -f1)
got=$(sha256sum "$downloaded" | cut -d' ' -f1)
echo "served:     $want"
echo "downloaded: $got"
[ "$want" = "$got" ] || die "sha256 mismatch"
say "OK: ferryd downloaded the file intact."
