#!/usr/bin/env bash
# Entry point of queuer-local/postgres:15 (docker/postgres/Dockerfile): on
# the first start, initdb into an empty PGDATA with the superuser
# POSTGRES_USER (default postgres) and password POSTGRES_PASSWORD, create
# POSTGRES_DB (default: the user's name), run /docker-entrypoint-initdb.d/,
# then exec the server listening on every address. Each POSTGRES_* variable
# may come from a file instead (POSTGRES_PASSWORD_FILE, ...). Started as
# root, it fixes ownership and re-executes itself as the postgres user.
set -euo pipefail

# file_env VAR: VAR, or the contents of the file VAR_FILE names (not both).
file_env() {
    local var=$1 file_var="${1}_FILE" def=${2:-}
    if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
        echo "docker-entrypoint: both $var and $file_var are set (they are exclusive)" >&2
        exit 1
    fi
    local val=$def
    if [ -n "${!var:-}" ]; then
        val=${!var}
    elif [ -n "${!file_var:-}" ]; then
        val=$(<"${!file_var}")
    fi
    export "$var"="$val"
    unset "$file_var"
}

# Arguments that start with "-" are options for postgres.
if [ "${1:0:1}" = - ]; then
    set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
    exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
    install -d -o postgres -g postgres -m 700 "$PGDATA"
    find "$PGDATA" \! -user postgres -exec chown postgres: '{}' +
    install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    file_env POSTGRES_PASSWORD
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    file_env POSTGRES_INITDB_ARGS
    auth=${POSTGRES_HOST_AUTH_METHOD:-}
    if [ -z "$POSTGRES_PASSWORD" ] && [ "$auth" != trust ]; then
        echo "docker-entrypoint: the database is uninitialized and no superuser password is" \
             "set: set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE), or" \
             "POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without one" >&2
        exit 1
    fi
    [ -n "$auth" ] || auth=scram-sha-256
    pwfile=$(mktemp)
    trap 'rm -f "$pwfile"' EXIT
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of options
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host="$auth" --encoding=UTF8 --locale=C.UTF-8 $POSTGRES_INITDB_ARGS
    rm -f "$pwfile"
    printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"

    # A private server on a socket nobody else looks at, so health checks
    # (pg_isready) fail until the real one below is up.
    initsock=$(mktemp -d)
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=$initsock" -w start
    psql=(psql -X -v ON_ERROR_STOP=1 -h "$initsock" -U "$POSTGRES_USER" --no-password)
    if [ "$POSTGRES_DB" != postgres ]; then
        "${psql[@]}" -d postgres -q -v db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        # shellcheck disable=SC1090 # the user's scripts
        case $f in
        *.sh) echo "docker-entrypoint: running $f"; PGHOST=$initsock . "$f" ;;
        *.sql) echo "docker-entrypoint: running $f"; "${psql[@]}" -d "$POSTGRES_DB" -f "$f" ;;
        *.sql.gz) echo "docker-entrypoint: running $f"; gunzip -c "$f" | "${psql[@]}" -d "$POSTGRES_DB" ;;
        *) [ ! -e "$f" ] || echo "docker-entrypoint: ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    rmdir "$initsock"
    echo "docker-entrypoint: PostgreSQL init process complete; ready for start up."
fi

exec "$@"
