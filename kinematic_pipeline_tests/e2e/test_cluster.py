"""More than one process for real: PostgreSQL instance storage, a Redis broker and two Celery workers
(`scripts/servers.sh`, deploy/postgres/dagster.yaml, deploy/celery/), backfilling raw_ohlcv and the three token
assets over 121 sessions; one worker's step process is SIGKILLed mid-backfill.

Checks: every shard is byte-identical (sha256) to the default single-process path (in-process runs on the
SQLite instance, another warehouse); Postgres holds exactly one materialization per partition and asset; the
kill leaves no partial shard visible (every *.parquet reads; leftovers are `.<name>.*.tmp` only) and re-running
the failed partitions writes the same bytes. The servers and workers are stopped at the end, also on failure.

Then one fold of the training grid (the ci profile's last fold, its seeds, two taus: independent runs, all at
once) on two more workers, with the concurrency pool of deploy/postgres/dagster.yaml (`concurrency.pools`,
default_limit 1: one GPU): from the event log's STEP_START / STEP_SUCCESS times, no two training steps
(foundations, adapters: the pool kinematic_pipeline/training) ever ran at once; the instance's slot table showed a
training step waiting for the slot, and never held or queued any other step (predictions, backtests).

    pytest -m e2e kinematic_pipeline_tests/e2e/test_cluster.py     (as root on Debian: apt-get installs
                                                                          postgresql / redis-server if missing)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import psutil
import pyarrow.parquet as pq
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import fold_names
from kinematic_pipeline.orchestration.assets_models import TRAINING_POOL
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.run_keys import policy_keys
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers import ROOT

BIN = Path(sys.executable).parent  # dagster, dagster-celery and celery of this interpreter's environment
FIRST, LAST = "2021-01-04", "2021-06-25"  # 121 sessions
HALVES = ((FIRST, "2021-03-31"), ("2021-04-01", LAST))  # 61 + 60 sessions, one run each
TOKENS = ("spline_tokens", "fd_tokens", "raw_tokens")
ASSETS = ("raw_ohlcv", *TOKENS)
# The grid: one fold (the ci profile's last: its tau sweep runs there only), its seeds, two taus, of the ci profile's cheapest model (a
# PatchTST foundation or adapter trains in seconds on a CPU); what it reads is built in-process first.
GRID_VARIANT, GRID_TAUS = "patchtst", (0.01, 0.02)
GRID_UPSTREAM = "raw_ohlcv,alpha_estimates,spline_tokens,raw_tokens,labels,raw_window_store"
TRAINING_STEPS = (f"{GRID_VARIANT}_foundation", f"{GRID_VARIANT}_adapter")  # the steps of TRAINING_POOL

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

pytest.importorskip("dagster_postgres", reason="the cluster extra: pip install -e '.[cluster]'")
pytest.importorskip("dagster_celery", reason="the cluster extra: pip install -e '.[cluster]'")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers(request):
    """Postgres + Redis from the repository's script on free ports; stopped (and their data removed) at the end."""
    base = Path(tempfile.mkdtemp(prefix="kp_servers_"))  # under /tmp: the postgres user must reach it
    base.chmod(0o755)
    env = {**os.environ, "KP_SERVERS_DIR": str(base), "KP_PG_PORT": str(_free_port())}
    env["KP_REDIS_PORT"] = str(_free_port())
    script = ["bash", str(ROOT / "scripts" / "servers.sh")]

    def stop() -> None:
        subprocess.run([*script, "stop"], env=env, timeout=120, check=False)
        shutil.rmtree(base, ignore_errors=True)

    request.addfinalizer(stop)
    started = time.perf_counter()
    out = subprocess.run([*script, "start"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"servers.sh start: {time.perf_counter() - started:.1f} s\n{out.stderr}")
    settings = dict(re.findall(r"^export (\w+)=(\S+)$", out.stdout, re.MULTILINE))
    assert set(settings) == {"DAGSTER_PG_URL", "KP_CELERY_BROKER", "KP_CELERY_BACKEND"}, out.stdout
    assert subprocess.run([*script, "status"], env=env, capture_output=True).returncode == 0
    return settings


def _base_env(warehouse: Path, home: Path, end: str | None = LAST) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(warehouse),
        **({"KP_END_DATE": end} if end else {}),  # None: the ci profile's whole history
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),  # dagster-celery starts `celery` by PATH
    )
    return env


@pytest.fixture(scope="module")
def cluster(servers, tmp_path_factory):
    """The Postgres instance home, the warehouse and two Celery workers (concurrency 1 each)."""
    base = tmp_path_factory.mktemp("cluster")
    home = base / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    env = {**_base_env(base / "warehouse", home), **servers}
    os.environ["DAGSTER_PG_URL"] = servers["DAGSTER_PG_URL"]  # for this process's reads of the instance
    with dg.DagsterInstance.from_config(str(home)) as instance:  # create the schema once, before the processes
        instance.get_runs(limit=1)

    try:
        with _celery_workers(env, ("w1", "w2"), base) as (workers, logs):
            yield {"env": env, "home": home, "warehouse": base / "warehouse", "workers": workers, "logs": logs}
    finally:
        os.environ.pop("DAGSTER_PG_URL", None)


@contextlib.contextmanager
def _celery_workers(env: dict[str, str], names: tuple[str, ...], base: Path) -> Iterator[tuple[dict, dict]]:
    """Celery workers (concurrency 1 each) with `env`, ready; stopped at the end, also on failure."""
    workers: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}
    try:
        for name in names:
            logs[name] = base / f"worker-{name}.log"
            cmd = [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app"]
            cmd += ["-y", str(ROOT / "deploy/celery/run_config.yaml"), "-n", name, "--", "--concurrency=1"]
            with open(logs[name], "w") as log:
                workers[name] = subprocess.Popen(
                    cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        deadline = time.monotonic() + 120
        while not all(f"{n}@" in p.read_text() and "ready." in p.read_text() for n, p in logs.items()):
            assert time.monotonic() < deadline, "workers not ready:\n" + "\n".join(p.read_text() for p in logs.values())
            assert all(w.poll() is None for w in workers.values()), "a worker exited"
            time.sleep(0.5)
        yield workers, logs
    finally:
        for proc in workers.values():  # warm shutdown, then SIGKILL what is left of each worker's process group
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in workers.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _launch(env: dict[str, str], select: str, start: str, end: str | None, log: Path) -> tuple[subprocess.Popen, Path]:
    """A run through the Celery code location: the partitions start...end, or the one partition `start`."""
    cmd = [str(BIN / "dagster"), "asset", "materialize", "-f", str(ROOT / "deploy/celery/code_location.py")]
    cmd += ["-c", str(ROOT / "deploy/celery/run_config.yaml"), "--select", select]
    cmd += ["--partition", start] if end is None else ["--partition-range", f"{start}...{end}"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT), log


def _wait(proc_log: tuple[subprocess.Popen, Path]) -> tuple[int, str]:
    proc, log = proc_log
    proc.wait(timeout=600)
    return proc.returncode, log.read_text()


def _shards(warehouse: Path) -> dict[str, str]:
    """sha256 of every visible shard (*.parquet: data, quarantine, manifests), by path in the warehouse."""
    return {
        str(p.relative_to(warehouse)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(warehouse.rglob("*.parquet"))
        if "dagster" not in p.parts and ".staging" not in p.parts  # a unit's staging is never read
    }


def _token_shards(warehouse: Path) -> int:
    """Token days swapped in whole (``<asset>/<day>/tokens.parquet``; not the typed ``_schema`` twin)."""
    return sum(1 for kind in TOKENS for p in (warehouse / kind).glob("*/tokens.parquet") if p.parent.name[0].isdigit())


def _busy_pool_process(cluster: dict, since: dict[str, int]) -> tuple[str, psutil.Process]:
    """A worker that received a token step since `since` (log offsets) and its pool process running it."""
    for name, log in cluster["logs"].items():
        text = log.read_text()[since[name] :]
        if "Task execute_plan" in text and " received" in text and " succeeded in " not in text:
            children = psutil.Process(cluster["workers"][name].pid).children(recursive=True)
            pool = [c for c in children if c.ppid() != cluster["workers"][name].pid]  # celery main -> pool child
            if pool:
                return name, pool[0]
    raise LookupError


def _in_process(home: Path, warehouse: Path, select: str, end: str | None = LAST) -> None:
    """The default path: `python -m kinematic_pipeline materialize`, in-process runs, SQLite instance."""
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # its storages live under home, whatever the cwd
    env = _base_env(warehouse, home, end)
    cmd = [sys.executable, "-m", "kinematic_pipeline", "materialize", "--select", select]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _reference_shards(tmp_path: Path) -> dict[str, str]:
    _in_process(tmp_path / "ref_home", tmp_path / "ref_warehouse", " or ".join(f"key:{a}" for a in ASSETS))
    return _shards(tmp_path / "ref_warehouse")


def test_celery_workers_on_postgres_backfill_the_same_bytes_and_survive_a_killed_worker(cluster, tmp_path):
    env, warehouse = cluster["env"], cluster["warehouse"]
    days = trading_days(dt.date.fromisoformat(FIRST), dt.date.fromisoformat(LAST))
    assert len(days) == 121
    timings = {}

    # 1. raw_ohlcv: both halves at once, one run each, steps on the workers.
    started = time.perf_counter()
    runs = [_launch(env, "raw_ohlcv", a, b, tmp_path / f"raw-{a}.log") for a, b in HALVES]
    for code, output in map(_wait, runs):
        assert code == 0, output[-4000:]
    timings["raw_ohlcv"] = time.perf_counter() - started

    # 2. The token multi-asset: both halves at once; SIGKILL the pool process of a worker running one of the
    # steps once token shards are being written.
    offsets = {name: len(log.read_text()) for name, log in cluster["logs"].items()}
    started = time.perf_counter()
    runs = [_launch(env, ",".join(TOKENS), a, b, tmp_path / f"tokens-{a}.log") for a, b in HALVES]
    total = 3 * len(days)
    killed = None
    deadline = time.monotonic() + 300
    while killed is None:
        assert time.monotonic() < deadline, "no token shard appeared"
        assert all(p.poll() is None for p, _ in runs), "a token run ended before the kill"
        written = _token_shards(warehouse)
        if written >= 3:
            try:
                name, pool = _busy_pool_process(cluster, offsets)
            except LookupError:
                time.sleep(0.05)
                continue
            pool.send_signal(signal.SIGKILL)
            killed = (name, pool.pid, written)
        time.sleep(0.05)
    results = list(map(_wait, runs))
    timings["tokens with the kill"] = time.perf_counter() - started
    assert 0 < killed[2] < total, killed
    failed = [half for half, (code, _) in zip(HALVES, results) if code != 0]
    assert len(failed) == 1, [(c, o[-2000:]) for c, o in results]
    failed_output = results[HALVES.index(failed[0])][1]
    lost = re.search(r".*(WorkerLostError|SIGKILL).*", failed_output)
    assert lost, failed_output[-4000:]
    print("the failed run says:", lost.group(0).strip()[:300])
    assert cluster["workers"][killed[0]].poll() is None  # the worker itself lives on with a new pool process

    # No partial shard is visible: every *.parquet reads; anything else is a `.<name>.*.tmp` leftover or a day's
    # writer lock (`.locks/<asset>/<day>.lock`, Warehouse.day_lock: never read as data; the killed writer's is
    # released by the kernel with its process).
    for path in warehouse.rglob("*"):
        if path.is_file() and "dagster" not in path.parts and path.parent.name != "warehouse":
            if ".staging" in path.parts:  # a killed writer's staged day: never read, removed by the day's next writer
                assert path.relative_to(warehouse).parts[1] == ".staging", path
            elif path.suffix == ".parquet":
                pq.read_table(path)
            elif ".locks" in path.relative_to(warehouse).parts:
                assert path.suffix == ".lock" and path.parent.parent.name == ".locks", path
            else:
                assert path.name.startswith(".") and path.name.endswith(".tmp"), path
    partial = _token_shards(warehouse)
    assert partial < total, "the killed step wrote every shard: the kill came too late"

    # 3. Re-run the failed partitions (the failed half, token assets) through the workers.
    started = time.perf_counter()
    code, output = _wait(_launch(env, ",".join(TOKENS), *failed[0], tmp_path / "tokens-rerun.log"))
    assert code == 0, output[-4000:]
    timings["re-run"] = time.perf_counter() - started

    # Same bytes as the default single-process path.
    started = time.perf_counter()
    reference = _reference_shards(tmp_path)
    timings["reference (in-process, SQLite)"] = time.perf_counter() - started
    produced = _shards(warehouse)
    wh = Warehouse(warehouse)
    for asset in ASSETS:  # every day's shard (raw_ohlcv: the day unit's bars) is there and among the files compared
        shards = [str(wh.shard(asset, d).relative_to(warehouse)) for d in days]
        assert all(p in produced for p in shards), asset
    assert produced.keys() == reference.keys()
    differ = [p for p in produced if produced[p] != reference[p]]
    assert not differ, f"{len(differ)} shards differ, e.g. {differ[:5]}"

    # The Postgres instance: one materialization per partition and asset (the killed step recorded none).
    with dg.DagsterInstance.from_config(str(cluster["home"])) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        for asset in ASSETS:
            records = instance.fetch_materializations(dg.AssetKey(asset), limit=10_000).records
            partitions = [r.partition_key for r in records]
            assert sorted(partitions) == [d.isoformat() for d in days], asset
        failures = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert len(failures) == 1
    # Every step ran on a worker: both workers executed steps.
    for name, log in cluster["logs"].items():
        assert " succeeded in " in log.read_text(), f"worker {name} ran no step"
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()}, "killed:", killed)


# --- one fold of the training grid, in parallel runs, through the training pool --------------------------------


def _grid() -> tuple[str, list[str], list[str]]:
    """The ci profile's last fold, and its partitions: foundations by seed, adapters by (seed, tau) at GRID_TAUS
    where the run trains them (the report's tau with every seed, the other with the first: ``tau_sweep_seeds``)."""
    settings = load_settings("ci", env={})
    fold = fold_names(settings)[-1]
    seeds = settings.train.seeds
    pretrain = [Foundation.named(settings.folds, GRID_VARIANT, s, fold).fit_key for s in seeds]
    grid = set(policy_keys(settings, GRID_VARIANT))
    finetune = [
        key
        for s in seeds
        for tau in GRID_TAUS
        if (key := Policy.named(settings.folds, GRID_VARIANT, s, BuySellHold(tau), fold).key) in grid
    ]
    assert len(finetune) == len(seeds) + 1, finetune  # both seeds at one tau, the first at the other
    return fold, pretrain, finetune


def _database(url: str, name: str) -> str:
    """A new database `name` on the server of `url` (the grid's instance, apart from the backfill's)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return f"{url.rsplit('/', 1)[0]}/{name}"


@contextlib.contextmanager
def _instance(home: Path, pg_url: str) -> Iterator[dg.DagsterInstance]:
    """The instance of `home` (deploy/postgres/dagster.yaml reads DAGSTER_PG_URL when it opens)."""
    before = os.environ.get("DAGSTER_PG_URL")
    os.environ["DAGSTER_PG_URL"] = pg_url
    try:
        instance = dg.DagsterInstance.from_config(str(home))
    finally:
        if before is None:
            os.environ.pop("DAGSTER_PG_URL")
        else:
            os.environ["DAGSTER_PG_URL"] = before
    with instance:
        yield instance


@pytest.fixture(scope="module")
def grid_cluster(servers, tmp_path_factory):
    """Its own instance (deploy/postgres/dagster.yaml in another database of the server: the pool's limit is
    its concurrency.pools.default_limit), its own broker databases and two workers on the ci profile's whole
    history (the folds' training and test days), so nothing is shared with the backfill's workers."""
    base = tmp_path_factory.mktemp("grid")
    home = base / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    broker, backend = (servers[k].rsplit("/", 1)[0] for k in ("KP_CELERY_BROKER", "KP_CELERY_BACKEND"))
    settings = {
        "DAGSTER_PG_URL": _database(servers["DAGSTER_PG_URL"], "dagster_grid"),
        "KP_CELERY_BROKER": f"{broker}/2",
        "KP_CELERY_BACKEND": f"{backend}/3",
        # the grid is the last fold's (its tau sweep): its foundations train from scratch, not from the first fold's
        # (a warm start would need that fold's foundations first; what this tests is the scheduling)
        "KP_WARM_START": "0",
    }
    env = {**_base_env(base / "warehouse", home, end=None), **settings}
    with _instance(home, settings["DAGSTER_PG_URL"]) as instance:  # create the schema once, before the processes
        instance.get_runs(limit=1)
    with _celery_workers(env, ("g1", "g2"), base) as (workers, logs):
        yield {
            "env": env,
            "home": home,
            "warehouse": base / "warehouse",
            "base": base,
            "logs": logs,
            "pg_url": settings["DAGSTER_PG_URL"],
        }


def _run_all(grid: dict, select: str, partitions: list[str], tmp_path: Path, storage, seen: dict) -> None:
    """One run per partition, all at once; the pool's slots polled until every run has ended."""
    runs = [
        _launch(grid["env"], select, key, None, tmp_path / f"run-{key.replace('|', '_')}.log") for key in partitions
    ]
    while any(proc.poll() is None for proc, _ in runs):
        info = storage.get_concurrency_info(TRAINING_POOL)
        seen["claimed"] = max(seen["claimed"], len(info.claimed_slots))
        seen["waiting"] = max(seen["waiting"], sum(s.assigned_timestamp is None for s in info.pending_steps))
        seen["steps"] |= {s.step_key for s in (*info.claimed_slots, *info.pending_steps)}
        time.sleep(0.2)
    for code, output in map(_wait, runs):
        assert code == 0, output[-4000:]


def _step_intervals(instance: dg.DagsterInstance) -> list[tuple[str, str, float, float]]:
    """(run id, step key, STEP_START time, STEP_SUCCESS time) of every step of every run of the instance."""
    types = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS}
    intervals = []
    for run in instance.get_runs():
        times: dict[str, dict] = {}
        for entry in instance.all_logs(run.run_id, of_type=types):
            times.setdefault(entry.step_key, {})[entry.dagster_event.event_type] = entry.timestamp
        for step, at in times.items():
            assert set(at) == types, (run.run_id, step, at)
            intervals.append(
                (run.run_id, step, at[dg.DagsterEventType.STEP_START], at[dg.DagsterEventType.STEP_SUCCESS])
            )
    return sorted(intervals, key=lambda i: i[2])


def test_one_fold_of_the_training_grid_runs_in_parallel_with_one_training_step_at_a_time(grid_cluster, tmp_path):
    fold, pretrain, finetune = _grid()
    assert len(pretrain) >= 2, "the ci profile's grid of seeds"
    warehouse, timings = grid_cluster["warehouse"], {}

    started = time.perf_counter()  # what training reads: tokens, labels, the window store (in-process)
    _in_process(tmp_path / "upstream_home", warehouse, GRID_UPSTREAM, end=None)
    timings["upstream (in-process)"] = time.perf_counter() - started

    seen = {"claimed": 0, "waiting": 0, "steps": set()}
    with _instance(grid_cluster["home"], grid_cluster["pg_url"]) as instance:
        storage = instance.event_log_storage
        assert storage.supports_global_concurrency_limits
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1  # deploy/postgres/dagster.yaml

        # The fold's foundations (one run per seed), then its policies (one run per seed and tau: the adapter,
        # its predictions and backtests), each stage's runs all at once on the two workers.
        started = time.perf_counter()
        _run_all(grid_cluster, f"{GRID_VARIANT}_foundation", pretrain, tmp_path, storage, seen)
        timings["foundations"] = time.perf_counter() - started
        started = time.perf_counter()
        select = ",".join(f"{GRID_VARIANT}_{a}" for a in ("adapter", "predictions", "backtests", "margin_backtests"))
        _run_all(grid_cluster, select, finetune, tmp_path, storage, seen)
        timings["adapters + evaluation"] = time.perf_counter() - started

        info = storage.get_concurrency_info(TRAINING_POOL)
        assert info.slot_count == 1 and info.using_default_limit, info  # concurrency.pools.default_limit
        assert not info.claimed_slots and not info.pending_steps, info  # every slot given back
        # The pool's row exists: what a first claim racing another, or a changed default_limit, meets. Dagster's
        # own initialization fails the run there on Postgres (dagster-io/dagster#33552); cluster.py's does not.
        assert storage.initialize_concurrency_limit_to_default(TRAINING_POOL)
        assert storage.get_concurrency_info(TRAINING_POOL).slot_count == 1
        # More GPUs: the documented command; an explicit limit replaces the default one.
        cmd = [str(BIN / "dagster"), "instance", "concurrency", "set", TRAINING_POOL, "2"]
        out = subprocess.run(cmd, cwd=ROOT, env=grid_cluster["env"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        info = storage.get_concurrency_info(TRAINING_POOL)
        assert info.slot_count == 2 and not info.using_default_limit, info
        intervals = _step_intervals(instance)
        runs = instance.get_runs()
        assert len(runs) == len(pretrain) + len(finetune)
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        for asset, keys in ((f"{GRID_VARIANT}_foundation", pretrain), (f"{GRID_VARIANT}_adapter", finetune)):
            records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
            assert sorted(r.partition_key for r in records) == sorted(keys), asset

    t0 = intervals[0][2]
    print(f"fold {fold}: {len(runs)} runs")
    for run_id, step, start, end in intervals:
        print(f"  {start - t0:7.1f} .. {end - t0:7.1f} s  {step:<28} run {run_id[:8]}")
    training = [i for i in intervals if i[1] in TRAINING_STEPS]
    others = [i for i in intervals if i[1] not in TRAINING_STEPS]
    assert len(training) == len(pretrain) + len(finetune), training
    # At most one training step in flight at any time: each starts after the one before it ended.
    for before, after in zip(training, training[1:]):
        assert after[2] >= before[3], f"training steps overlap: {before} and {after}"
    # The pool held training steps back (not only a busy worker), and only ever gave out its one slot.
    assert seen["claimed"] <= 1 and seen["waiting"] >= 1, seen
    # The runs' other steps never entered the pool: only training steps ever held or waited for its slot. (Whether
    # a prediction happens to run while another run's adapter trains is up to the two workers' timing: printed.)
    assert seen["steps"] and seen["steps"] <= set(TRAINING_STEPS), seen["steps"]
    beside = [(o[1], t[1]) for o in others for t in training if o[2] < t[3] and t[2] < o[3]]
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()}, "pool:", seen, "beside:", beside[:3])


def test_two_steps_claiming_the_pools_one_free_slot_at_once_get_it_once(servers, tmp_path):
    """The training pool's one slot, claimed by two steps at the same instant (a barrier), 200 times: at most one
    claim succeeds each time (``cluster.PostgresEventLogStorage._claim_concurrency_slot``). Dagster's own claim,
    a select and an update on an autocommit connection, is run the same way and its double claims are printed:
    the race behind two adapter steps that once trained at once."""
    import threading

    import dagster_postgres

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    with _instance(home, _database(servers["DAGSTER_PG_URL"], "dagster_claims")) as instance:
        storage = instance.event_log_storage
        assert storage.initialize_concurrency_limit_to_default(TRAINING_POOL)
        assert storage.get_concurrency_info(TRAINING_POOL).slot_count == 1

        def step(claim, barrier: threading.Barrier, results: list, k: int, i: int) -> None:
            barrier.wait()
            results[i] = claim(storage, TRAINING_POOL, f"run-{k}-{i}", f"adapter_{i}")

        def race(claim, rounds: int = 200) -> int:
            """How many rounds gave the one slot to both steps."""
            doubles = 0
            for k in range(rounds):
                barrier, results = threading.Barrier(2), [None, None]
                threads = [threading.Thread(target=step, args=(claim, barrier, results, k, i)) for i in (0, 1)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                claimed = [i for i in (0, 1) if results[i].name == "CLAIMED"]
                doubles += len(claimed) == 2
                assert claimed, results  # a free slot is never refused to both
                for i in (0, 1):
                    storage.free_concurrency_slot_for_step(f"run-{k}-{i}", f"adapter_{i}")
                assert not storage.get_concurrency_info(TRAINING_POOL).claimed_slots
            return doubles

        ours = race(type(storage)._claim_concurrency_slot)
        theirs = race(dagster_postgres.PostgresEventLogStorage._claim_concurrency_slot)
        print(f"rounds with the one slot claimed twice: ours 0 of 200 expected, got {ours}; Dagster's {theirs}")
        assert ours == 0
