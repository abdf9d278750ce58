#!/usr/bin/env bash
# steady-state.sh runs an aion server in its own process on a fresh SQLite
# data directory and an open-loop `aion bench` against it, sampling the
# database file, its write-ahead log and the server's RSS every window.
#
#   scripts/steady-state.sh OUT.json [REAP_INTERVAL]
#
# REAP_INTERVAL is the server's --reap-interval (default 10s; 0 turns
# reaping off). RATE (1000), DURATION (10m), RETENTION (1m), WINDOW (30s),
# BATCH (10) and AION (the aion binary, built from this tree by default)
# may be set in the environment. The bench's JSON report goes to OUT.json,
# its per-window lines to stderr.
set -euo pipefail
out=${1:?usage: steady-state.sh OUT.json [REAP_INTERVAL]}
reap=${2:-10s}
rate=${RATE:-1000} duration=${DURATION:-10m} retention=${RETENTION:-1m} window=${WINDOW:-30s} batch=${BATCH:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${AION:-} ]]; then
	AION=$(mktemp -d)/aion
	(cd "$root" && go build -o "$AION" ./cmd/aion)
fi
dir=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
grpc=127.0.0.1:$(port) http=127.0.0.1:$(port)
"$AION" server --data-dir "$dir" --grpc-addr "$grpc" --http-addr "$http" --reap-interval "$reap" >"$dir/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	curl -fs "http://$http/readyz" >/dev/null && break
	sleep 0.1
done
"$AION" bench --address "$grpc" --rate "$rate" --duration "$duration" --batch "$batch" --retention "$retention" \
	--window "$window" --metrics-url "http://$http/metrics" --db-path "$dir/aion.db" --json >"$out"
