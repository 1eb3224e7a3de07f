"""The CLI's run planner: what a ``materialize`` selection means in Dagster's syntax, which assets it selects in
which order, grouped into as few runs as their partitionings allow, and which trading-day partitions to load.
Dagster graph logic, testable without argparse (``cli.py`` parses and prints).
"""

from __future__ import annotations

import datetime as dt
import re

from kinematic_pipeline.calendar import previous_trading_day, trading_day_on_or_after, trading_days
from kinematic_pipeline.config import Settings
from kinematic_pipeline.sources import make_source


def partition_range(settings: Settings) -> tuple[str, str] | None:
    """First and last trading-day partition key to load: the profile's range within the source's.

    The range ends at the last bar dated up to today (a bar dated in the future must not stretch it
    over empty partitions; the ingest run reports it as ``future_date``). A bar dated on a closed day
    after the last session belongs to the next session, so that session is loaded too when it exists.
    """
    source = make_source(settings)
    held = source.date_range()
    if held is None:
        return None
    today = dt.date.today()
    start = max(settings.data.start_date, held[0])
    limit = min(settings.data.end_date or today, today)
    if start > limit:
        return None
    dates = source.read(start, limit)["date"]
    if dates.is_empty():
        return None
    end = trading_day_on_or_after(dates.max())
    if end > today:  # the next session is not a partition yet
        end = previous_trading_day(end)
    days = trading_days(start, end)
    return (days[0].isoformat(), days[-1].isoformat()) if days else None


FOLD_GROUPS = {"pretrain", "finetune", "evaluate", "baselines", "report", "scaling"}  # assets that test folds

# A bare word that is not an operator and not part of "attr:value" or a quoted string.
# A name next to ``*`` (Dagster's "every upstream / downstream", ``*x``, ``x*``) is left as typed: ``*key:x`` is
# not Dagster syntax.
_BARE_NAME = re.compile(r'(?<![\w:"/*])([A-Za-z_]\w*)(?![\w:"/*])')
_STARRED_NAME = re.compile(r'(?<![\w:"/])\*([A-Za-z_]\w*)|(?<![\w:"/])([A-Za-z_]\w*)\*')


def normalize_selection(text: str) -> str:
    """Dagster's selection syntax from what a user types: ``a,b`` and ``a or b`` with bare asset names
    (Dagster wants ``key:a or key:b``); ``key:``, ``group:``, ``+a``, ``a+``, ``*a``, ``a*`` and the rest pass
    through as Dagster reads them."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"--select {text!r}: empty selection. Hint: e.g. --select raw_ohlcv,spline_tokens")
    joined = " or ".join(f"({p})" if len(parts) > 1 else p for p in parts)
    return _BARE_NAME.sub(lambda m: m.group(1) if m.group(1) in ("and", "or", "not") else f"key:{m.group(1)}", joined)


def plan_runs(defs, selection: str | None, typed: str | None = None, off_dag: tuple[str, ...] = ()) -> list[list]:
    """Selected asset keys in dependency order, grouped into as few runs as their partitionings allow: an asset
    joins the latest run of its partitioning that comes after every parent's run. Without a selection every asset
    but those of the ``off_dag`` groups (run only when selected, e.g. ``scaling``)."""
    import dagster as dg  # the CLI's other commands never load Dagster

    graph = defs.resolve_asset_graph()
    known = {k.to_user_string() for k in graph.toposorted_asset_keys}
    # Dagster drops an unknown key inside "a or b" without a word: a typo must not shrink the run.
    named = set(re.findall(r'key:"?([\w/]+)', selection or ""))
    named |= {a or b for a, b in _STARRED_NAME.findall(selection or "")}
    unknown = sorted(named - known)
    if unknown:
        raise ValueError(
            f"--select {typed or selection!r}: no asset named {', '.join(unknown)}. "
            f"Hint: the assets are {', '.join(sorted(known))}"
        )
    sel = dg.AssetSelection.from_string(selection) if selection else dg.AssetSelection.all()
    if not selection and off_dag:
        sel = sel - dg.AssetSelection.groups(*off_dag)
    chosen = set(sel.resolve(graph))
    # An asset defined together with others (a multi_asset) is materialized with all of them.
    for key in list(chosen):
        chosen |= set(graph.get(key).assets_def.keys)
    runs: list[list] = []
    run_of: dict = {}
    for key in _run_order(graph, chosen):
        # join the latest run of the same partitioning that comes after every parent's run; else a new run
        partitioning = graph.get(key).partitions_def
        after = max((run_of[p] for p in graph.get(key).parent_keys if p in run_of), default=-1)
        same = [i for i, run in enumerate(runs) if graph.get(run[0]).partitions_def == partitioning]
        if same and same[-1] >= after:
            runs[same[-1]].append(key)
        else:
            runs.append([key])
        run_of[key] = same[-1] if same and same[-1] >= after else len(runs) - 1
    return runs


def _run_order(graph, chosen: set) -> list:
    """``chosen`` in dependency order: by depth in the graph (every parent comes first), and within one depth the
    trading-day assets before the others, so that a backfill reads the day shards the previous one just wrote
    while they are still in the page cache (the window stores write gigabytes), then by name."""
    depth: dict = {}
    for key in graph.toposorted_asset_keys:
        depth[key] = 1 + max((depth[p] for p in graph.get(key).parent_keys if p in depth), default=-1)
    day_assets = {k for k in chosen if graph.get(k).partitions_def is not None}
    return sorted(chosen, key=lambda k: (depth[k], k not in day_assets, k.to_user_string()))
