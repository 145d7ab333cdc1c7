#!/usr/bin/env bash
# Start a real PostgreSQL server on loopback for the registry tests and print the SQLAlchemy URL.
# Installs Debian's postgresql when no server binaries are present. Idempotent: reuses a running server.
# `postgres.sh up` prints "up" or "down" (is the server of $DATA running?); `postgres.sh stop` stops it: what a
# test session or CI run started, it stops when it ends (tests/conftest.py, .ci/run).
set -euo pipefail
PORT=${ARBITER_PG_PORT:-55432}
DATA=${ARBITER_PG_DATA:-/tmp/arbiter-pg}
URL="postgresql+psycopg://arbiter:arbiter@127.0.0.1:${PORT}/arbiter"
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "${1:-}" in
  up)
    if [ -n "$bindir" ] && as_pg "$bindir/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then echo up; else echo down; fi
    exit 0 ;;
  stop)
    if [ -n "$bindir" ] && as_pg "$bindir/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
      as_pg "$bindir/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    fi
    exit 0 ;;
esac
if ! as_pg "$bindir/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  rm -rf "$DATA"; mkdir -p "$DATA"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$DATA"
  as_pg "$bindir/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >/dev/null
  as_pg "$bindir/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
      -o "-p $PORT -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null
  as_pg "$bindir/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE ROLE arbiter LOGIN CREATEDB PASSWORD 'arbiter'" >/dev/null
  as_pg "$bindir/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE arbiter OWNER arbiter" >/dev/null
fi
# The tests create (and drop) one database per test; a server started by an older copy of this script lacks the right.
as_pg "$bindir/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "ALTER ROLE arbiter CREATEDB" >/dev/null
# Dropping a test's database WITH (FORCE) ends the backends still on it; under write load one of them is an autovacuum
# worker, which only a member of pg_signal_backend may end (the stop CI's teardown error in tests/store/test_processes.py).
as_pg "$bindir/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "GRANT pg_signal_backend TO arbiter" >/dev/null
echo "$URL"
