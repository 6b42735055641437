"""Peak resident memory of this process, for the memory probes the benchmarks run in a
fresh interpreter.

`resource.getrusage(...).ru_maxrss` survives `exec`, so a probe started from a big
parent reports the parent's peak; the kernel's VmHWM belongs to the new address space."""

from __future__ import annotations

from pathlib import Path


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    peak = _status_mib("VmHWM")
    if peak == peak:  # not NaN: the kernel reported it
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    return _status_mib("VmRSS")


def reset_peak() -> None:
    """Start VmHWM afresh from the current size (Linux ≥ 4.0), so the peak that follows
    is the next step's and not that of building its input."""
    Path("/proc/self/clear_refs").write_text("5")
