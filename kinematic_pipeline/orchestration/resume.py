"""``materialize --resume``: finish a ``materialize`` that was stopped (killed, interrupted, the machine taken back)
without paying again for what it finished.

A unit of the plan is one run: a planned group's assets over one partition (or one trading-day range, or none),
or a side-by-side chain's assets over one of its partitions. ``--resume`` takes the latest ``materialize`` of this
host in the instance (the invocation tag of ``runs.owner_tags``; a resumed command's runs carry the invocation they
resume, so a second resume continues the first): a unit that a successful run of it materialized whole, every asset
of the unit at that partition, is skipped; every other unit runs, in the plan's order, as it would have. The skipped
units were made in dependency order by the same settings and stage code (the runs carry a fingerprint of both,
``SETTINGS_TAG``, and a resume refuses another), and a shard is a function of the settings alone, so the warehouse
ends as one uninterrupted command would have left it. The run that was killed mid-step was failed by
``fail_orphaned_runs`` and runs again whole (shards are written atomically: a half-written one is never read).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kinematic_pipeline.config.fingerprint import fingerprint
from kinematic_pipeline.orchestration.partitions import PARTITION_TAG, RANGE_END, RANGE_START
from kinematic_pipeline.orchestration.runs import HOST_TAG, INVOCATION_TAG

SETTINGS_TAG = "kinematic_pipeline/settings"  # the fingerprint of the resolved settings and the stages' code versions
RESUMES_TAG = "kinematic_pipeline/resumes"  # on a resumed command's runs: the invocation it resumes

Unit = tuple[frozenset[str], str]  # (asset names, partition key | "<first>..<last>" | "")


def unit(assets: Iterable[str], tags: Mapping[str, str]) -> Unit:
    """A run's unit from its asset names and its tags (a partition, a trading-day range, or neither)."""
    if tags.get(PARTITION_TAG):
        where = tags[PARTITION_TAG]
    elif tags.get(RANGE_START):
        where = f"{tags[RANGE_START]}..{tags[RANGE_END]}"
    else:
        where = ""
    return frozenset(assets), where


@dataclass(frozen=True)
class Resume:
    """The invocation a command resumes and the (asset, partition) pairs its successful runs materialized."""

    invocation: str
    done: frozenset[tuple[str, str]]  # (asset name, partition key | range | "")
    checked: bool = True  # False: the stopped command's runs carry no fingerprint (made before --resume existed)

    def finished(self, assets: Iterable[str], tags: Mapping[str, str]) -> bool:
        names, where = unit(assets, tags)
        return all((name, where) in self.done for name in names)

    def tags(self) -> dict[str, str]:
        """The tags a resumed command's runs carry beside their own (a later resume finds them)."""
        return {RESUMES_TAG: self.invocation}

    def left(self, assets: Sequence[str], runs: list[dict[str, str]], chains: list | None):
        """A planned group's runs (the tags of each) and side-by-side chains (None: the group runs in this process)
        with the finished ones dropped, a chain's finished partitions dropped from it; says how many it skipped."""
        if chains is None:
            kept = [tags for tags in runs if not self.finished(assets, tags)]
            total, left = len(runs), len(kept)
        else:
            kept, total = [], sum(len(c.partitions) for c in chains)
            for chain in chains:
                parts = [p for p in chain.partitions if not self.finished(chain.assets, _partition_tags(p))]
                kept += [replace(chain, partitions=tuple(parts))] if parts else []
            left = sum(len(c.partitions) for c in kept)
        if left < total:
            print(f"  resumed: {total - left} of {total} runs finished before, skipped")
        return (kept, None) if chains is None else (runs if kept else [], kept)


def _partition_tags(partition: str | None) -> dict[str, str]:
    return {} if partition is None else {PARTITION_TAG: partition}


def resume_point(instance, settings) -> Resume:
    """The latest ``materialize`` of this host in ``instance`` and what its runs finished (those of the commands
    that resumed it too). Raises ValueError when there is none, or when it ran with other settings or code."""
    import dagster as dg

    host = socket.gethostname()
    latest = instance.get_runs(dg.RunsFilter(tags={HOST_TAG: host}), limit=1)
    if not latest or INVOCATION_TAG not in latest[0].tags:
        raise ValueError(
            f"materialize --resume: the Dagster instance at DAGSTER_HOME holds no run of `materialize` on {host}: "
            "nothing to resume (run materialize without --resume)"
        )
    run = latest[0]
    invocation = run.tags.get(RESUMES_TAG, run.tags[INVOCATION_TAG])
    theirs, ours = run.tags.get(SETTINGS_TAG), fingerprint(settings)
    if theirs is not None and theirs != ours:
        raise ValueError(
            f"materialize --resume: the stopped command (invocation {invocation}, run {run.run_id}) ran with other "
            f"settings or stage code (fingerprint {theirs}, now {ours}: KP_* variables, flags, profile or version "
            "differ); resume it with the same ones, or run materialize without --resume"
        )
    done: set[tuple[str, str]] = set()
    for tags in ({INVOCATION_TAG: invocation, HOST_TAG: host}, {RESUMES_TAG: invocation, HOST_TAG: host}):
        for finished in instance.get_runs(dg.RunsFilter(tags=tags, statuses=[dg.DagsterRunStatus.SUCCESS])):
            events = instance.all_logs(finished.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            _, where = unit((), finished.tags)
            done |= {(e.dagster_event.asset_key.to_user_string(), where) for e in events}
    return Resume(invocation, frozenset(done), checked=theirs is not None)
