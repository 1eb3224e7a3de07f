"""The test suite. Under pytest-xdist (``pytest -n N``: ``make test`` and the nightly lane's slow tests) each worker runs on one
core of the cores this process may use (worker k on the k-th, modulo their number), pinned here: this package is
imported before ``conftest.py`` and so before numpy, polars or torch size their thread pools. Two workers at every
core each would oversubscribe 2 cores (a training step 3.7x slower beside another), and ``usable_cores`` (the
settings' threads, the probes') says 1 in each; a CLI the test starts inherits the pin."""

import os


def pin_worker(environ=os.environ) -> set[int] | None:
    """The cores this worker was pinned to, or None outside a pytest-xdist worker of a run with >= 2 of them."""
    worker, count = environ.get("PYTEST_XDIST_WORKER", ""), environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    if not (worker.startswith("gw") and worker[2:].isdigit() and int(count) > 1 and hasattr(os, "sched_setaffinity")):
        return None
    cores = sorted(os.sched_getaffinity(0))
    core = {cores[int(worker[2:]) % len(cores)]}
    os.sched_setaffinity(0, core)
    return core


pin_worker()
