"""Work run side by side on one machine: ``materialize`` runs a group of per-model (or per-tokenization) work as
chains in ``train.processes`` worker processes at once, each at ``cores // processes`` torch threads
(``training.trainer.training_threads``). The groups (``SIDE_BY_SIDE_GROUPS``): the foundations (by fit); the adapters
and the probes and rules, with the predictions and backtests partitioned like them (by policy); and the corpus (a
window store, its statistics and its features per tokenization, unpartitioned: one run a tokenization).

On 2 cores, two one-thread training steps do 1.26x the windows per second of one two-thread step, and two two-thread
steps 0.58x (oversubscribed): ``benchmarks/bench_step_parallelism.py``, docs/results/2026-11-27.md. The corpus and the
probes run at ~1.1 cores each (their reads and Python), so two at once use the second core. The demo and real
profiles run one chain a usable core at one thread each (``train.side_by_side`` None); ci and paper one at a time
(``KP_TRAIN_SIDE_BY_SIDE=2``, or ``auto``, changes it). A chain keeps its
partitions' order (fold by fold), so a warm-started foundation always finds its parent (fold k-1, same model and
seed) trained first; a chain reads no other chain's files (its model's or tokenization's assets only). Each worker
runs its partitions as ordinary runs of the instance (``dg.materialize``), tagged with the worker's pid (a killed
worker leaves an orphaned run like any other) and the invocation of the ``materialize`` that started it
(``timings --invocation``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kinematic_pipeline.config import Settings
from kinematic_pipeline.policy import KEY_SEPARATOR, parse_fit_key
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.variants import ALL_VARIANT_NAMES

TRAINING_GROUPS = frozenset({"pretrain", "finetune"})  # the groups whose steps claim the training pool
SIDE_BY_SIDE_GROUPS = TRAINING_GROUPS | {"baselines", "corpus"}  # the groups whose work splits into chains


@dataclass(frozen=True)
class Chain:
    """One model's (or tokenization's) assets of a group (``<variant>_...``, ``<tokenization>_...``) over one seed's
    (and tau's) partitions, fold by fold; ``(None,)`` for an unpartitioned group (one run)."""

    variant: str
    assets: tuple[str, ...]
    partitions: tuple[str | None, ...]


@dataclass(frozen=True)
class RunOutcome:
    """One partition's run as a worker ran it: its run id, and the failed step's error when it failed."""

    chain: Chain
    partition: str | None
    run_id: str
    error: str | None = None


def model_of(asset: str, variants: Sequence[str]) -> str | None:
    """The model (or tokenization) whose asset ``asset`` is (the longest name it starts with: ``rawgpt_fd_adapter``
    is RawGPT-FD's, ``raw_features`` the raw tokenization's)."""
    return max((v for v in variants if asset.startswith(f"{v}_")), key=len, default=None)


def owners() -> tuple[str, ...]:
    """What a chain can belong to: every model (transformers, rules, probes) and every tokenization."""
    return (*ALL_VARIANT_NAMES, *TOKENIZATIONS)


def chains(
    assets: Sequence[str],
    partitions: Sequence[str | None],
    variants: Sequence[str],
    seconds: Callable[[Chain], float] | None = None,
) -> list[Chain] | None:
    """A group's work as chains, one per model, seed and tau (partition keys ``<fold>@<seed>[|<tau>]``), each with
    its folds in the order given (``fit_partitions`` and ``policy_partitions`` list them fold by fold: a foundation
    warm-starts from the previous fold's), or one per model for an unpartitioned group (``partitions`` ``[None]``);
    None when an asset belongs to no model (its run cannot be split by model). Chains of different taus are
    independent (an adapter starts from its fold's foundation), so the adapters' work splits finely. The longest
    chains come first, so that the workers end together: by ``seconds`` (a chain's expected seconds, from the
    instance's history: ``chain_seconds``) when given, else by their partitions (the tau sweep's single folds last).
    (Longest first: a group's chains came in the order of its asset keys, so the longest family's chains could come
    last and leave a worker idle while the other trains the last of them alone.)"""
    by_model: dict[str, list[str]] = {}
    for asset in assets:
        model = model_of(asset, variants)
        if model is None:
            return None
        by_model.setdefault(model, []).append(asset)
    cost = seconds or (lambda chain: 0.0)
    if list(partitions) == [None]:
        return sorted((Chain(m, tuple(a), (None,)) for m, a in by_model.items()), key=lambda c: -cost(c))
    by_seed_and_tau: dict[tuple[int, str], list[str]] = {}
    for key in partitions:
        fit, _, tau = key.partition(KEY_SEPARATOR)
        by_seed_and_tau.setdefault((parse_fit_key(fit)[1], tau), []).append(key)
    work = [Chain(m, tuple(a), tuple(p)) for m, a in by_model.items() for p in by_seed_and_tau.values()]
    return sorted(work, key=lambda c: (-cost(c), -len(c.partitions)))  # the longest first: the short ones even the end


def step_seconds(instance, limit: int = 50_000) -> dict[str, float]:
    """The mean seconds of each step (op) key over the instance's latest ``limit`` successful steps: what a chain of
    those steps is expected to take (``chain_seconds``). Empty on a fresh instance."""
    import dagster as dg

    records = instance.get_event_records(
        dg.EventRecordsFilter(event_type=dg.DagsterEventType.STEP_SUCCESS), limit=limit, ascending=False
    )
    sums: dict[str, list[float]] = {}
    for record in records:
        event = record.event_log_entry.dagster_event
        total = sums.setdefault(event.step_key, [0.0, 0])
        total[0] += event.event_specific_data.duration_ms / 1000.0
        total[1] += 1
    return {step: seconds / count for step, (seconds, count) in sums.items()}


def chain_seconds(graph, history: dict[str, float]) -> Callable[[Chain], float]:
    """A chain's expected seconds: its partitions times the mean seconds of the steps (ops) of its assets."""
    import dagster as dg

    def seconds(chain: Chain) -> float:
        ops = {graph.assets_def_for_key(dg.AssetKey.from_user_string(a)).node_def.name for a in chain.assets}
        return len(chain.partitions) * sum(history.get(op, 0.0) for op in ops)

    return seconds


_DEFINITIONS: list = []  # a worker's definitions, built once from the first chain's settings (all are the command's)


def _definitions(settings: Settings):
    from kinematic_pipeline.definitions import build_definitions

    if not _DEFINITIONS:
        _DEFINITIONS.append(build_definitions(settings))
    return _DEFINITIONS[0]


def _run_chain(settings: Settings, chain: Chain, tags: dict[str, str], run_config: dict) -> list[RunOutcome]:
    """In a worker process: materialize the chain's assets for each of its partitions in order, stopping at a
    failure. The settings are the command's, its flags included (``--warehouse`` and the like override ``KP_*``)."""
    import dagster as dg

    from kinematic_pipeline.orchestration.partitions import PARTITION_TAG
    from kinematic_pipeline.orchestration.runs import INVOCATION_TAG, failure_line, owner_tags
    from kinematic_pipeline.training.trainer import configure_threads

    configure_threads(settings.train)  # the predictions and probes too (BLAS, OpenMP), not only the steps that train
    defs = _definitions(settings)
    names = ", ".join(chain.assets)
    outcomes = []
    with dg.DagsterInstance.get() as instance:
        for partition in chain.partitions:
            if _stopped():  # interrupted: the next fold is not started
                break
            partition_tag = {} if partition is None else {PARTITION_TAG: partition}
            result = dg.materialize(
                [*defs.assets, *defs.asset_checks],
                run_config=run_config,
                selection=[dg.AssetKey.from_user_string(a) for a in chain.assets],
                instance=instance,
                resources=defs.resources,
                tags={**tags, **owner_tags(int(tags[INVOCATION_TAG])), **partition_tag},
                partition_key=partition,
                raise_on_error=False,
            )
            error = None if result.success else failure_line(result)
            outcomes.append(RunOutcome(chain, partition, result.run_id, error))
            where = "" if partition is None else f" [{partition}]"
            print(f"{'FAILED' if error else 'materialized'} {names}{where} (run {result.run_id})")
            sys.stdout.flush()
            if error:
                break
    return outcomes


class Workers:
    """The worker processes of one ``materialize`` command: spawned at its first group that runs side by side (up to
    ``train.processes``, as chains need them) and kept for the next groups. A spawn imports torch and Dagster and
    builds the definitions: ~12 s at the start of each of the demo's five such groups on 2 cores, a minute of its ten.
    ``close`` (leaving its ``with``) shuts them down; ``close(cancel=True)`` tells them to stop first."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._pool = None
        self._stop = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close(cancel=exc[0] is not None)

    def pool(self):
        """The process pool and its stop event, started on first use."""
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("spawn")  # never fork a process holding Dagster's and torch's threads
            self._stop = context.Event()
            self._pool = ProcessPoolExecutor(
                max_workers=max(1, self.settings.train.processes),
                mp_context=context,
                initializer=_keep_stop,
                initargs=(self._stop,),
            )
        return self._pool, self._stop

    def close(self, cancel: bool = False) -> None:
        if self._pool is None:
            return
        if cancel:
            self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=cancel)
        self._pool = None


def run_side_by_side(
    settings: Settings, work: Sequence[Chain], tags: dict[str, str], run_config: dict, run=None, workers=None
) -> list[RunOutcome]:
    """Run the chains in up to ``train.processes`` spawned processes at once (``workers``', the command's, when given;
    else a pool of their own, closed at the end), each taking the next chain when its last is done; every partition's
    outcome, a failed chain's last. ``run`` (a picklable function of the same arguments as ``_run_chain``, the
    default) is what a worker runs for a chain.

    Interrupted (Ctrl-C: the workers, in the same process group, get the signal too and fail their runs), nothing
    more starts: the queue is cancelled, and a worker told to stop starts neither a chain already handed to it nor
    its chain's next partition."""
    own = workers is None
    workers = workers or Workers(settings)
    pool, _ = workers.pool()
    try:
        futures = [pool.submit(_chain_unless_stopped, run or _run_chain, settings, c, tags, run_config) for c in work]
        return [outcome for future in futures for outcome in future.result()]
    except BaseException:
        workers.close(cancel=True)
        raise
    finally:
        if own:
            workers.close()


def planned_chains(
    settings: Settings, graph, keys, runs: list[dict[str, str]], history: dict[str, float] | None = None
) -> list[Chain] | None:
    """The chains a planned group of ``materialize`` runs side by side in, or None: a group of ``SIDE_BY_SIDE_GROUPS``
    (foundations; adapters, probes and rules with what is partitioned like them; the corpus), split by model or
    tokenization, with ``train.processes`` > 1. A planned group holding such assets splits with the assets planned
    beside them (the adapters' predictions and backtests, of the evaluation group): ``chains`` refuses a group whose
    assets do not all belong to a model or tokenization. ``history`` (``step_seconds``) orders them longest first."""
    from kinematic_pipeline.orchestration.partitions import PARTITION_TAG

    splits = any(graph.get(k).group_name in SIDE_BY_SIDE_GROUPS for k in keys)
    if settings.train.processes < 2 or not splits:
        return None
    seconds = chain_seconds(graph, history) if history else None
    if runs == [{}]:  # unpartitioned: one run a chain
        return chains([k.to_user_string() for k in keys], [None], owners(), seconds)
    if not all(PARTITION_TAG in tags for tags in runs):
        return None
    return chains([k.to_user_string() for k in keys], [t[PARTITION_TAG] for t in runs], owners(), seconds)


_WORKER: dict = {
    "stop": None,
    "interrupted": False,
    "parent": None,
}  # a worker's stop event (set by run_side_by_side), its own SIGINT, and the pid of the process that started it


def _keep_stop(event) -> None:
    """A worker's initializer: keep the stop event, note a SIGINT of its own (a Ctrl-C reaches the whole process
    group, often before the parent has set the event) before raising it as usual, and exit once orphaned: a worker
    waiting for its next chain never learns that the ``materialize`` that started it was killed (``kill -9``), and the
    command keeps its workers between groups; its run, if one was open, is failed by the next ``materialize``."""
    import os
    import signal
    import threading
    import time

    _WORKER["stop"] = event
    _WORKER["parent"] = os.getppid()

    def interrupted(signum, frame):
        _WORKER["interrupted"] = True
        raise KeyboardInterrupt

    def watch() -> None:
        while os.getppid() == _WORKER["parent"]:
            time.sleep(1.0)
        os._exit(1)

    signal.signal(signal.SIGINT, interrupted)
    threading.Thread(target=watch, name="orphaned-worker-watch", daemon=True).start()


def _stopped() -> bool:
    """Told to stop, interrupted, or orphaned (the ``materialize`` that started the worker was killed: nothing would
    read what it does next)."""
    import os

    stop, parent = _WORKER["stop"], _WORKER["parent"]
    orphaned = parent is not None and os.getppid() != parent
    return _WORKER["interrupted"] or orphaned or (stop is not None and stop.is_set())


def _chain_unless_stopped(run, settings: Settings, chain: Chain, tags: dict[str, str], run_config: dict):
    return [] if _stopped() else run(settings, chain, tags, run_config)
