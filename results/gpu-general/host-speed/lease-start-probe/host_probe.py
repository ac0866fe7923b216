"""Read the host's pure-Python loop (hase's host_loop_reading, copied) every second from a lease's start."""
import os, statistics, sys, time

def loop_ms(iterations=20_000):
    started = time.perf_counter_ns(); total = 0
    for i in range(iterations):
        total += i
    return (time.perf_counter_ns() - started) / 1e6

def reading(seconds=0.5, at_least=5):
    r = []; end = time.perf_counter() + seconds
    while len(r) < at_least or time.perf_counter() < end:
        r.append(loop_ms())
    return statistics.fmean(r)

t0 = time.time(); total = float(sys.argv[1])
print("python", sys.version.split()[0], "cpus", os.cpu_count(), flush=True)
while time.time() - t0 < total:
    mhz = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
    print(f"{time.time() - t0:6.1f} s loop {reading():.3f} ms load {open('/proc/loadavg').read().split()[0]} "
          f"MHz {statistics.fmean(mhz):.0f}", flush=True)
    time.sleep(0.5)
