#!/usr/bin/env bash
# PostgreSQL (the Dagster instance's run, event-log and schedule storage) and Redis (the Celery broker and
# result backend) on localhost, for deploy/postgres/dagster.yaml and deploy/celery/. Scratch servers, not a
# production set-up: they listen on 127.0.0.1 only and Redis keeps no data. Safe on a shared host: Postgres and
# Redis ask for a password generated at the first start (kept 0600 in $KP_SERVERS_DIR, passed to clients only
# through the environment: no local user becomes a superuser by connecting), and $KP_SERVERS_DIR must be a real
# folder of this user that no one else can write (created 0700; a symbolic link or someone else's is refused),
# so no chown or chmod ever follows a path another user planted.
#
#   scripts/servers.sh start    install Debian's postgresql and redis-server if missing (apt-get, as root),
#                               init a cluster under $KP_SERVERS_DIR, start both, create the database,
#                               print the settings (as `url`); idempotent: a running server is left alone
#   scripts/servers.sh stop     stop both (data stays under $KP_SERVERS_DIR)
#   scripts/servers.sh status   exit 0 when both answer
#   scripts/servers.sh url      print the settings:  eval "$(scripts/servers.sh url)"
#
# Settings (environment): KP_SERVERS_DIR (default: /tmp/kinematic_pipeline_servers), KP_PG_PORT (55432),
# KP_REDIS_PORT (56379), KP_PG_DB (dagster). Postgres refuses to run as root: as root, the cluster is
# initialized and run as the `postgres` user that Debian's package creates (it must be able to reach
# $KP_SERVERS_DIR: as root the script makes that folder traversable, 0711, not readable).
set -euo pipefail

DIR="${KP_SERVERS_DIR:-/tmp/kinematic_pipeline_servers}"
PG_PORT="${KP_PG_PORT:-55432}"
REDIS_PORT="${KP_REDIS_PORT:-56379}"
PG_DB="${KP_PG_DB:-dagster}"
HOST=127.0.0.1
PGDATA="$DIR/postgres/data"
PGRUN="$DIR/postgres/run"
PGLOG="$DIR/postgres/postgres.log"
REDIS_DIR="$DIR/redis"

PG_PWFILE="$DIR/postgres/password"
REDIS_CONF="$DIR/redis/redis.conf"

say() { echo "servers.sh: $*" >&2; }

private_dir() {  # a real directory of this user that no one else can write; created 0700 when missing
    local d=$1 mode=${2:-700}
    if [[ -L "$d" ]]; then say "$d is a symbolic link: refusing it (set KP_SERVERS_DIR to a folder of your own)"; exit 1; fi
    if [[ ! -e "$d" ]]; then mkdir -m "$mode" "$d" || { say "cannot create $d"; exit 1; }; fi
    if [[ -L "$d" || ! -d "$d" ]]; then say "$d is not a directory: refusing it"; exit 1; fi
    if [[ "$(stat -c %u "$d")" != "$(id -u)" ]]; then
        say "$d belongs to uid $(stat -c %u "$d"), not to you: refusing it (set KP_SERVERS_DIR to a folder of your own)"; exit 1
    fi
    if (( 8#$(stat -c %a "$d") & 8#022 )); then
        say "$d is writable by others (mode $(stat -c %a "$d")): refusing it"; exit 1
    fi
}

new_password() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

pg_password() { cat "$PG_PWFILE" 2>/dev/null || true; }
redis_password() { sed -n 's/^requirepass //p' "$REDIS_CONF" 2>/dev/null || true; }

pg_bin() {  # the newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/<major>/bin)
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [[ -n "$d" && -x "$d/initdb" ]]; then echo "$d"; return; fi
    d=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
    [[ -x "$d/initdb" ]] && echo "$d"
}

install_missing() {
    local pkgs=()
    [[ -n "$(pg_bin)" ]] || pkgs+=(postgresql)
    command -v redis-server >/dev/null || pkgs+=(redis-server)
    [[ ${#pkgs[@]} -eq 0 ]] && return
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        say "missing ${pkgs[*]}: install them (Debian: apt-get install ${pkgs[*]}) and re-run"; exit 1
    fi
    say "installing ${pkgs[*]} (apt-get)"
    # Debian's postinst would start its own cluster / redis on the default ports: keep it from starting services.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >"${TMPDIR:-/tmp}/kp_servers_apt.log" 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >"${TMPDIR:-/tmp}/kp_servers_apt.log" 2>&1; } ||
        { [[ $created_policy -eq 1 ]] && rm -f "$policy"; say "apt-get failed, see ${TMPDIR:-/tmp}/kp_servers_apt.log"; exit 1; }
    if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi
    [[ -n "$(pg_bin)" ]] || { say "postgresql installed but no initdb found"; exit 1; }
}

as_pg() {  # run a PostgreSQL server command as a non-root user
    if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_ready() { "$(pg_bin)/pg_isready" -q -h "$HOST" -p "$PG_PORT" 2>/dev/null; }
# the password goes through the environment (REDISCLI_AUTH, PGPASSWORD), never a command line `ps` shows
redis_ready() { [[ "$(REDISCLI_AUTH="$(redis_password)" redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }
as_client() { PGPASSWORD="$(pg_password)" "$@"; }

print_url() {
    local pg redis
    pg=$(pg_password); redis=$(redis_password)
    echo "export DAGSTER_PG_URL=postgresql+psycopg2://postgres:$pg@$HOST:$PG_PORT/$PG_DB"
    echo "export KP_CELERY_BROKER=redis://:$redis@$HOST:$REDIS_PORT/0"
    echo "export KP_CELERY_BACKEND=redis://:$redis@$HOST:$REDIS_PORT/1"
}

start_postgres() {
    local bin; bin=$(pg_bin)
    if [[ $(id -u) -eq 0 ]]; then
        chmod 0711 "$DIR"  # ours (private_dir checked it): the postgres user may pass through, not list it
        if [[ ! -e "$DIR/postgres" ]]; then mkdir -m 0700 "$DIR/postgres"; fi
        if [[ -L "$DIR/postgres" || ! -d "$DIR/postgres" ]]; then say "$DIR/postgres is not a directory: refusing it"; exit 1; fi
        chown --no-dereference postgres: "$DIR/postgres"
        runuser -u postgres -- test -w "$DIR/postgres" ||
            { say "the postgres user cannot reach $DIR (a parent folder is not traversable): set KP_SERVERS_DIR, e.g. under /tmp"; exit 1; }
    else
        private_dir "$DIR/postgres"
    fi
    if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
        say "initdb $PGDATA (password authentication; the password is kept in $PG_PWFILE, mode 0600)"
        as_pg bash -c 'umask 077; [[ -s "$1" ]] || od -An -tx1 -N16 /dev/urandom | tr -d " \n" >"$1"' _ "$PG_PWFILE"
        as_pg "$bin/initdb" -D "$PGDATA" --username=postgres --pwfile="$PG_PWFILE" --auth=scram-sha-256 \
            --encoding=UTF8 --locale=C.UTF-8 >"$DIR/postgres/initdb.log" 2>&1 || { cat "$DIR/postgres/initdb.log" >&2; exit 1; }
    elif [[ ! -s "$PG_PWFILE" ]] || grep -qE '^(local|host).*trust' "$PGDATA/pg_hba.conf" 2>/dev/null; then
        say "the cluster under $PGDATA trusts local connections (made by an older servers.sh): remove $DIR/postgres (scratch data) and start again"; exit 1
    fi
    as_pg mkdir -p "$PGRUN"
    if ! pg_ready; then
        if as_pg "$bin/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
            say "a postgres on $PGDATA runs but does not answer on $HOST:$PG_PORT"; exit 1
        fi
        say "starting postgres on $HOST:$PG_PORT"
        as_pg "$bin/pg_ctl" -D "$PGDATA" -l "$PGLOG" -w -t 60 \
            -o "-p $PG_PORT -k $PGRUN -c listen_addresses=$HOST -c max_connections=100" start >/dev/null ||
            { tail -20 "$PGLOG" >&2; exit 1; }
    fi
    if [[ "$(as_client "$bin/psql" -h "$HOST" -p "$PG_PORT" -U postgres -d postgres -tAc \
            "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]]; then
        as_client "$bin/createdb" -h "$HOST" -p "$PG_PORT" -U postgres "$PG_DB"
    fi
}

start_redis() {
    private_dir "$REDIS_DIR"
    if [[ ! -s "$REDIS_CONF" ]]; then  # the password in a 0600 file, not on a command line
        (umask 077; printf 'requirepass %s\n' "$(new_password)" >"$REDIS_CONF")
    fi
    redis_ready && return
    say "starting redis on $HOST:$REDIS_PORT (password authentication)"
    redis-server "$REDIS_CONF" --bind "$HOST" --port "$REDIS_PORT" --daemonize yes --dir "$REDIS_DIR" \
        --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" --save "" --appendonly no
    for _ in $(seq 50); do redis_ready && return; sleep 0.1; done
    tail -20 "$REDIS_DIR/redis.log" >&2; exit 1
}

case "${1:-}" in
    start)
        private_dir "$DIR"
        install_missing
        start_postgres
        start_redis
        say "postgres $("$(pg_bin)/postgres" --version | awk '{print $3}') on $HOST:$PG_PORT, redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $HOST:$REDIS_PORT, data in $DIR"
        print_url
        ;;
    stop)
        if [[ -n "$(pg_bin)" && -s "$PGDATA/PG_VERSION" ]] &&
            as_pg "$(pg_bin)/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
            as_pg "$(pg_bin)/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null && say "postgres stopped"
        fi
        if redis_ready; then
            REDISCLI_AUTH="$(redis_password)" redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
            say "redis stopped"
        elif [[ -s "$REDIS_DIR/redis.pid" ]] && kill -0 "$(cat "$REDIS_DIR/redis.pid")" 2>/dev/null; then
            kill "$(cat "$REDIS_DIR/redis.pid")"
        fi
        ;;
    status)
        ok=0
        if [[ -n "$(pg_bin)" ]] && pg_ready; then echo "postgres: up on $HOST:$PG_PORT"; else echo "postgres: down ($HOST:$PG_PORT)"; ok=1; fi
        if command -v redis-cli >/dev/null && redis_ready; then echo "redis: up on $HOST:$REDIS_PORT"; else echo "redis: down ($HOST:$REDIS_PORT)"; ok=1; fi
        exit $ok
        ;;
    url)
        print_url
        ;;
    *)
        echo "usage: $0 {start|stop|status|url}" >&2; exit 2
        ;;
esac
