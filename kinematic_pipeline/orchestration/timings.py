"""Where a run's time goes: each step's wall time and the share of data preparation, training, evaluation and
bookkeeping, read back from the Dagster run and event storage (``python -m kinematic_pipeline timings``).

A step's time runs from its ``STEP_START`` event to its ``STEP_SUCCESS`` or ``STEP_FAILURE``. The shares divide the
run's wall time (``RUN_START`` to the run's end): each instant goes to the steps running then, split equally between
them when several run at once (the multiprocess executor), and an instant with no step running (Dagster's own start
and end of a run, the planning between steps, the gaps between the runs of one ``materialize``) is bookkeeping; so
the four shares sum to 100%. A step's category comes from its name through ``CATEGORIES``, the one table.

``--invocation`` takes every run of the ``materialize`` command that started the chosen run (the runs carrying its
invocation and host tags, ``runs.owner_tags``, its side-by-side training workers' included): the whole DAG is one run
per partitioning and per static partition.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DATA, TRAINING, EVALUATION, BOOKKEEPING = "data preparation", "training", "evaluation", "bookkeeping"
CATEGORY_ORDER = (DATA, TRAINING, EVALUATION, BOOKKEEPING)

# Step name (Dagster's op name: the asset's name, or the multi-asset's) -> category; the first pattern that matches.
# A step matching none (asset checks, anything added later) is bookkeeping, as is the time between steps.
CATEGORIES: tuple[tuple[str, str], ...] = (
    # data preparation: ingest, alpha, tokens, labels, window stores, corpus statistics, probe features
    ("raw_ohlcv", DATA),
    ("alpha_estimates", DATA),
    ("tokenize_windows", DATA),
    ("*_tokens", DATA),
    ("labels", DATA),
    ("window_stores", DATA),
    ("*_window_store", DATA),
    ("corpus_stats", DATA),
    ("*_corpus_stats", DATA),
    ("*_features", DATA),
    # training: foundations, adapters, probes, the scaling curves
    ("*_foundation", TRAINING),
    ("*_adapter", TRAINING),
    ("*_probe", TRAINING),
    ("scaling_curves", TRAINING),
    # evaluation: predictions, backtests, the pooled records, the verdict
    ("*_predictions", EVALUATION),
    ("*_backtesting", EVALUATION),
    ("*_backtests", EVALUATION),
    ("pooled_backtests", EVALUATION),
    ("verdict", EVALUATION),
    # bookkeeping: the report, its tables and figures
    ("report", BOOKKEEPING),
    ("paper_tables", BOOKKEEPING),
    ("figures", BOOKKEEPING),
)


def category(step_key: str) -> str:
    """The category of a step (``CATEGORIES``; bookkeeping when no pattern matches)."""
    return next((cat for pattern, cat in CATEGORIES if fnmatch.fnmatchcase(step_key, pattern)), BOOKKEEPING)


@dataclass(frozen=True)
class StepTime:
    run_id: str
    partition: str | None
    step: str
    start: float  # unix seconds
    end: float
    status: str  # SUCCESS | FAILURE | UNFINISHED

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def category(self) -> str:
        return category(self.step)


@dataclass(frozen=True)
class RunTimes:
    """One run (or the runs of one ``materialize``): its wall interval and its steps."""

    run_ids: tuple[str, ...]
    status: str
    start: float
    end: float
    steps: tuple[StepTime, ...]

    @property
    def wall_seconds(self) -> float:
        return self.end - self.start

    def shares(self) -> dict[str, float]:
        """Seconds of the wall time per category (``CATEGORY_ORDER``): concurrent steps split an instant equally,
        an instant with no step is bookkeeping; the values sum to the wall time."""
        return category_seconds(self.steps, self.start, self.end)


def category_seconds(steps: Iterable[StepTime], start: float, end: float) -> dict[str, float]:
    """The seconds of [start, end] per category: a sweep over the step boundaries, each elementary interval split
    equally between the steps running in it, bookkeeping where none runs."""
    out = dict.fromkeys(CATEGORY_ORDER, 0.0)
    spans = [(max(s.start, start), min(s.end, end), s.category) for s in steps]
    spans = [s for s in spans if s[1] > s[0]]
    cuts = sorted({start, end, *(a for a, _, _ in spans), *(b for _, b, _ in spans)})
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= lo:
            continue
        running = [cat for a, b, cat in spans if a <= lo and b >= hi]
        if not running:
            out[BOOKKEEPING] += hi - lo
        for cat in running:
            out[cat] += (hi - lo) / len(running)
    return out


def percentages(seconds: dict[str, float], digits: int = 1) -> dict[str, float]:
    """Shares in percent rounded to ``digits`` so that they sum to exactly 100 (largest remainders)."""
    total = sum(seconds.values())
    if total <= 0:
        return {k: (100.0 if k == BOOKKEEPING else 0.0) for k in seconds}
    unit = 10**digits
    exact = {k: v / total * 100 * unit for k, v in seconds.items()}
    floors = {k: int(v) for k, v in exact.items()}
    left = 100 * unit - sum(floors.values())
    for k in sorted(exact, key=lambda k: exact[k] - floors[k], reverse=True)[:left]:
        floors[k] += 1
    return {k: floors[k] / unit for k in seconds}


# --- reading the instance ----------------------------------------------------------------------------------------

_STEP_END = {"STEP_SUCCESS": "SUCCESS", "STEP_FAILURE": "FAILURE"}
_RUN_END = {"RUN_SUCCESS", "RUN_FAILURE", "RUN_CANCELED"}


def run_times(instance, run_ids: Sequence[str]) -> RunTimes:
    """The steps and wall interval of ``run_ids`` (one run, or the runs of one ``materialize``) from the event log."""
    import dagster as dg

    kinds = {name: dg.DagsterEventType[name] for name in ("RUN_START", *_RUN_END, "STEP_START", *_STEP_END)}
    by_kind = {kind: name for name, kind in kinds.items()}
    steps: list[StepTime] = []
    starts, ends, statuses = [], [], []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is None:
            raise LookupError(f"no run {run_id} in the Dagster instance at DAGSTER_HOME")
        partition = run.tags.get("dagster/partition")
        if partition is None and "dagster/asset_partition_range_start" in run.tags:
            partition = (
                f"{run.tags['dagster/asset_partition_range_start']}..{run.tags['dagster/asset_partition_range_end']}"
            )
        opened: dict[str, float] = {}
        first = last = None
        for entry in instance.all_logs(run_id, of_type=set(kinds.values())):  # not a backfill's thousands of others
            event = entry.dagster_event
            if event is None:
                continue
            kind, ts = by_kind.get(event.event_type), entry.timestamp
            first = ts if first is None else min(first, ts)
            last = ts if last is None else max(last, ts)
            if kind == "STEP_START" and entry.step_key:
                opened[entry.step_key] = ts
            elif kind in _STEP_END and entry.step_key in opened:
                steps.append(
                    StepTime(run_id, partition, entry.step_key, opened.pop(entry.step_key), ts, _STEP_END[kind])
                )
        if first is None:
            continue  # a run with no event (never started)
        for key, ts in opened.items():  # a step still running (or whose process died): up to the last event
            steps.append(StepTime(run_id, partition, key, ts, last, "UNFINISHED"))
        record = instance.get_run_record_by_id(run_id)
        start = record.start_time if record is not None and record.start_time else first
        end = record.end_time if record is not None and record.end_time else last
        starts.append(min(start, first))
        ends.append(max(end, last))
        statuses.append(run.status.value)
    if not starts:
        raise LookupError(f"run(s) {', '.join(run_ids)} hold no events: not started")
    status = "SUCCESS" if all(s == "SUCCESS" for s in statuses) else ", ".join(sorted(set(statuses)))
    return RunTimes(tuple(run_ids), status, min(starts), max(ends), tuple(steps))


def chosen_runs(instance, run_id: str | None = None, invocation: bool = False) -> list[str]:
    """The run ``run_id`` (default: the latest run in the instance), or with ``invocation`` every run that
    ``materialize`` command started (its pid and host tags), oldest first."""
    import dagster as dg

    from kinematic_pipeline.orchestration.runs import HOST_TAG, INVOCATION_TAG, PID_TAG

    if run_id is None:
        latest = instance.get_runs(limit=1)
        if not latest:
            raise LookupError("the Dagster instance at DAGSTER_HOME holds no run: materialize first")
        run = latest[0]
    else:
        run = instance.get_run_by_id(run_id)
        if run is None:
            raise LookupError(f"no run {run_id} in the Dagster instance at DAGSTER_HOME")
    if not invocation:
        return [run.run_id]
    if PID_TAG not in run.tags:
        raise LookupError(
            f"run {run.run_id} was not started by `python -m kinematic_pipeline materialize` (no pid tag)"
        )
    by = INVOCATION_TAG if INVOCATION_TAG in run.tags else PID_TAG  # runs from before the invocation tag: the pid
    tags = {by: run.tags[by], HOST_TAG: run.tags.get(HOST_TAG, "")}
    return [r.run_id for r in instance.get_runs(dg.RunsFilter(tags=tags), ascending=True)]


def format_timings(times: RunTimes) -> str:
    """The table ``timings`` prints: every step by time, longest first, then the four shares of the wall time."""
    runs = times.run_ids[0] if len(times.run_ids) == 1 else f"{len(times.run_ids)} runs ({times.run_ids[0]} ...)"
    lines = [f"run {runs}: {times.status}, wall {times.wall_seconds:.1f} s, {len(times.steps)} steps", ""]
    rows = sorted(times.steps, key=lambda s: (-s.seconds, s.step, s.partition or ""))
    width = max([len("step"), *(len(s.step) for s in rows)])
    pwidth = max([len("partition"), *(len(s.partition or "-") for s in rows)])
    lines.append(f"{'step':<{width}}  {'partition':<{pwidth}}  {'seconds':>9}  {'category':<16}  status")
    for s in rows:
        lines.append(
            f"{s.step:<{width}}  {s.partition or '-':<{pwidth}}  {s.seconds:>9.1f}  {s.category:<16}  {s.status}"
        )
    seconds = times.shares()
    shares = percentages(seconds)
    lines += ["", f"{'category':<16}  {'seconds':>9}  {'share':>7}"]
    for cat in CATEGORY_ORDER:
        lines.append(f"{cat:<16}  {seconds[cat]:>9.1f}  {shares[cat]:>6.1f}%")
    lines.append(f"{'total':<16}  {sum(seconds.values()):>9.1f}  {sum(shares.values()):>6.1f}%")
    return "\n".join(lines)


def print_timings(run_id: str | None = None, invocation: bool = False) -> str:
    """``format_timings`` of the chosen run(s) of the instance at DAGSTER_HOME."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        return format_timings(run_times(instance, chosen_runs(instance, run_id, invocation)))
