#!/usr/bin/env bash
# PostgreSQL (the Dagster instance's run, event-log and schedule storage) and Redis (the Celery broker and
# result backend) on localhost, for deploy/postgres/dagster.yaml and deploy/celery/. Scratch servers, not a
# production set-up: they listen on 127.0.0.1 only, Postgres trusts local connections, Redis keeps no data.
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
# $KP_SERVERS_DIR: the script makes the directory world-traversable).
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

say() { echo "servers.sh: $*" >&2; }

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
redis_ready() { [[ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

print_url() {
    echo "export DAGSTER_PG_URL=postgresql+psycopg2://postgres@$HOST:$PG_PORT/$PG_DB"
    echo "export KP_CELERY_BROKER=redis://$HOST:$REDIS_PORT/0"
    echo "export KP_CELERY_BACKEND=redis://$HOST:$REDIS_PORT/1"
}

start_postgres() {
    local bin; bin=$(pg_bin)
    mkdir -p "$DIR/postgres"
    chmod 755 "$DIR" "$DIR/postgres"
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres: "$DIR/postgres"
        runuser -u postgres -- test -w "$DIR/postgres" ||
            { say "the postgres user cannot reach $DIR (a parent folder is not world-traversable): set KP_SERVERS_DIR, e.g. under /tmp"; exit 1; }
    fi
    if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
        say "initdb $PGDATA"
        as_pg "$bin/initdb" -D "$PGDATA" --username=postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
            >"$DIR/postgres/initdb.log" 2>&1 || { cat "$DIR/postgres/initdb.log" >&2; exit 1; }
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
    if [[ "$("$bin/psql" -h "$HOST" -p "$PG_PORT" -U postgres -d postgres -tAc \
            "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]]; then
        "$bin/createdb" -h "$HOST" -p "$PG_PORT" -U postgres "$PG_DB"
    fi
}

start_redis() {
    mkdir -p "$REDIS_DIR"
    redis_ready && return
    say "starting redis on $HOST:$REDIS_PORT"
    redis-server --bind "$HOST" --port "$REDIS_PORT" --daemonize yes --dir "$REDIS_DIR" \
        --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" --save "" --appendonly no
    for _ in $(seq 50); do redis_ready && return; sleep 0.1; done
    tail -20 "$REDIS_DIR/redis.log" >&2; exit 1
}

case "${1:-}" in
    start)
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
            redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
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
