#!/usr/bin/env bash
# PostgreSQL's own parts on Debian 12 or 13: the server, PL/Python, pgvector >= 0.8,
# headless Chromium and Tesseract OCR. Run as root (or through sudo) by `make setup` and by
# `kbpg server-setup --system-packages`, which then installs what PL/Python imports.
# Idempotent: each step checks first, so a second run does nothing slow.
set -euo pipefail

say() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-debian.sh must run as root (make setup uses sudo when it is not)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_update() { if [ $APT_UPDATED -eq 0 ]; then apt-get update -qq; APT_UPDATED=1; fi; }
need_pkgs() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    apt_update
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# 1. PostgreSQL: the distribution's version (15 on Debian 12, 17 on Debian 13).
PG=$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sed -E 's#.*/postgresql/([0-9]+)/.*#\1#' | sort -n | tail -1 || true)
if [ -z "$PG" ]; then
  need_pkgs postgresql
  PG=$(ls -d /usr/lib/postgresql/*/bin/postgres | sed -E 's#.*/postgresql/([0-9]+)/.*#\1#' | sort -n | tail -1)
fi
say "PostgreSQL $PG"
need_pkgs "postgresql-$PG" "postgresql-contrib" "postgresql-plpython3-$PG"
PG_CONFIG=/usr/lib/postgresql/$PG/bin/pg_config
EXT_DIR=/usr/share/postgresql/$PG/extension

# 2. pgvector >= 0.8 (HNSW iterative scans).
vector_ok() {
  [ -f "$EXT_DIR/vector.control" ] || return 1
  local v; v=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" "$EXT_DIR/vector.control")
  [ "$(printf '%s\n0.8.0\n' "$v" | sort -V | head -1)" = "0.8.0" ]
}
if ! vector_ok; then
  apt_update
  cand=$(apt-cache policy "postgresql-$PG-pgvector" 2>/dev/null | sed -nE 's/ *Candidate: *([0-9.]+).*/\1/p')
  if [ -n "$cand" ] && [ "$(printf '%s\n0.8.0\n' "$cand" | sort -V | head -1)" = "0.8.0" ]; then
    need_pkgs "postgresql-$PG-pgvector"
  else
    say "building pgvector from Debian's trixie source package (no >= 0.8 binary for PostgreSQL $PG)"
    need_pkgs "postgresql-server-dev-$PG" build-essential dpkg-dev
    if ! grep -rqs "trixie" /etc/apt/sources.list.d/kbpg-trixie-src.sources; then
      cat > /etc/apt/sources.list.d/kbpg-trixie-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
      APT_UPDATED=0
    fi
    apt_update
    build=$(mktemp -d)
    chmod 755 "$build"
    (cd "$build" && apt-get source -qq pgvector >/dev/null 2>&1)
    src=$(ls -d "$build"/pgvector-*/ | head -1)
    make -s -C "$src" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" -j"$(nproc)" >/dev/null
    make -s -C "$src" PG_CONFIG="$PG_CONFIG" install >/dev/null
    rm -rf "$build"
  fi
  vector_ok || { echo "pgvector >= 0.8 could not be installed" >&2; exit 1; }
fi
say "pgvector $(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" "$EXT_DIR/vector.control")"

# 3. Headless Chromium: it renders web pages for kb.add_url (their script-written text),
# and chromium-driver lets the Retrieval Lab's browser tests drive it.
need_pkgs chromium chromium-driver

# 4. Tesseract OCR with its English data: scanned PDF pages and image files are read by it
# (indexing_config ocr_languages; other languages are tesseract-ocr-<lang> packages).
need_pkgs tesseract-ocr tesseract-ocr-eng
