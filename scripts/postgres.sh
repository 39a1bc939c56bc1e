#!/usr/bin/env bash
# Makes a local PostgreSQL server available for tests and benchmarks:
# installs Debian's postgresql when missing, starts the cluster, creates the
# clawfed test role and database, and prints the database URL on stdout.
#   eval "$(scripts/postgres.sh env)"   # exports CLAWFED_TEST_DATABASE_URL
#   scripts/postgres.sh stop             # stops the cluster this script started
set -euo pipefail

ROLE=clawfed
PASSWORD=clawfed
DB=clawfed_test
STATE_DIR=${CLAWFED_CACHE:-$HOME/.cache/clawfed}/postgres
mkdir -p "$STATE_DIR"

log() { echo "postgres.sh: $*" >&2; }

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi
}

ensure_installed() {
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
  fi
}

cluster() {
  # The newest installed version's cluster "main", e.g. "15 main 5432
  # online". Always that one: other clusters (the fault run makes and
  # restarts its own) are not the tests' server.
  local version
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q .; then
    log "creating cluster $version main"
    pg_createcluster "$version" main >&2
  fi
  pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" { print $1, $2, $3, $4; exit }'
}

start() {
  ensure_installed
  read -r version name port status < <(cluster)
  if [ "$status" != online ]; then
    log "starting cluster $version $name on port $port"
    pg_ctlcluster "$version" "$name" start >&2
    echo "$version $name" > "$STATE_DIR/started-by-us"
  fi
  for _ in $(seq 1 50); do
    as_postgres pg_isready -q -p "$port" && break
    sleep 0.2
  done
  as_postgres psql -q -p "$port" -v ON_ERROR_STOP=1 >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN PASSWORD '$PASSWORD' CREATEDB;
  END IF;
END \$\$;
SQL
  # Tests make a schema each, so runs (even concurrent ones) share the
  # database without interfering.
  if ! as_postgres psql -p "$port" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
    as_postgres createdb -p "$port" -O "$ROLE" "$DB" >&2
  fi
  echo "postgres://$ROLE:$PASSWORD@127.0.0.1:$port/$DB"
}

case "${1:-env}" in
  url) start ;;
  env) echo "export CLAWFED_TEST_DATABASE_URL=$(start)" ;;
  stop)
    if [ -f "$STATE_DIR/started-by-us" ]; then
      read -r version name < "$STATE_DIR/started-by-us"
      pg_ctlcluster "$version" "$name" stop >&2 || true
      rm -f "$STATE_DIR/started-by-us"
    fi
    ;;
  *) echo "usage: $0 [env|url|stop]" >&2; exit 2 ;;
esac
