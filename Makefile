# Ferry: build, test, demo, benchmark, install.
# `make demo` and `make test` work on a fresh Debian 12 machine with the Swift
# toolchain on PATH (or in /opt/swift); they install the Debian packages they need.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PREFIX  ?= $(HOME)/.local
BINDIR  ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
# ferryd looks for its Metalink reader beside itself, then in ../libexec/ferry from its
# own folder: keep LIBEXECDIR there when you move BINDIR.
LIBEXECDIR ?= $(PREFIX)/libexec/ferry
DESTDIR ?=

SWIFT   ?= swift
PYTHON  ?= python3

# Where the toolchain lives when it is not on PATH already.
export PATH := $(PATH):/opt/swift/usr/bin

# Debian packages the build, the tests, the demo and the benchmark use. libnotify is
# loaded at run time by ferryd's first notification (no headers needed): libnotify4.
# FoundationXML (in ferry-metalink-reader, the process ferryd reads Metalink documents
# with) links libxml2.so.2: the run-time package is enough to link and run, no headers
# are needed: libxml2. xdg-desktop-portal with glib-networking and the GNOME schemas: the
# real portal a test asks for GNOME's proxy settings.
DEB_PACKAGES := libdbus-1-dev libcurl4-openssl-dev libnotify4 libxml2 libsqlite3-dev dbus pkg-config python3 python3-dbusmock nginx-light curl aria2 python3-dbus libglib2.0-bin systemd bubblewrap xdg-dbus-proxy python3-fusepy python3-h2 openssl xdg-desktop-portal glib-networking gsettings-desktop-schemas

MANDIR  ?= $(DATADIR)/man

# What `make install` puts in place (and `make uninstall` removes). systemd looks
# for user units in $XDG_DATA_HOME/systemd/user (~/.local/share/systemd/user) and
# in $XDG_DATA_DIRS/systemd/user (/usr/local/share/systemd/user).
SERVICE_FILE := $(DESTDIR)$(DATADIR)/dbus-1/services/org.ferry.Ferry1.service
XML_FILE     := $(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.ferry.Ferry1.xml
UNIT_FILE    := $(DESTDIR)$(DATADIR)/systemd/user/ferryd.service
DESKTOP_FILE := $(DESTDIR)$(DATADIR)/applications/org.ferry.Ferry.desktop
ICON_FILE    := $(DESTDIR)$(DATADIR)/icons/hicolor/scalable/apps/org.ferry.Ferry.svg
BASH_COMPLETION := $(DESTDIR)$(DATADIR)/bash-completion/completions/ferry
ZSH_COMPLETION  := $(DESTDIR)$(DATADIR)/zsh/site-functions/_ferry
FISH_COMPLETION := $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/ferry.fish
MAN_PAGES    := $(DESTDIR)$(MANDIR)/man1/ferry.1 $(DESTDIR)$(MANDIR)/man8/ferryd.8
INSTALLED    := $(DESTDIR)$(BINDIR)/ferryd $(DESTDIR)$(BINDIR)/ferry $(DESTDIR)$(LIBEXECDIR)/ferry-metalink-reader $(SERVICE_FILE) $(XML_FILE) $(UNIT_FILE) \
                $(DESKTOP_FILE) $(ICON_FILE) $(BASH_COMPLETION) $(ZSH_COMPLETION) $(FISH_COMPLETION) $(MAN_PAGES)

.PHONY: all deps build test demo bench install uninstall clean

all: build

# Installs only what is missing, so a re-run costs one dpkg-query.
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q ' installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "Installing Debian packages:$$missing"; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

build: deps
	$(SWIFT) build -c release

# The integration tests start a private dbus-daemon and the built ferryd/ferry;
# then the benchmark harness's own tests (bench/test_*.py, a few seconds).
test: deps
	$(SWIFT) build --build-tests
	bin="$$($(SWIFT) build --show-bin-path)"; \
	FERRYD_PATH="$$bin/ferryd" FERRY_CLI_PATH="$$bin/ferry" $(SWIFT) test --disable-swift-testing
	$(PYTHON) -m unittest discover -s bench -p 'test_*.py'

demo: build
	BIN="$$($(SWIFT) build -c release --show-bin-path)" bash scripts/demo.sh

bench: build
	$(PYTHON) bench/run.py $(BENCH_ARGS)

# Copies the release build; run `make build` first (so `sudo make install`
# does not build as root).
install:
	bin="$$($(SWIFT) build -c release --show-bin-path)"; \
	for exe in ferryd ferry ferry-metalink-reader; do \
	  [ -x "$$bin/$$exe" ] || { echo "$$bin/$$exe is missing: run 'make build' first" >&2; exit 1; }; \
	done; \
	for f in $(INSTALLED); do install -d "$$(dirname "$$f")"; done; \
	install -m 755 "$$bin/ferryd" "$$bin/ferry" "$(DESTDIR)$(BINDIR)/"; \
	install -m 755 "$$bin/ferry-metalink-reader" "$(DESTDIR)$(LIBEXECDIR)/"; \
	for shell in bash zsh fish; do \
	  case $$shell in bash) out="$(BASH_COMPLETION)";; zsh) out="$(ZSH_COMPLETION)";; fish) out="$(FISH_COMPLETION)";; esac; \
	  "$$bin/ferry" --generate-completion-script $$shell > "$$out"; \
	done
	sed 's|@bindir@|$(BINDIR)|g' dbus/org.ferry.Ferry1.service.in > "$(SERVICE_FILE)"
	sed 's|@bindir@|$(BINDIR)|g' desktop/ferryd.service > "$(UNIT_FILE)"
	sed 's|^Exec=ferryd|Exec=$(BINDIR)/ferryd|' desktop/org.ferry.Ferry.desktop > "$(DESKTOP_FILE)"
	install -m 644 dbus/org.ferry.Ferry1.xml "$(XML_FILE)"
	install -m 644 desktop/org.ferry.Ferry.svg "$(ICON_FILE)"
	install -m 644 desktop/man/ferry.1 "$(DESTDIR)$(MANDIR)/man1/ferry.1"
	install -m 644 desktop/man/ferryd.8 "$(DESTDIR)$(MANDIR)/man8/ferryd.8"
	@echo "Installed under $(DESTDIR)$(PREFIX). A running systemd user manager picks the unit up after 'systemctl --user daemon-reload'."

uninstall:
	rm -f $(foreach f,$(INSTALLED),"$(f)")
	rmdir "$(DESTDIR)$(LIBEXECDIR)" 2>/dev/null || true

clean:
	rm -rf .build bench/out
