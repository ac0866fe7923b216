#!/usr/bin/env bash
# `make dev`: the Hase exporter (127.0.0.1:9400), Prometheus (127.0.0.1:9090) and the Dagster UI with its
# daemon (127.0.0.1:3000) together. Ctrl-C, SIGTERM or any of the three exiting stops all three.
#   HASE_PROMETHEUS_PORT, HASE_PROMETHEUS_DATA   see run-prometheus.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
bin=$repo/.venv/bin
export DAGSTER_HOME=${DAGSTER_HOME:-$repo/.dagster_home}
export HASE_DATA_DIR=${HASE_DATA_DIR:-$repo/.hase_data}

declare -A names=()  # pid (= its process group and session) -> service name
stop_timeout_s=20

log() { echo "dev-stack: $*" >&2; }

# Start a service in its own session (so its whole process tree can be signalled as one group), with
# SIGINT at its default: a background job of a non-interactive shell inherits SIGINT ignored, and
# `dagster dev` maps SIGTERM to its SIGINT handler, so it would then ignore both.
start() {
    local name=$1
    shift
    setsid env --default-signal=INT "$@" &
    names[$!]=$name
    log "started $name (pid $!)"
}

alive_groups() {
    local pid
    for pid in "${!names[@]}"; do
        kill -0 -- "-$pid" 2>/dev/null && echo "$pid"
    done
    return 0
}

stop_all() {
    trap - INT TERM EXIT
    local pid deadline=$((SECONDS + stop_timeout_s))
    for pid in $(alive_groups); do
        log "stopping ${names[$pid]} (process group $pid)"
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
    while [[ -n $(alive_groups) ]] && ((SECONDS < deadline)); do
        sleep 0.2
    done
    for pid in $(alive_groups); do
        log "${names[$pid]} ignored SIGTERM for ${stop_timeout_s}s: killing process group $pid"
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all' EXIT

"$here/install-prometheus.sh"
start exporter "$bin/python" -m hase_dagster.measure.exporter
start prometheus "$here/run-prometheus.sh"
# `dg dev` (dagster-dg-cli, pinned) supersedes `dagster dev`: it reads the project from pyproject.toml
# ([tool.dg.project], code location "hase") and runs the same webserver and daemon. VIRTUAL_ENV names the
# project's venv, which `dg` otherwise warns is not the active one. `dagster dev -w workspace.yaml` still works.
start dagster env VIRTUAL_ENV="$repo/.venv" "$bin/dg" dev -h 127.0.0.1 -p 3000
log "Dagster UI http://127.0.0.1:3000, Prometheus http://127.0.0.1:${HASE_PROMETHEUS_PORT:-9090}," \
    "exporter http://127.0.0.1:9400/metrics (Ctrl-C stops all three)"

status=0
wait -n -p exited "${!names[@]}" || status=$?
log "${names[${exited:-}]:-a service} exited with status $status: stopping the others"
exit "$status"
