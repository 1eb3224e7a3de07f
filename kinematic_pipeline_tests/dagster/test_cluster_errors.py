"""Bad cluster configuration gets a clear error (no server needed): an unreachable Postgres or Redis names its
host, port and scripts/servers.sh; a missing dagster-postgres / dagster-celery names the `cluster` extra."""

from __future__ import annotations

import importlib
import shutil
import socket
import sys

import dagster as dg
import pytest

from kinematic_pipeline.orchestration import cluster
from kinematic_pipeline_tests.helpers import ROOT


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_unreachable_postgres_names_host_port_and_the_script(tmp_path, monkeypatch):
    pytest.importorskip("dagster_postgres")
    port = _closed_port()
    monkeypatch.setenv("DAGSTER_PG_URL", f"postgresql+psycopg2://postgres@127.0.0.1:{port}/dagster")
    shutil.copy(ROOT / "deploy" / "postgres" / "dagster.yaml", tmp_path / "dagster.yaml")
    with pytest.raises(cluster.ServerUnreachable, match=rf"127\.0\.0\.1:{port} .*scripts/servers\.sh start"):
        dg.DagsterInstance.from_config(str(tmp_path))


def test_unreachable_broker_names_host_port_and_the_script():
    port = _closed_port()
    with pytest.raises(cluster.ServerUnreachable, match=rf"Celery broker at 127\.0\.0\.1:{port} .*servers\.sh"):
        cluster.check_reachable(f"redis://127.0.0.1:{port}/0", "the Celery broker", 6379)


@pytest.mark.parametrize(
    ("library", "name"), [("dagster_postgres", "PostgresRunStorage"), ("dagster_celery", "celery_executor")]
)
def test_a_missing_library_names_the_cluster_extra(monkeypatch, library, name):
    monkeypatch.setitem(sys.modules, library, None)  # import fails as if not installed
    for attr in ("PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"):
        if attr in vars(cluster):  # (hasattr would call the module's __getattr__, which raises without the extra)
            monkeypatch.delattr(cluster, attr)  # reload keeps a module's old attributes
    try:
        module = importlib.reload(cluster)
        with pytest.raises(ImportError, match=r"pip install -e '\.\[cluster\]'"):
            getattr(module, name)
    finally:
        monkeypatch.undo()
        importlib.reload(cluster)
