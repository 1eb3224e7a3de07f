"""Everything under ``e2e/`` is an end-to-end test (the real CLI, webserver or several processes): marked ``e2e``
by its path, so ``make test`` (``-m 'not slow and not e2e'``) never runs it and ``pytest -m e2e`` does. Those under
``e2e/golden/`` read the ci warehouse the DAG lane materialized (``KP_GOLDEN_WAREHOUSE``)."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.e2e)
