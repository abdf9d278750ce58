#!/usr/bin/env bash
# pg-restart.sh times a PostgreSQL-backed server's restart under its own
# name after SIGKILL: it starts `aion server --server-name rs` on a fresh
# database, kills it with SIGKILL a second after /healthz first answers,
# starts it again under the same name and prints the time from that start to
# /healthz answering 200. A restart that had to wait out the old lease would
# take the lease's length (10 s by default).
#
#   scripts/pg-restart.sh [RUNS]
#
# PGURL (postgres://postgres@127.0.0.1:5432), DB (aion_pg_restart; dropped
# and created for each run), GRPC and HTTP (the addresses, 127.0.0.1:17621
# and 127.0.0.1:17622) and AION (the aion binary, built from this tree by
# default) may be set in the environment. Needs psql, curl and bc.
set -euo pipefail
runs=${1:-1}
pgurl=${PGURL:-postgres://postgres@127.0.0.1:5432} db=${DB:-aion_pg_restart}
grpc=${GRPC:-127.0.0.1:17621} http=${HTTP:-127.0.0.1:17622}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${AION:-} ]]; then
	AION=$(mktemp -d)/aion
	(cd "$root" && go build -o "$AION" ./cmd/aion)
fi
data=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$data"' EXIT
start() {
	"$AION" server --store "$pgurl/$db" --server-name rs --grpc-addr "$grpc" --http-addr "$http" \
		--data-dir "$data" >>"$data/server.log" 2>&1 &
	pid=$!
}
healthy() { # waits up to 20 s for /healthz
	for _ in $(seq 4000); do
		curl -sf "http://$http/healthz" >/dev/null && return 0
		sleep 0.005
	done
	echo "server not healthy after 20 s; log in $data/server.log" >&2
	return 1
}
for run in $(seq "$runs"); do
	PGOPTIONS=--client-min-messages=warning psql "$pgurl/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
	start
	healthy
	sleep 1
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	t0=$(date +%s.%N)
	start
	healthy
	t1=$(date +%s.%N)
	printf "run %d: ready %.3f s after a restart under its own name\n" "$run" "$(echo "$t1 - $t0" | bc)"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
done
