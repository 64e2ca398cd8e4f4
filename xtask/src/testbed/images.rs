//! What each image is: its packages, its entrypoint script and its port. Its name, its
//! backend and the variable naming it are the backend's row in `crate::backends`.

/// How one locally built image is made.
pub(crate) struct ImageSpec {
    /// Debian packages installed into the root.
    pub(crate) packages: &'static [&'static str],
    /// The entrypoint script's path inside the image, and the script.
    pub(crate) entrypoint: (&'static str, &'static str),
    /// The server's port, declared with `EXPOSE`.
    pub(crate) port: u16,
}

/// MariaDB as the official `mariadb` image behaves for the tests: the data directory is
/// initialised on first start, `MARIADB_ROOT_PASSWORD` sets the password of `root@'%'`,
/// `MARIADB_DATABASE` (optional) names a database created then, and
/// the server logs "ready for connections ... port: 3306" once it accepts clients. A restarted
/// container keeps its data directory and skips the initialisation.
const MARIADB_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
datadir=/var/lib/mysql
mkdir -p /run/mysqld "$datadir"
chown mysql:mysql /run/mysqld "$datadir"
# Debian's post-install leaves a data directory without the root password: start afresh once.
if [ ! -f "$datadir/.leaf-testbed" ]; then
    echo "leaf-testbed: initialising $datadir" >&2
    find "$datadir" -mindepth 1 -delete
    mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db \
        --auth-root-authentication-method=socket >/dev/null
    password=$(printf '%s' "${MARIADB_ROOT_PASSWORD:-}" | sed "s/\\\\/\\\\\\\\/g; s/'/\\\\'/g")
    database=""
    if [ -n "${MARIADB_DATABASE:-}" ]; then
        database="CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;"
    fi
    mariadbd --user=mysql --datadir="$datadir" --bootstrap --skip-networking <<SQL
FLUSH PRIVILEGES;
$database
CREATE USER 'root'@'%' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
    touch "$datadir/.leaf-testbed"
fi
exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 --port=3306 \
    --skip-name-resolve "$@"
"#;

/// ZooKeeper as the official `zookeeper` image behaves for the tests: on first start the
/// entrypoint writes `/conf/zoo.cfg` from the same variables (`ZOO_SERVERS`, `ZOO_MY_ID`,
/// `ZOO_4LW_COMMANDS_WHITELIST`, `ZOO_STANDALONE_ENABLED`, `ZOO_CFG_EXTRA`, `ZOO_TICK_TIME`,
/// ...) and `/data/myid`; a restarted container keeps both, and its data. The server logs to
/// the console, so that the container's log shows it (Debian's script logs to a file). The JVM
/// is held small and on the quick-starting compiler (`SERVER_JVMFLAGS` replaces that): test
/// servers start often and serve little.
const ZOOKEEPER_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
conf=/conf/zoo.cfg
data=${ZOO_DATA_DIR:-/data}
datalog=${ZOO_DATA_LOG_DIR:-/datalog}
mkdir -p /conf "$data" "$datalog"
if [ ! -f "$conf" ]; then
    {
        echo "dataDir=$data"
        echo "dataLogDir=$datalog"
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-5}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
        echo "admin.enableServer=false"
        for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do
            echo "$server"
        done
        if [ -n "${ZOO_4LW_COMMANDS_WHITELIST:-}" ]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        for entry in ${ZOO_CFG_EXTRA:-}; do
            echo "$entry"
        done
    } >"$conf"
fi
if [ ! -f "$data/myid" ]; then
    echo "${ZOO_MY_ID:-1}" >"$data/myid"
fi
# What `zkServer.sh start-foreground` runs, with slf4j's log4j binding and log4j on the class
# path: Debian's leaves them out, and the server then logs nothing at all.
java=/usr/share/java
exec java ${SERVER_JVMFLAGS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -Dzookeeper.root.logger=INFO,CONSOLE -Dzookeeper.log.dir=/var/log/zookeeper \
    -cp "/etc/zookeeper/conf:$java/zookeeper.jar:$java/slf4j-log4j12.jar:$java/log4j-1.2.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf"
"#;

/// Redis as the tests want it: every write fsynced before its answer (`appendonly yes`,
/// `appendfsync always`), data in `/data`, reachable from the host. `REDIS_APPENDONLY` and
/// `REDIS_APPENDFSYNC` override the two settings, and arguments are passed on to `redis-server`
/// after these (a later option wins), so a test can start a Redis with weaker durability. The
/// official `redis` image takes the same arguments.
const REDIS_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
mkdir -p /data
# A leading "redis-server" (the official image's command form) is dropped; the other
# arguments follow the defaults, so they win.
if [ "${1:-}" = "redis-server" ]; then
    shift
fi
exec redis-server --bind 0.0.0.0 --protected-mode no --port 6379 --dir /data \
    --appendonly "${REDIS_APPENDONLY:-yes}" --appendfsync "${REDIS_APPENDFSYNC:-always}" "$@"
"#;

/// etcd (Debian's `etcd-server`, 3.4, v3 API) configured as the official image is, through
/// etcd's own `ETCD_*` variables: data in `/data`, clients on `0.0.0.0:2379` advertised as
/// `http://127.0.0.1:2379`, the structured (`zap`) logger; peers on etcd's default, a
/// one-member cluster on `localhost:2380`. A variable set on the container wins (a cluster
/// member sets its name, its peer URLs and the initial cluster); arguments are passed on to
/// `etcd`.
const ETCD_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
export ETCD_DATA_DIR="${ETCD_DATA_DIR:-/data}"
export ETCD_LISTEN_CLIENT_URLS="${ETCD_LISTEN_CLIENT_URLS:-http://0.0.0.0:2379}"
export ETCD_ADVERTISE_CLIENT_URLS="${ETCD_ADVERTISE_CLIENT_URLS:-http://127.0.0.1:2379}"
export ETCD_LOGGER="${ETCD_LOGGER:-zap}"
mkdir -p "$ETCD_DATA_DIR"
chmod 700 "$ETCD_DATA_DIR"
if [ "${1:-}" = "etcd" ]; then
    shift
fi
exec etcd "$@"
"#;

/// PostgreSQL (Debian's `postgresql`, the newest major version installed) as the official
/// `postgres` image behaves for the tests: on first start the data directory (`PGDATA`, default
/// `/var/lib/postgresql/data`) is initialised with the superuser `POSTGRES_USER` (default
/// `postgres`) whose password is `POSTGRES_PASSWORD` (required, as there), and the database
/// `POSTGRES_DB` (default: the user's name) is created; clients from other hosts authenticate
/// with `POSTGRES_HOST_AUTH_METHOD` (default `scram-sha-256`). The server listens on
/// `0.0.0.0:5432` and logs "database system is ready to accept connections" once it accepts
/// clients (the initialisation's own server logs nothing). A restarted container keeps its
/// data and skips the initialisation. Arguments are passed on to `postgres` (`-c name=value`).
/// Docker stops a container with SIGTERM, a "smart" shutdown for postgres that waits for every
/// client to leave; the official image declares SIGINT (a fast shutdown) instead, which
/// `docker import` cannot, so this script stays and turns the one into the other.
const POSTGRES_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
as_postgres() {
    setpriv --reuid=postgres --regid=postgres --init-groups "$@"
}
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "leaf-testbed: POSTGRES_PASSWORD must be set, as for the official image" >&2
        exit 1
    fi
    echo "leaf-testbed: initialising $PGDATA" >&2
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    chown postgres "$pwfile"
    as_postgres "$bin/initdb" -D "$PGDATA" --username="$user" --pwfile="$pwfile" \
        --encoding=UTF8 --no-locale --auth-local=trust \
        --auth-host="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >/dev/null
    rm -f "$pwfile"
    echo "host all all all ${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
    if [ "$db" != "postgres" ]; then
        as_postgres "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -l /dev/null -w start \
            >/dev/null
        quoted=$(printf '%s' "$db" | sed 's/"/""/g')
        echo "CREATE DATABASE \"$quoted\";" |
            as_postgres "$bin/psql" -q -v ON_ERROR_STOP=1 -U "$user" -d postgres >/dev/null
        as_postgres "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
    fi
fi
if [ "${1:-}" = "postgres" ]; then
    shift
fi
# Not through as_postgres: a function run in the background is a subshell, and the signal
# must reach postgres itself.
setpriv --reuid=postgres --regid=postgres --init-groups \
    "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -p 5432 "$@" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' TERM INT
status=0
# A trapped signal ends `wait` early: wait again until postgres has shut down.
while kill -0 "$pid" 2>/dev/null; do
    wait "$pid" || status=$?
done
exit "$status"
"#;

/// MariaDB (the `mysql` backend's server).
pub(crate) const MARIADB: ImageSpec = ImageSpec {
    packages: &["mariadb-server"],
    entrypoint: ("/usr/local/bin/leaf-testbed-mariadb", MARIADB_ENTRYPOINT),
    port: 3306,
};

/// ZooKeeper. It is Java (`proc` is mounted for its post-install).
pub(crate) const ZOOKEEPER: ImageSpec = ImageSpec {
    packages: &["zookeeper"],
    entrypoint: (
        "/usr/local/bin/leaf-testbed-zookeeper",
        ZOOKEEPER_ENTRYPOINT,
    ),
    port: 2181,
};

/// Redis.
pub(crate) const REDIS: ImageSpec = ImageSpec {
    packages: &["redis-server"],
    entrypoint: ("/usr/local/bin/leaf-testbed-redis", REDIS_ENTRYPOINT),
    port: 6379,
};

/// etcd.
pub(crate) const ETCD: ImageSpec = ImageSpec {
    packages: &["etcd-server"],
    entrypoint: ("/usr/local/bin/leaf-testbed-etcd", ETCD_ENTRYPOINT),
    port: 2379,
};

/// PostgreSQL.
pub(crate) const POSTGRES: ImageSpec = ImageSpec {
    packages: &["postgresql"],
    entrypoint: ("/usr/local/bin/leaf-testbed-postgres", POSTGRES_ENTRYPOINT),
    port: 5432,
};
