#!/usr/bin/env bash
# Run Hase's Prometheus in the foreground on loopback: it scrapes the exporter (127.0.0.1:9400) every second.
#   HASE_PROMETHEUS_PORT   port to listen on (default 9090)
#   HASE_PROMETHEUS_DATA   TSDB directory (default $HASE_DATA_DIR/prometheus, i.e. <repo>/.hase_data/prometheus)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
"$here/install-prometheus.sh"

data=${HASE_PROMETHEUS_DATA:-${HASE_DATA_DIR:-$repo/.hase_data}/prometheus}
mkdir -p "$data"
exec /usr/bin/prometheus \
    --config.file="$here/prometheus.yml" \
    --web.listen-address="127.0.0.1:${HASE_PROMETHEUS_PORT:-9090}" \
    --storage.tsdb.path="$data"
