"""Work side by side (orchestration/side_by_side.py): a group's chains (one per model or tokenization, seed and tau,
folds in order) and the torch threads of a step, which follow from the settings alone (a fit's bytes depend on them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.orchestration.side_by_side import (
    SIDE_BY_SIDE_GROUPS,
    Chain,
    Workers,
    chains,
    model_of,
    owners,
    planned_chains,
    run_side_by_side,
)
from kinematic_pipeline.training.trainer import training_threads


def test_a_chain_is_one_models_assets_over_one_seeds_and_taus_folds_in_order():
    fits = ["2021@1234", "2021@1235", "2022@1234", "2022@1235"]  # fit_partitions: fold by fold
    variants = ("splinegpt", "rawgpt_fd", "rawgpt")
    assert chains(["rawgpt_foundation", "rawgpt_fd_foundation"], fits, variants) == [
        Chain("rawgpt", ("rawgpt_foundation",), ("2021@1234", "2022@1234")),
        Chain("rawgpt", ("rawgpt_foundation",), ("2021@1235", "2022@1235")),
        Chain("rawgpt_fd", ("rawgpt_fd_foundation",), ("2021@1234", "2022@1234")),
        Chain("rawgpt_fd", ("rawgpt_fd_foundation",), ("2021@1235", "2022@1235")),
    ]
    policies = ["2021@7|0.01", "2021@7|0.02", "2022@7|0.01", "2022@7|0.02"]
    group = ["splinegpt_adapter", "rawgpt_fd_predictions", "splinegpt_predictions", "rawgpt_fd_adapter"]
    spline, fd = ("splinegpt_adapter", "splinegpt_predictions"), ("rawgpt_fd_predictions", "rawgpt_fd_adapter")
    assert chains(group, policies, variants) == [  # a chain per model and tau (one seed here), its folds in order
        Chain("splinegpt", spline, ("2021@7|0.01", "2022@7|0.01")),
        Chain("splinegpt", spline, ("2021@7|0.02", "2022@7|0.02")),
        Chain("rawgpt_fd", fd, ("2021@7|0.01", "2022@7|0.01")),
        Chain("rawgpt_fd", fd, ("2021@7|0.02", "2022@7|0.02")),
    ]
    sweep = ["2021@7|0.01", "2022@7|0.01", "2022@7|0.02"]  # a tau swept on the last fold only
    assert [c.partitions for c in chains(["splinegpt_adapter"], sweep, variants)] == [
        tuple(sweep[:2]),
        tuple(sweep[2:]),
    ]
    assert [len(c.partitions) for c in chains(["splinegpt_adapter"], sweep[::-1], variants)] == [2, 1]  # long first
    assert chains(["splinegpt_adapter", "pooled_backtests"], policies, variants) is None  # not one model's: no split
    assert model_of("rawgpt_fd_margin_backtests", variants) == "rawgpt_fd" and model_of("verdict", variants) is None


def test_an_unpartitioned_group_is_one_run_a_tokenization():
    corpus = ["fd_window_store", "spline_window_store", "fd_corpus_stats", "spline_features", "raw_features"]
    assert chains(corpus, [None], owners()) == [
        Chain("fd", ("fd_window_store", "fd_corpus_stats"), (None,)),
        Chain("spline", ("spline_window_store", "spline_features"), (None,)),
        Chain("raw", ("raw_features",), (None,)),
    ]
    assert model_of("rawgpt_fd_adapter", owners()) == "rawgpt_fd" and model_of("lr_raw_probe", owners()) == "lr_raw"


def test_every_group_that_runs_side_by_side_splits_whole_into_chains():
    """An asset of such a group that belonged to no model or tokenization would run the whole group one at a time."""
    from kinematic_pipeline.definitions import build_definitions

    graph = build_definitions(load_settings("ci", env={})).resolve_asset_graph()
    groups: dict[str, list[str]] = {}
    for key in graph.get_all_asset_keys():
        groups.setdefault(graph.get(key).group_name, []).append(key.to_user_string())
    assert SIDE_BY_SIDE_GROUPS <= set(groups)
    for group in sorted(SIDE_BY_SIDE_GROUPS):
        work = chains(sorted(groups[group]), [None], owners())
        assert work is not None and len(work) > 1, group
        assert sorted(a for c in work for a in c.assets) == sorted(groups[group])


def test_the_threads_of_a_training_step_follow_from_the_settings_not_from_the_runs_at_hand():
    cores = len(os.sched_getaffinity(0))
    ci = load_settings("ci", env={})
    assert ci.train.side_by_side == 1 and training_threads(ci.train) == cores
    two = load_settings("ci", env={"KP_TRAIN_SIDE_BY_SIDE": "2"})
    assert training_threads(two.train) == max(1, cores // 2)
    assert training_threads(load_settings("ci", env={"KP_TRAIN_SIDE_BY_SIDE": "2", "KP_TRAIN_THREADS": "3"}).train) == 3
    for var in ("KP_TRAIN_SIDE_BY_SIDE", "KP_TRAIN_THREADS"):
        with pytest.raises(ValueError, match=f"{var}='0': expected a positive integer"):
            load_settings("ci", env={var: "0"})


@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_demo_and_real_run_one_chain_a_core_at_one_thread_on_any_machine(monkeypatch, cores):
    """Every core busy by default (issue 56): demo and real run as many chains at once as the machine has usable
    cores, each at one thread, so that a fit's bytes are those of one thread whatever the machine; ci and paper stay
    one at a time (ci's golden numbers were written at every core)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    env = {"KP_SOURCE_PATH": "bars.parquet"}  # the real and paper profiles read a file (never opened here)
    for profile in ("demo", "real"):
        train = load_settings(profile, env=env).train
        assert (train.side_by_side, train.processes, training_threads(train)) == (None, cores, 1), profile
    for profile in ("ci", "paper"):
        train = load_settings(profile, env=env).train
        assert (train.processes, training_threads(train)) == (1, cores), profile
    auto = load_settings("ci", env={"KP_TRAIN_SIDE_BY_SIDE": "auto"}).train
    assert (auto.processes, training_threads(auto)) == (cores, 1)
    one = load_settings("demo", env={"KP_TRAIN_SIDE_BY_SIDE": "1"}).train
    assert (one.processes, training_threads(one)) == (1, cores)


def pid_chain(settings, chain, tags, run_config):
    """A worker's chain for the test below: records which process ran it."""
    import time

    Path(tags["out"], chain.partitions[0]).write_text(str(os.getpid()))
    time.sleep(0.5)  # long enough that both workers take a chain
    return []


@pytest.mark.slow  # spawns workers that import torch: 14-18 s (the nightly lane runs this file's slow tests)
def test_the_groups_of_one_command_share_its_worker_processes(tmp_path):
    """No spawn paid twice: the side-by-side groups of one ``materialize`` (foundations, probes, adapters, ...) run in
    the same worker processes (each spawn imports torch and Dagster and builds the definitions), closed at the end."""
    settings = load_settings("ci", env={"KP_TRAIN_SIDE_BY_SIDE": "2"})
    pids = []
    with Workers(settings) as workers:
        for group in ("foundations", "adapters"):
            out = tmp_path / group
            out.mkdir()
            work = [Chain("splinegpt", ("a",), (f"{group}{i}",)) for i in range(4)]
            assert run_side_by_side(settings, work, {"out": str(out)}, {}, run=pid_chain, workers=workers) == []
            pids.append({p.read_text() for p in out.iterdir()})
        pool, _ = workers.pool()
        processes = list(pool._processes.values())
    assert len(pids[0]) == 2 and pids[1] == pids[0]
    assert str(os.getpid()) not in pids[0]
    assert all(not p.is_alive() for p in processes)


@pytest.mark.slow  # spawns workers that import torch: 14-18 s (the nightly lane runs this file's slow tests)
def test_a_worker_whose_command_was_killed_exits(tmp_path):
    """``kill -9`` of ``materialize`` leaves its workers orphaned; one waiting for its next chain (the command keeps
    them between groups) would wait forever. It exits within seconds."""
    import signal
    import subprocess
    import sys
    import time

    script = f"""
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.orchestration.side_by_side import Chain, Workers, run_side_by_side
from kinematic_pipeline_tests.unit.test_side_by_side import pid_chain
settings = load_settings("ci", env={{"KP_TRAIN_SIDE_BY_SIDE": "1"}})
workers = Workers(settings)
run_side_by_side(settings, [Chain("splinegpt", ("a",), ("p",))], {{"out": {str(tmp_path)!r}}}, {{}}, pid_chain, workers)
print("ready", flush=True)
import time
time.sleep(60)
"""
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert command.stdout.readline().strip() == "ready"
    worker = int((tmp_path / "p").read_text())
    os.kill(command.pid, signal.SIGKILL)
    command.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]


def sleeping_chain(settings, chain, tags, run_config):
    """A worker's chain for the test below: marks that it started, then takes a while (a fine-tuning run's stand-in)."""
    import pathlib
    import time

    pathlib.Path(tags["out"], chain.partitions[0]).write_text("started")
    time.sleep(3)
    return []


@pytest.mark.slow
def test_an_interrupted_side_by_side_run_starts_no_further_chain(tmp_path):
    """Ctrl-C on ``materialize`` reaches the whole process group: the workers' chains fail, and the chains still
    queued are never started (before: the pool drained its queue, so the workers trained on after the interrupt)."""
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.orchestration.side_by_side import Chain, run_side_by_side
from kinematic_pipeline_tests.unit.test_side_by_side import sleeping_chain
settings = load_settings("ci", env={{}})
work = [Chain("rawgpt", ("rawgpt_adapter",), (f"chain{{i}}",)) for i in range(6)]
run_side_by_side(settings, work, {{"out": {str(tmp_path)!r}}}, {{}}, run=sleeping_chain)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("chain*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.glob("chain*")), "no chain started"
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    proc.wait(timeout=30)
    time.sleep(4)  # a chain started after the interrupt would have marked itself by now
    started = sorted(p.name for p in tmp_path.glob("chain*"))
    assert proc.returncode != 0 and started == ["chain0"], started


def test_a_worker_whose_materialize_was_killed_starts_nothing_more(monkeypatch):
    """A worker outliving its ``materialize`` (killed, not interrupted: no stop event is set) starts no further
    partition: its parent is no longer the process that started it."""
    from kinematic_pipeline.orchestration import side_by_side

    monkeypatch.setitem(side_by_side._WORKER, "parent", os.getppid())
    assert not side_by_side._stopped()
    monkeypatch.setitem(side_by_side._WORKER, "parent", os.getppid() + 1)  # reparented: the starter is gone
    assert side_by_side._stopped()


def test_every_planned_run_of_the_whole_dag_that_holds_a_side_by_side_group_splits():
    """What ``materialize`` plans, not the groups alone: the adapters' run also holds their predictions and backtests
    (the evaluation group), and it must split all the same (a run at 5c02da5 trained every adapter one at a time)."""
    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.assets_scaling import off_dag_groups
    from kinematic_pipeline.orchestration.partitions import PARTITION_TAG
    from kinematic_pipeline.orchestration.plan import plan_runs

    settings = load_settings("ci", env={"KP_TRAIN_SIDE_BY_SIDE": "2"})
    defs = build_definitions(settings)
    graph = defs.resolve_asset_graph()
    split = set()
    for keys in plan_runs(defs, None, None, off_dag_groups(settings)):
        if not any(graph.get(k).group_name in SIDE_BY_SIDE_GROUPS for k in keys):
            continue
        partitions = graph.get(keys[0]).partitions_def
        assert not isinstance(partitions, dg.TimeWindowPartitionsDefinition)
        runs = [{}] if partitions is None else [{PARTITION_TAG: k} for k in partitions.get_partition_keys()]
        work = planned_chains(settings, graph, keys, runs)
        names = [k.to_user_string() for k in keys]
        assert work is not None and len(work) > 1, names
        assert {a for c in work for a in c.assets} == set(names)
        split |= set(names)
    assert {"splinegpt_adapter", "splinegpt_predictions", "splinegpt_backtests", "splinegpt_foundation"} <= split
    assert {"lr_spline_probe", "spline_window_store"} <= split


def test_the_longest_chains_go_first_by_the_instances_history_of_their_steps():
    """Three long SplineGPT chains last would leave one of two workers idle for one of them: with a history of step
    times they go first; without one the order is the partitions' (the longest chains first)."""
    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.side_by_side import chain_seconds, step_seconds

    fits = ["2021@1234", "2021@1235", "2022@1234", "2022@1235"]
    assets = ["patchtst_foundation", "splinegpt_foundation"]
    plain = chains(assets, fits, owners())
    assert [c.variant for c in plain] == ["patchtst", "patchtst", "splinegpt", "splinegpt"]
    graph = build_definitions(load_settings("ci", env={})).resolve_asset_graph()
    history = {"splinegpt_foundation": 600.0, "patchtst_foundation": 100.0}
    timed = chains(assets, fits, owners(), chain_seconds(graph, history))
    assert [c.variant for c in timed] == ["splinegpt", "splinegpt", "patchtst", "patchtst"]
    assert chain_seconds(graph, history)(timed[0]) == 1200.0  # two folds of 600 s
    backtests = Chain("splinegpt", ("splinegpt_backtests", "splinegpt_margin_backtests"), ("2021@1|0.01",))
    assert chain_seconds(graph, {"splinegpt_backtesting": 30.0})(backtests) == 30.0  # one op, counted once

    @dg.asset
    def tiny() -> int:
        return 1

    with dg.DagsterInstance.ephemeral() as instance:
        assert step_seconds(instance) == {}
        dg.materialize([tiny], instance=instance)
        dg.materialize([tiny], instance=instance)
        seconds = step_seconds(instance)
        assert set(seconds) == {"tiny"} and seconds["tiny"] >= 0.0
