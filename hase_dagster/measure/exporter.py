"""A Prometheus exporter for Hase's telemetry: DCGM-named GPU fields and HOST_* fields on one port.

Every metric is a gauge named exactly like its telemetry field (``DCGM_FI_DEV_GPU_UTIL``,
``HOST_CPU_UTIL``, ...) with a ``device`` label (``cuda:0`` or ``cpu``). Only the fields this
machine can really provide are exported: a GPU field is never invented on a CPU-only host. Beside
them, ``HASE_HOST_LOOP_MS``: the host core's loop reading (``measure.host_speed``).

    python -m hase_dagster.measure.exporter [--device cpu|cuda] [--port 9400] [--fields F1,F2]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from hase_dagster.measure import telemetry
from hase_dagster.measure.host_speed import HOST_LOOP_METRIC, host_loop_reading

DEVICE_LABELS = {"cuda": "cuda:0", "cpu": "cpu"}


def _log(message: str) -> None:
    print(f"hase exporter: {message}", file=sys.stderr, flush=True)


def serve_metrics(
    device: str,
    fields: list[str],
    port: int = 9400,
    host: str = "127.0.0.1",
    interval_s: float = 1.0,
    stop: threading.Event | None = None,
) -> None:
    """Serve ``fields`` for ``device`` on ``http://host:port/metrics``, refreshed every ``interval_s``.

    Blocks until ``stop`` is set (forever without one), then closes the HTTP server and the source.
    Fields the machine cannot provide for ``device`` are left out; an unknown field name, or no
    field left at all, raises ``ValueError``; a port already in use raises ``OSError``. A failed
    read skips one update.
    """
    if device not in DEVICE_LABELS:
        raise ValueError(f"unknown device {device!r}; expected one of {sorted(DEVICE_LABELS)}")
    source = telemetry.metric_source(device, fields)
    try:
        if not source.names:
            raise ValueError(f"none of the fields {fields} is available for device {device}")
        dropped = [f for f in fields if f not in source.names]
        if dropped:
            _log(f"not exported (not available for device {device}): {', '.join(dropped)}")
        registry = CollectorRegistry()
        label = DEVICE_LABELS[device]
        gauges = {
            name: Gauge(name, f"Hase telemetry field {name}", ["device"], registry=registry).labels(device=label)
            for name in source.names
        }
        # The host core's speed (measure.host_speed), for hase predict --host-reading prometheus: 5 loops, ~3.5 ms.
        host_loop = Gauge(HOST_LOOP_METRIC, "Hase host loop reading, ms", ["device"], registry=registry)
        host_loop_gauge = host_loop.labels(device=label)
        if stop is None:
            stop = threading.Event()
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        _log(f"serving {len(gauges)} fields for {label} on http://{host}:{port}/metrics")
        try:
            while True:
                try:
                    for name, value in source.read().items():
                        gauges[name].set(value)
                    host_loop_gauge.set(host_loop_reading(seconds=0.0))
                except Exception as exc:  # one lost sample, never a dead exporter
                    _log(f"read failed: {type(exc).__name__}: {exc}")
                if stop.wait(interval_s):
                    break
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    finally:
        source.close()


def _default_device() -> str:
    from hase_dagster.core.ort_runtime import cuda_is_usable

    return "cuda" if cuda_is_usable() else "cpu"


def _available_fields(device: str) -> list[str]:
    """Every telemetry field this machine can provide for ``device``."""
    source = telemetry.metric_source(device, telemetry.ALL_FIELDS)
    source.close()
    return list(source.names)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (``python -m hase_dagster.measure.exporter``, ``hase exporter``)."""
    parser = argparse.ArgumentParser(prog="hase exporter", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device",
        choices=sorted(DEVICE_LABELS),
        default=None,
        help="device to report (default: cuda where the CUDA EP truly runs, else cpu)",
    )
    parser.add_argument("--port", type=int, default=9400, help="port to listen on (default: 9400)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between reads (default: 1)")
    parser.add_argument(
        "--fields", default=None, help="comma-separated telemetry fields (default: every field the device provides)"
    )
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval must be positive, got {args.interval}")
    device = args.device or _default_device()
    if args.fields:
        fields = [f.strip() for f in args.fields.split(",") if f.strip()]
    else:
        fields = _available_fields(device)

    stop = threading.Event()
    # Stop cleanly on SIGTERM and on SIGINT, even when started in the background with SIGINT ignored.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, frame: stop.set())
    try:
        serve_metrics(device, fields, port=args.port, host=args.host, interval_s=args.interval, stop=stop)
    except (ValueError, OSError) as exc:
        print(f"hase: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
