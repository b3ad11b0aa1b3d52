#!/usr/bin/env bash
# Takes docs/notification.png headless: Xvfb, dunst on a private session bus, the
# built ferryd, and a real batch (two downloads and a 404) from a local web server.
# Needs: apt-get install xvfb dunst imagemagick librsvg2-bin x11-utils fonts-dejavu-core
# Usage: BIN=.build/debug scripts/notification-screenshot.sh [OUT.png]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$root/.build/debug}
out=${1:-$root/docs/notification.png}
work=$(mktemp -d /tmp/ferry-shot.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
display_number=97

mkdir -p "$work/home/.config/dunst" "$work/icons" "$work/www"
echo 'XDG_DOWNLOAD_DIR="$HOME/Downloads"' > "$work/home/.config/user-dirs.dirs"
rsvg-convert -w 48 -h 48 "$root/desktop/org.ferry.Ferry.svg" -o "$work/icons/org.ferry.Ferry.png"
cat > "$work/home/.config/dunst/dunstrc" <<CONF
[global]
    width = 420
    height = 200
    origin = top-right
    offset = 16x16
    padding = 12
    horizontal_padding = 12
    frame_width = 1
    frame_color = "#3a3f4b"
    font = DejaVu Sans 11
    markup = full
    format = "<b>%s</b>\n%b"
    icon_position = left
    min_icon_size = 48
    max_icon_size = 48
    icon_path = $work/icons
    corner_radius = 8
    show_indicators = no
[urgency_normal]
    background = "#20242c"
    foreground = "#e8eaef"
    timeout = 0
CONF
head -c 2300000 /dev/urandom > "$work/www/debian-12.iso"
head -c 840000 /dev/urandom > "$work/www/photos.zip"
/usr/bin/convert -size 1024x400 gradient:'#6b7a8f'-'#3d4a5c' "$work/bg.png"

Xvfb ":$display_number" -screen 0 1024x400x24 >/dev/null 2>&1 &
sleep 1
export HOME="$work/home" DISPLAY=":$display_number" WORK="$work" BIN
dbus-run-session -- bash -euc '
  display -window root "$WORK/bg.png" || true  # sets the background, exits non-zero
  dunst -config "$HOME/.config/dunst/dunstrc" >/dev/null 2>&1 &
  (cd "$WORK/www" && exec python3 -m http.server 8797 --bind 127.0.0.1 >/dev/null 2>&1) &
  "$BIN/ferryd" --no-idle-exit 2>"$WORK/ferryd.log" &
  for _ in $(seq 50); do busctl --user status org.ferry.Ferry1 >/dev/null 2>&1 && break; sleep 0.1; done
  u=http://127.0.0.1:8797
  ids=$("$BIN/ferry" get --paused $u/debian-12.iso $u/photos.zip $u/report.pdf)
  "$BIN/ferry" resume --all >/dev/null
  "$BIN/ferry" wait $ids || true
  for _ in $(seq 50); do xwininfo -root -tree | grep -q "\"Dunst\"" && break; sleep 0.1; done
  sleep 0.5
  import -window root "$WORK/screen.png"
  xwininfo -root -tree | grep "\"Dunst\"" | head -1 > "$WORK/geometry"
'
# "Dunst": ("Dunst" "Dunst")  WxH+X+Y ...: crop with a 16-pixel margin.
read -r w h x y < <(grep -o '[0-9]*x[0-9]*+[0-9]*+[0-9]*' "$work/geometry" | head -1 | tr 'x+' '  ')
m=16
/usr/bin/convert "$work/screen.png" -crop "$((w + 2*m))x$((h + 2*m))+$((x - m))+$((y - m))" +repage -strip "$out"
echo "wrote $out"
