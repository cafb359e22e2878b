#!/usr/bin/env bash
# Debian's PostgreSQL for the River peer benchmark (internal/tools/bench/riverpeer): run as root,
# without systemd, on the cluster's stock settings.
#
#   scripts/postgres.sh start   install (apt-get) if missing, create the cluster if there is
#                               none, start it, create the role and the database, print the URL
#   scripts/postgres.sh stop    stop the cluster
#   scripts/postgres.sh drop    stop the cluster and delete it, its data with it
#   scripts/postgres.sh url     print the URL (export it as WASMJOBS_PG_URL)
#
# The cluster is Debian's own (`pg_ctlcluster VERSION main start`, the newest installed
# version unless WASMJOBS_PG_VERSION names one; WASMJOBS_PG_CLUSTER names another cluster).
# Clients connect over the unix socket with Debian's stock peer authentication: the script
# creates a login role named after the OS user who runs the benchmark (WASMJOBS_PG_USER,
# default: the user running this script, so root), and the database `river`
# (WASMJOBS_PG_DB) owned by it, so River's migrations and its bench's TRUNCATE and VACUUM
# FULL run without a superuser. Nothing in postgresql.conf or pg_hba.conf is changed.
set -euo pipefail

CLUSTER=${WASMJOBS_PG_CLUSTER:-main}
DB=${WASMJOBS_PG_DB:-river}
ROLE=${WASMJOBS_PG_USER:-$(id -un)}
SOCKDIR=/var/run/postgresql

version() {
  if [ -n "${WASMJOBS_PG_VERSION:-}" ]; then
    echo "$WASMJOBS_PG_VERSION"
  else
    ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1
  fi
}

install() {
  if [ -z "$(version)" ] || [ ! -x /usr/bin/pg_ctlcluster ]; then
    echo "installing postgresql" >&2
    apt-get update -qq >&2
    # The package's postinst creates the `main` cluster; with no init system it cannot
    # start it, which is fine: start() does.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
}

# port prints the cluster's port, empty when the cluster does not exist.
port() {
  pg_lsclusters -h 2>/dev/null | awk -v v="$1" -v c="$CLUSTER" '$1 == v && $2 == c { print $3 }'
}

online() {
  pg_lsclusters -h 2>/dev/null | awk -v v="$1" -v c="$CLUSTER" '$1 == v && $2 == c { print $4 }' | grep -q '^online'
}

url() {
  local v p
  v=$(version)
  p=$(port "$v")
  echo "postgres://${ROLE}@/${DB}?host=${SOCKDIR}&port=${p:-5432}"
}

psql_admin() { runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$1" -d postgres -tA -c "$2"; }

start() {
  install
  local v p
  v=$(version)
  if [ -z "$(port "$v")" ]; then
    pg_createcluster "$v" "$CLUSTER" >&2
  fi
  if ! online "$v"; then
    pg_ctlcluster "$v" "$CLUSTER" start >&2
  fi
  p=$(port "$v")
  # pg_ctlcluster returns once the server accepts connections; wait anyway, briefly, in
  # case it was started by someone else a moment ago.
  for _ in $(seq 1 50); do
    runuser -u postgres -- pg_isready -q -h "$SOCKDIR" -p "$p" && break
    sleep 0.2
  done
  if [ "$ROLE" != postgres ] && [ -z "$(psql_admin "$p" "select 1 from pg_roles where rolname = '$ROLE'")" ]; then
    psql_admin "$p" "create role \"$ROLE\" login"
  fi
  if [ -z "$(psql_admin "$p" "select 1 from pg_database where datname = '$DB'")" ]; then
    psql_admin "$p" "create database \"$DB\" owner \"$ROLE\""
  fi
  url
}

stop() {
  local v
  v=$(version)
  if [ -n "$v" ] && online "$v"; then
    pg_ctlcluster "$v" "$CLUSTER" stop >&2
  fi
}

drop() {
  local v
  v=$(version)
  if [ -n "$v" ] && [ -n "$(port "$v")" ]; then
    pg_dropcluster --stop "$v" "$CLUSTER" >&2
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  drop) drop ;;
  url) url ;;
  *) echo "usage: $0 start|stop|drop|url" >&2; exit 2 ;;
esac
