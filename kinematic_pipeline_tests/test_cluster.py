"""More than one process for real: PostgreSQL instance storage, a Redis broker and two Celery workers
(`scripts/servers.sh`, deploy/postgres/dagster.yaml, deploy/celery/), backfilling raw_ohlcv and the three token
assets over 121 sessions; one worker's step process is SIGKILLed mid-backfill.

Checks: every shard is byte-identical (sha256) to the default single-process path (in-process runs on the
SQLite instance, another warehouse); Postgres holds exactly one materialization per partition and asset; the
kill leaves no partial shard visible (every *.parquet reads; leftovers are `.<name>.*.tmp` only) and re-running
the failed partitions writes the same bytes. The servers and workers are stopped at the end, also on failure.

    pytest -m e2e kinematic_pipeline_tests/test_cluster.py     (as root on Debian: apt-get installs
                                                                          postgresql / redis-server if missing)
"""

from __future__ import annotations

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
from pathlib import Path

import dagster as dg
import psutil
import pyarrow.parquet as pq
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # dagster, dagster-celery and celery of this interpreter's environment
FIRST, LAST = "2021-01-04", "2021-06-25"  # 121 sessions
HALVES = ((FIRST, "2021-03-31"), ("2021-04-01", LAST))  # 61 + 60 sessions, one run each
TOKENS = ("spline_tokens", "fd_tokens", "raw_tokens")
ASSETS = ("raw_ohlcv", *TOKENS)

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


def _base_env(warehouse: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(warehouse),
        KP_END_DATE=LAST,
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

    workers: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}
    try:
        for name in ("w1", "w2"):
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
        yield {"env": env, "home": home, "warehouse": base / "warehouse", "workers": workers, "logs": logs}
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
        os.environ.pop("DAGSTER_PG_URL", None)


def _launch(env: dict[str, str], select: str, start: str, end: str, log: Path) -> tuple[subprocess.Popen, Path]:
    cmd = [str(BIN / "dagster"), "asset", "materialize", "-f", str(ROOT / "deploy/celery/code_location.py")]
    cmd += ["-c", str(ROOT / "deploy/celery/run_config.yaml"), "--select", select]
    cmd += ["--partition-range", f"{start}...{end}"]
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
        if "dagster" not in p.parts
    }


def _token_shards(warehouse: Path) -> int:
    return sum(len(list((warehouse / kind).glob("*.parquet"))) for kind in TOKENS)


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


def _reference_shards(tmp_path: Path) -> dict[str, str]:
    """The default path: `python -m kinematic_pipeline materialize`, in-process runs, SQLite instance."""
    home = tmp_path / "ref_home"
    home.mkdir()
    text = (ROOT / "dagster.yaml").read_text().replace("base_dir: warehouse/", f"base_dir: {home}/")
    (home / "dagster.yaml").write_text(text)
    env = _base_env(tmp_path / "ref_warehouse", home)
    cmd = [
        sys.executable,
        "-m",
        "kinematic_pipeline",
        "materialize",
        "--select",
        " or ".join(f"key:{a}" for a in ASSETS),
    ]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
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

    # No partial shard is visible: every *.parquet reads; anything else is a `.<name>.*.tmp` leftover.
    for path in warehouse.rglob("*"):
        if path.is_file() and "dagster" not in path.parts and path.parent.name != "warehouse":
            if path.suffix == ".parquet":
                pq.read_table(path)
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
