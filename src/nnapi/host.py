"""What this host's CPU is: its instruction-set flags and a short digest of its model and flags. Drivers
choose kernels by the flags and put the digest in their version (code compiled for one CPU is not
trusted on another); the runtime's device records are stamped with it too."""
from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _cpuinfo_head() -> tuple[str, frozenset[str]]:
    """(the first "model name" and "flags" lines of /proc/cpuinfo, the flags): empty where it cannot be read."""
    text = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                text += line + "\n"
                if line.startswith("flags"):
                    return text, frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return text, frozenset()


def cpu_flags() -> frozenset[str]:
    """This CPU's instruction-set flags (/proc/cpuinfo; empty where it cannot be read): what a driver
    asks before choosing kernels whose results depend on them."""
    return _cpuinfo_head()[1]


def cpu_description() -> str:
    """This CPU's model and instruction-set flags, as /proc/cpuinfo says them (its first two such lines)."""
    return _cpuinfo_head()[0]


def cpu_features() -> str:
    """8 hex digits of this CPU's model and instruction-set flags (code compiled for the host depends on
    them: a driver with CPU_SPECIFIC has them in its version)."""
    import hashlib
    return hashlib.sha256(cpu_description().encode()).hexdigest()[:8]


__all__ = ["cpu_description", "cpu_features", "cpu_flags"]
