#!/usr/bin/env bash
# Records what a released leaf-server leaves behind, for the upgrade tests (tests/blackbox/
# upgrade.rs on SQLite, tests/mysql/upgrade.rs on MySQL): its data files, cache files and
# layout record, its MySQL rows (with the tables as it created them), and the largest IDs it
# handed out. The tests start this version's nodes on them.
#
#   crates/leaf-server/tests/upgrade/record.sh [TAG]     (default v0.1.0; from the workspace)
#
# Builds TAG's leaf-server (with the mysql feature) in a worktree of its own, runs it on the
# embedded default, then two nodes on one MariaDB (a container of LEAFTEST_MYSQL_IMAGE, default
# leaf-testbed/mariadb:local, `cargo xtask testbed mariadb`): one stopped with SIGTERM, one
# killed with SIGKILL. Writes crates/leaf-server/tests/upgrade/X.Y.Z/. Needs Docker, curl and
# python3. Recorded once per release rather than built in CI: see the README's Upgrades.
set -euo pipefail

tag=${1:-v0.1.0}
root=$(git rev-parse --show-toplevel)
out=$root/crates/leaf-server/tests/upgrade/${tag#v}
image=${LEAFTEST_MYSQL_IMAGE:-leaf-testbed/mariadb:local}
work=$(mktemp -d)
target=$root/target/upgrade-$tag
container=""
pids=()

log() { printf 'record: %s\n' "$*" >&2; }
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1 || true
  git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

log "building $tag's leaf-server in $work/src (target $target)"
git -C "$root" worktree add --detach "$work/src" "$tag" >/dev/null
(cd "$work/src" && cargo build -p leaf-server --features mysql --target-dir "$target")
bin=$target/debug/leaf-server

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "the node on port $1 never became ready"; return 1
}
# The largest of the "ids" of GET $1, as python prints it.
max_of() { curl -fs "$1" | python3 -c 'import json,sys; print(max(json.load(sys.stdin)["ids"]))'; }

# Takes IDs from the node on port $1 and prints the largest of each as JSON lines.
take() {
  local port=$1 base="http://127.0.0.1:$1" seg=0 plain=0 sf=0
  for _ in 1 2 3; do
    seg=$(max_of "$base/v1/segment/leaf-segment-test?count=1500")
    plain=$(max_of "$base/v1/segment/upgrade-plain?count=150")
    sf=$(max_of "$base/v1/snowflake?count=100")
  done
  printf '{"port": %s, "segment": {"leaf-segment-test": %s, "upgrade-plain": %s}, "snowflake": %s}\n' \
    "$port" "$seg" "$plain" "$sf"
}

create_plain() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d '{"tag":"upgrade-plain","step":100}' "http://127.0.0.1:$1/v1/tags")
  case $code in 201|409) ;; *) log "creating upgrade-plain answered $code"; return 1 ;; esac
}

rm -rf "$out"
mkdir -p "$out/sqlite" "$out/mysql"

log "the embedded default (SQLite, local worker id 0), stopped with SIGTERM"
mkdir -p "$work/sqlite"
port=$(free_port)
(cd "$work/sqlite" && env LEAF_SERVER__LISTEN="127.0.0.1:$port" "$bin" 2>"$work/sqlite.log") &
pid=$!; pids+=("$pid")
wait_ready "$port"
create_plain "$port"
take "$port" > "$out/sqlite/issued.json"
kill -TERM "$pid"; wait "$pid" || true
cp -r "$work/sqlite/leaf-data" "$out/sqlite/"

log "two nodes on one MariaDB ($image): node 1 stopped with SIGTERM, node 2 killed"
password=upgrade-root
container=$(docker run -d -e MARIADB_ROOT_PASSWORD=$password -p 127.0.0.1::3306 "$image")
dbport=$(docker port "$container" 3306/tcp | head -1 | sed 's/.*://')
for _ in $(seq 1 120); do
  docker exec "$container" mariadb -h127.0.0.1 -uroot -p$password -e 'CREATE DATABASE IF NOT EXISTS leaf' \
    >/dev/null 2>&1 && break
  sleep 1
done
url="mysql://root:$password@127.0.0.1:$dbport/leaf"
for n in 1 2; do
  mkdir -p "$work/node$n"
  port=$(free_port)
  (cd "$work/node$n" && env LEAF_SERVER__LISTEN="127.0.0.1:$port" \
    LEAF_SEGMENT__STORE=mysql LEAF_SEGMENT__MYSQL__URL="$url" \
    LEAF_SNOWFLAKE__MODE=mysql LEAF_SNOWFLAKE__MYSQL__URL="$url" \
    LEAF_SNOWFLAKE__IP=10.0.0.1 LEAF_SNOWFLAKE__PORT=800$n \
    "$bin" 2>"$work/node$n.log") &
  pid=$!; pids+=("$pid")
  eval "port$n=$port pid$n=$pid"
  wait_ready "$port"
done
create_plain "$port1"
take "$port1" > "$out/mysql/issued-node1.json"
take "$port2" > "$out/mysql/issued-node2.json"
kill -TERM "$pid1"; wait "$pid1" || true
kill -9 "$pid2"; wait "$pid2" 2>/dev/null || true
for n in 1 2; do cp -r "$work/node$n/leaf-data" "$out/mysql/node$n"; done
docker exec "$container" mariadb-dump -uroot -p$password --skip-dump-date --skip-comments leaf \
  leaf_alloc leaf_workerid_alloc > "$out/mysql/rows.sql"
echo "leaf-server $tag (git $(git -C "$root" rev-parse --short=12 "$tag^{commit}")), recorded $(date -u +%F)" \
  > "$out/version.txt"
log "recorded $tag in $out:"
find "$out" -type f | sort >&2
