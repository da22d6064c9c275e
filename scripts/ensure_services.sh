#!/usr/bin/env bash
# Installs the Debian packages the tests use for real, when missing: PostgreSQL and Redis (servers the tests
# start on free localhost ports) and Chromium (the browser test).
# Needs root (or passwordless sudo) the first time; a no-op once installed.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo -n"
fi
echo "ensure_services: installing ${missing[*]} from Debian"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's package starts a cluster on port 5432; the tests start their own on free ports, so stop it.
$SUDO service postgresql stop >/dev/null 2>&1 || true
$SUDO service redis-server stop >/dev/null 2>&1 || true
