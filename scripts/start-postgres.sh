#!/usr/bin/env bash
# Install (Debian package, if missing) and start a local PostgreSQL server on 127.0.0.1:5432 with
# a role and database `omnitable` for the catalog test-suite. Prints the catalog URL to use:
#   export OMNITABLE_TEST_POSTGRES_URL=$(scripts/start-postgres.sh)
# The password is read from the environment at connect time (env:OMNITABLE_PG_PASSWORD).
# A throw-away test server: it runs without fsync, synchronous commit and full-page writes, so the
# tests' CREATE DATABASE and commits do not wait on the disk (SQL and isolation are unchanged; only
# a crash of the server itself could lose data).
set -euo pipefail
log() { echo "start-postgres: $*" >&2; }

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  log "installing the postgresql Debian package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | awk '{print $1"/"$2}' | grep -q "^$version/main$"; then
  log "creating cluster $version/main"
  pg_createcluster "$version" main >&2
fi
if ! pg_lsclusters -h | awk '$1=="'"$version"'" && $2=="main" {print $4}' | grep -q online; then
  log "starting cluster $version/main"
  pg_ctlcluster "$version" main start >&2
fi
for _ in $(seq 1 30); do
  su postgres -c "psql -h 127.0.0.1 -qtAc 'SELECT 1'" >/dev/null 2>&1 && break
  su postgres -c "psql -qtAc 'SELECT 1'" >/dev/null 2>&1 && break
  sleep 1
done
su postgres -c "psql -qtA -c 'ALTER SYSTEM SET fsync = off' -c 'ALTER SYSTEM SET synchronous_commit = off' \
  -c 'ALTER SYSTEM SET full_page_writes = off' -c 'SELECT pg_reload_conf()'" >/dev/null
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='omnitable'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE omnitable LOGIN SUPERUSER PASSWORD 'omnitable'\"" >&2
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='omnitable'\"" | grep -q 1 ||
  su postgres -c "createdb -O omnitable omnitable" >&2
echo "postgresql://omnitable:env:OMNITABLE_PG_PASSWORD@127.0.0.1:5432/omnitable"
