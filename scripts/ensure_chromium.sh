#!/usr/bin/env bash
# The browser test drives Debian's Chromium through Playwright (a browser download does
# not work offline, so Playwright's own browsers are not used). Install it if missing.
set -euo pipefail
if [ -n "${ISOLAB_CHROMIUM:-}" ] && [ -x "${ISOLAB_CHROMIUM}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Chromium is missing: installing Debian's chromium package with apt-get ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  command -v chromium >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
The browser test needs Chromium and could not install it (not root, or no apt-get).
Install it yourself, for example:   sudo apt-get install -y chromium
or point ISOLAB_CHROMIUM at a Chromium binary, then run `make test` again.
MSG
exit 1
