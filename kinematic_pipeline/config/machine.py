"""What the machine lends this process (nothing here imports more than ``os``)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or ``taskset`` limits it)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
