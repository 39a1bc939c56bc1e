#!/usr/bin/env bash
# Makes a local PostgreSQL server available for tests and benchmarks:
# installs Debian's postgresql when missing, starts the cluster, creates the
# clawfed test role and database, serves TLS with a certificate of a test CA,
# and prints the database URL on stdout. Idempotent.
#   eval "$(scripts/postgres.sh env)"   # exports CLAWFED_TEST_DATABASE_URL
#                                        # and CLAWFED_TEST_DATABASE_CA
#   scripts/postgres.sh stop             # stops the cluster this script started
#
# The test role may create databases and roles (the database-roles test
# makes a migration and an application role of its own). The server's
# certificate is issued by a test CA for 127.0.0.1 and localhost, so a client
# can connect with sslmode=verify-full&sslrootcert=$CLAWFED_TEST_DATABASE_CA;
# the plain URL keeps working (sqlx's default sslmode=prefer).
set -euo pipefail

ROLE=clawfed
PASSWORD=clawfed
DB=clawfed_test
STATE_DIR=${CLAWFED_CACHE:-$HOME/.cache/clawfed}/postgres
TLS_DIR=$STATE_DIR/tls
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

# The test CA and the server's key pair in $TLS_DIR (made once); the server
# pair copied where the postgres user reads it, a conf.d file pointing at
# it, and a reload (no restart: connections stay) only when one changed.
TLS_CHANGED=
ensure_tls() { # version name; sets TLS_CHANGED when the server must reload
  local conf=/etc/postgresql/$1/$2
  mkdir -p "$TLS_DIR"
  if [ ! -s "$TLS_DIR/ca.crt" ] || [ ! -s "$TLS_DIR/ca.key" ]; then
    log "making the test CA in $TLS_DIR"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=clawfed test PostgreSQL CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$TLS_DIR/ca.key" -out "$TLS_DIR/ca.crt" 2>/dev/null
    rm -f "$TLS_DIR/server.crt"
  fi
  if [ ! -s "$TLS_DIR/server.crt" ] || [ ! -s "$TLS_DIR/server.key" ]; then
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
      -keyout "$TLS_DIR/server.key" -out "$TLS_DIR/server.csr" 2>/dev/null
    openssl x509 -req -in "$TLS_DIR/server.csr" -CA "$TLS_DIR/ca.crt" -CAkey "$TLS_DIR/ca.key" \
      -CAcreateserial -days 3650 -out "$TLS_DIR/server.crt" -extfile <(printf '%s\n' \
        "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth") 2>/dev/null
    rm -f "$TLS_DIR/server.csr"
  fi
  chmod 600 "$TLS_DIR/ca.key" "$TLS_DIR/server.key"
  for f in crt key; do
    if ! cmp -s "$TLS_DIR/server.$f" "$conf/clawfed-test-server.$f"; then
      install -o postgres -g postgres -m 0600 "$TLS_DIR/server.$f" "$conf/clawfed-test-server.$f"
      TLS_CHANGED=1
    fi
  done
  local want
  want=$(printf '%s\n' "# scripts/postgres.sh: TLS with the clawfed test CA's certificate" "ssl = on" \
    "ssl_cert_file = '$conf/clawfed-test-server.crt'" "ssl_key_file = '$conf/clawfed-test-server.key'")
  if [ "$(cat "$conf/conf.d/clawfed-test-tls.conf" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" > "$conf/conf.d/clawfed-test-tls.conf"
    chown postgres:postgres "$conf/conf.d/clawfed-test-tls.conf"
    TLS_CHANGED=1
  fi
}

start() {
  ensure_installed
  command -v openssl >/dev/null 2>&1 || {
    log "installing openssl"
    apt-get install -y -qq openssl >&2
  }
  read -r version name port status < <(cluster)
  ensure_tls "$version" "$name"
  if [ "$status" != online ]; then
    log "starting cluster $version $name on port $port"
    pg_ctlcluster "$version" "$name" start >&2
    echo "$version $name" > "$STATE_DIR/started-by-us"
  fi
  if [ "$status" = online ] && [ -n "$TLS_CHANGED" ]; then
    log "reloading cluster $version $name (TLS certificate)"
    pg_ctlcluster "$version" "$name" reload >&2
  fi
  for _ in $(seq 1 50); do
    as_postgres pg_isready -q -p "$port" && break
    sleep 0.2
  done
  as_postgres psql -q -p "$port" -v ON_ERROR_STOP=1 >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN PASSWORD '$PASSWORD' CREATEDB CREATEROLE;
  ELSIF NOT (SELECT rolcreaterole FROM pg_roles WHERE rolname = '$ROLE') THEN
    ALTER ROLE $ROLE CREATEROLE;
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
  env)
    url=$(start)
    echo "export CLAWFED_TEST_DATABASE_URL=$url CLAWFED_TEST_DATABASE_CA=$TLS_DIR/ca.crt"
    ;;
  stop)
    if [ -f "$STATE_DIR/started-by-us" ]; then
      read -r version name < "$STATE_DIR/started-by-us"
      pg_ctlcluster "$version" "$name" stop >&2 || true
      rm -f "$STATE_DIR/started-by-us"
    fi
    ;;
  *) echo "usage: $0 [env|url|stop]" >&2; exit 2 ;;
esac
