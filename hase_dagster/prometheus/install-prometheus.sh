#!/usr/bin/env bash
# Install the Debian package `prometheus` if /usr/bin/prometheus is missing (idempotent).
# The package may start its own system daemon on 0.0.0.0:9090 at install time; if this install started
# one, it is stopped again so Hase's loopback instance (run-prometheus.sh) owns the port.
# Where it cannot be installed (not root and no passwordless sudo, or apt fails) it prints a loud
# warning and exits 0, so `make test` goes on: the tests that need a real Prometheus cannot run then.
set -euo pipefail

PROMETHEUS_BIN=/usr/bin/prometheus
[[ -x $PROMETHEUS_BIN ]] && exit 0

not_installed() {
    {
        echo "################################################################################"
        echo "install-prometheus.sh: WARNING: Prometheus is NOT installed: $1"
        echo "install-prometheus.sh: WARNING: $PROMETHEUS_BIN is missing, so the tests that run a real"
        echo "install-prometheus.sh: WARNING: Prometheus (tests/test_prometheus.py) cannot run here."
        echo "install-prometheus.sh: WARNING: as root: apt-get install --no-install-recommends prometheus"
        echo "################################################################################"
    } >&2
    exit 0
}

if [[ $(id -u) -eq 0 ]]; then
    as_root() { "$@"; }
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root() { sudo -n "$@"; }
else
    not_installed "installing it needs root, and this is not root and has no passwordless sudo"
fi
export DEBIAN_FRONTEND=noninteractive

daemons() { pgrep -x prometheus -u prometheus 2>/dev/null | sort || true; }
before=$(daemons)

echo "install-prometheus.sh: installing the Debian package prometheus" >&2
install_package() { as_root apt-get install -y --no-install-recommends prometheus; }
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    as_root apt-get update || not_installed "apt-get update failed"
fi
if ! install_package; then
    # A fresh machine has no package lists yet (or stale ones): update once, then retry.
    as_root apt-get update || not_installed "apt-get update failed"
    install_package || not_installed "apt-get install prometheus failed"
fi

started=$(comm -13 <(echo "$before") <(daemons) | grep . || true)
if [[ -n $started ]]; then
    echo "install-prometheus.sh: stopping the system daemon the package started ($(echo $started))" >&2
    if [[ -d /run/systemd/system ]]; then
        as_root systemctl stop prometheus.service || true
    else
        as_root service prometheus stop || true
    fi
    alive() { for pid in $started; do ps -p "$pid" >/dev/null && echo "$pid"; done; }
    for _ in $(seq 50); do
        [[ -z $(alive) ]] && break
        as_root kill -TERM $(alive) 2>/dev/null || true
        sleep 0.2
    done
    [[ -z $(alive) ]] || as_root kill -KILL $(alive) 2>/dev/null || true
fi
[[ -x $PROMETHEUS_BIN ]] || not_installed "apt-get installed the package but $PROMETHEUS_BIN is not there"
"$PROMETHEUS_BIN" --version | head -1 >&2
