#!/usr/bin/env bash
# Citus (distributed PostgreSQL) for the server's PostgreSQL, as root. Idempotent.
#
#   setup-citus.sh [citus-X.Y.Z.tar.gz]
#
# Where the distribution packages Citus for this PostgreSQL (postgresql-NN-citus-*), that
# package is installed. Otherwise Citus is built from the source tarball given (Citus is
# AGPL-3.0; its licence is inside the tarball): about 5 minutes on 2 cores. Citus 13.2.x
# is the newest that supports PostgreSQL 15.
set -euo pipefail

say() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-citus.sh must run as root" >&2
  exit 1
fi
PG=$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sed -E 's#.*/postgresql/([0-9]+)/.*#\1#' | sort -n | tail -1 || true)
if [ -z "$PG" ]; then
  echo "setup-citus.sh: no PostgreSQL server found (run kbpg/system/setup-debian.sh first)" >&2
  exit 1
fi
LIB=$(/usr/lib/postgresql/$PG/bin/pg_config --pkglibdir)
if [ -f "$LIB/citus.so" ]; then
  say "Citus is installed for PostgreSQL $PG ($LIB/citus.so)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
pkg=$(apt-cache search --names-only "^postgresql-$PG-citus" 2>/dev/null | awk '{print $1}' | sort -V | tail -1 || true)
if [ -n "$pkg" ]; then
  say "apt-get install $pkg"
  apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
  exit 0
fi
TARBALL=${1:-}
if [ -z "$TARBALL" ] || [ ! -f "$TARBALL" ]; then
  echo "setup-citus.sh: no Citus package for PostgreSQL $PG here; give the path of Citus's" \
       "source tarball (citus-X.Y.Z.tar.gz) to build it" >&2
  exit 2
fi
missing=()
for p in "postgresql-server-dev-$PG" build-essential libcurl4-openssl-dev liblz4-dev \
         libzstd-dev libkrb5-dev libssl-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
say "building Citus from $(basename "$TARBALL") for PostgreSQL $PG (about 5 minutes)"
tar xzf "$TARBALL" -C "$BUILD"
SRC=$(ls -d "$BUILD"/citus-*/ | head -1)
cd "$SRC"
# PostgreSQL 15.20 exports have_createdb_privilege(); Citus 13.2.2 defines its own static
# copy ("static declaration follows non-static declaration"): rename Citus's.
if grep -q '^have_createdb_privilege(void)$' src/include/pg_version_compat.h; then
  sed -i 's/^have_createdb_privilege(void)$/#define have_createdb_privilege citus_have_createdb_privilege\nhave_createdb_privilege(void)/' \
    src/include/pg_version_compat.h
fi
./configure PG_CONFIG="/usr/lib/postgresql/$PG/bin/pg_config" >"$BUILD/configure.log" 2>&1 \
  || { tail -20 "$BUILD/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$BUILD/make.log" 2>&1 || { tail -30 "$BUILD/make.log" >&2; exit 1; }
make install >"$BUILD/install.log" 2>&1 || { tail -20 "$BUILD/install.log" >&2; exit 1; }
say "Citus installed for PostgreSQL $PG ($LIB/citus.so)"
