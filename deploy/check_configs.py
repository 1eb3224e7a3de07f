"""Check the deployment examples against the libraries' own schemas (no cluster, broker or database).

    PYTHONPATH=<dir with dagster-k8s, dagster-celery, dagster-postgres 0.29.27> python deploy/check_configs.py

Loads deploy/local/dagster.yaml as an instance (and claims the training pool's limit on it); validates every
dagster.yaml against Dagster's instance schema, with its concurrency section (the run queue, the pools: the
training pool, one slot per GPU); validates deploy/postgres/dagster.yaml's storage sections and
deploy/k8s/dagster.yaml's storage and run launcher sections against dagster-postgres's and dagster-k8s's
config types; loads both code locations and validates their run_config.yaml against the asset job's config
schema (executor included). Examples whose library is not installed are reported as skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent


def training_pool() -> str:
    """The concurrency pool every foundation and adapter step claims (the package's only pool)."""
    from kinematic_pipeline.orchestration.assets_models import TRAINING_POOL

    return TRAINING_POOL


def check_concurrency(name: str) -> str:
    """The whole file against Dagster's instance schema (no library needed: module and class are names here),
    then its concurrency section as the instance reads it: runs, the nightly queue and the pools."""
    from dagster._core.instance.config import ConcurrencyConfig, PoolGranularity, dagster_instance_config
    from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig

    config, _ = dagster_instance_config(str(DEPLOY / name))  # raises DagsterInvalidConfigError on a wrong key
    defaults = RunQueueConfig(max_concurrent_runs=10, tag_concurrency_limits=[])  # Dagster's queue defaults
    concurrency = ConcurrencyConfig.from_concurrency_settings(config["concurrency"], defaults)
    pools, queue = concurrency.pool_config, concurrency.run_queue_config
    limits = {(t["key"], t.get("value")): t["limit"] for t in queue.tag_concurrency_limits}
    assert limits[("kinematic_pipeline/queue", "nightly")] == 1, limits
    assert queue.max_concurrent_runs > 1, "the grid's runs must be able to run in parallel"
    assert pools.pool_granularity == PoolGranularity.OP, pools  # training steps wait; their runs' other steps go on
    assert pools.default_pool_limit is not None and pools.default_pool_limit >= 1, pools
    return (
        f"max_concurrent_runs={queue.max_concurrent_runs}, pools: granularity={pools.pool_granularity.value}, "
        f"default_limit={pools.default_pool_limit} ({training_pool()})"
    )


def claim_slots(instance) -> str:
    """Training steps of three runs claim the pool as executors do (the instance's default_limit: one slot), then
    as after `dagster instance concurrency set <pool> 2`: an explicit limit wins over default_limit."""
    import dagster as dg
    from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext

    storage, pool = instance.event_log_storage, training_pool()
    assert storage.supports_global_concurrency_limits, type(storage).__name__

    def run(name: str) -> InstanceConcurrencyContext:
        return InstanceConcurrencyContext(instance, dg.DagsterRun(job_name=name, run_id=str(uuid.uuid4())))

    with run("first") as first:
        assert first.claim(pool, "splinegpt_foundation")
        with run("second") as second:  # one GPU: the second run's training step waits
            assert not second.claim(pool, "rawgpt_foundation")
        default = storage.get_concurrency_info(pool)
        assert default.slot_count == 1 and default.using_default_limit, default
        storage.set_concurrency_slots(pool, 2)  # what `dagster instance concurrency set` stores
        with run("third") as third:
            assert third.claim(pool, "patchtst_foundation")
            third.free_step("patchtst_foundation")
        first.free_step("splinegpt_foundation")
    info = storage.get_concurrency_info(pool)
    assert info.slot_count == 2 and not info.using_default_limit and not info.claimed_slots, info
    return f"{pool}: {default.slot_count} slot by default (a second training step waits), 2 once set"


def check_local() -> str:
    import dagster as dg

    with tempfile.TemporaryDirectory() as home:
        shutil.copy(DEPLOY / "local" / "dagster.yaml", Path(home) / "dagster.yaml")
        cwd = os.getcwd()
        os.chdir(home)  # its storage paths are relative: keep them out of the repository
        try:
            with dg.DagsterInstance.from_config(home) as instance:
                queue = instance.get_concurrency_config().run_queue_config
                limits = {(t["key"], t.get("value")): t["limit"] for t in queue.tag_concurrency_limits}
                assert limits[("kinematic_pipeline/queue", "nightly")] == 1, limits
                return (
                    f"{type(instance.run_coordinator).__name__}; {check_concurrency('local')}; {claim_slots(instance)}"
                )
        finally:
            os.chdir(cwd)


def check_k8s_instance() -> str:
    from dagster._config import process_config

    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        os.environ.setdefault(var, "check")
    config = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())
    checked = []
    for section in ("run_storage", "event_log_storage", "schedule_storage", "run_launcher"):
        entry = config[section]
        cls = getattr(importlib.import_module(entry["module"]), entry["class"])
        result = process_config(cls.config_type(), entry["config"])
        assert result.success, f"{section}: {[e.message for e in result.errors]}"
        checked.append(entry["class"])
    return ", ".join(checked)


def check_postgres_instance() -> str:
    from dagster._config import process_config

    os.environ.setdefault("DAGSTER_PG_URL", "postgresql+psycopg2://postgres@localhost:5432/dagster")
    config = yaml.safe_load((DEPLOY / "postgres" / "dagster.yaml").read_text())
    checked = []
    for section in ("run_storage", "event_log_storage", "schedule_storage"):
        entry = config[section]
        cls = getattr(importlib.import_module(entry["module"]), entry["class"])
        result = process_config(cls.config_type(), entry["config"])
        assert result.success, f"{section}: {[e.message for e in result.errors]}"
        checked.append(entry["class"])
    return ", ".join(checked) + " (schemas; test_cluster.py runs it against a server)"


def check_code_location(name: str) -> str:
    import dagster as dg

    os.environ.setdefault("KP_CELERY_BROKER", "redis://localhost:6379/0")  # deploy/celery/run_config.yaml
    os.environ.setdefault("KP_CELERY_BACKEND", "redis://localhost:6379/1")

    spec = importlib.util.spec_from_file_location(f"{name}_code_location", DEPLOY / name / "code_location.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dg.Definitions.validate_loadable(module.defs)
    job = module.defs.get_repository_def().get_job("__ASSET_JOB")
    run_config = yaml.safe_load((DEPLOY / name / "run_config.yaml").read_text())
    dg.validate_run_config(job, run_config)
    return f"executor {job.executor_def.name}, run_config.yaml valid"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    checks = [
        ("local/dagster.yaml", check_local, None),
        ("postgres/dagster.yaml concurrency", lambda: check_concurrency("postgres"), None),
        ("k8s/dagster.yaml concurrency", lambda: check_concurrency("k8s"), None),
        ("postgres/dagster.yaml", check_postgres_instance, "dagster_postgres"),
        ("k8s/dagster.yaml", check_k8s_instance, "dagster_k8s"),
        ("k8s/code_location.py + run_config.yaml", lambda: check_code_location("k8s"), "dagster_k8s"),
        ("celery/code_location.py + run_config.yaml", lambda: check_code_location("celery"), "dagster_celery"),
    ]
    failed = 0
    for name, check, needs in checks:
        if needs and importlib.util.find_spec(needs) is None:
            print(f"SKIP {name}: {needs} is not installed")
            continue
        try:
            print(f"OK   {name}: {check()}")
        except Exception as exc:  # noqa: BLE001 - report every example, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
