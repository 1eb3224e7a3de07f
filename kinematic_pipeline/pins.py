"""Pins: what a derived day shard was built from, and the check on read that it still holds.

A labels shard of day t is built from the spline_tokens and raw_ohlcv shards of t and of the next session
(``stages/labels.py``); its manifest records their content hashes' digest (``inputs_digest``) and the next
session (``next_date``). ``verified_labels`` re-derives that digest from the manifests on disk now and refuses a
day whose inputs were re-materialized since (a corrected bar, a re-tokenized day), naming the day and the
partition to re-materialize, before it checks the labels' own bytes. A day whose next session did not exist
when it was built recorded "" for it, and still holds while that session is missing.

The current content hashes come from the inputs' manifests, read once per process and cached by each
manifest's (path, size, mtime_ns): a rewritten manifest is a new file (atomic rename), so its stat differs.
Uncached, the check reads 3 x 5,787 manifests on ``real`` in about 3 s; cached, it stats them. No dagster here.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from kinematic_pipeline.atomic_files import digest
from kinematic_pipeline.token_kinds import SPLINE_TOKENS
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV, StalePairError, Warehouse

LABEL_INPUTS = (SPLINE_TOKENS, RAW_OHLCV)  # the shards a labels day reads, of the day and of the next session
_HASHES: dict[str, tuple[tuple[int, int], str]] = {}  # manifest path -> ((size, mtime_ns), content_hash)


def current_hashes(wh: Warehouse, asset: str, days: list[dt.date]) -> list[str]:
    """The content hash each day's manifest of ``asset`` records now ("" where there is none), cached by stat."""
    out: dict[dt.date, str] = {}
    todo: list[tuple[dt.date, Path, tuple[int, int]]] = []
    for day in dict.fromkeys(days):
        path = wh.manifest(asset, day)
        try:
            st = path.stat()
        except FileNotFoundError:
            out[day] = ""
            continue
        stamp, hit = (st.st_size, st.st_mtime_ns), _HASHES.get(str(path))
        if hit is not None and hit[0] == stamp:
            out[day] = hit[1]
        else:
            todo.append((day, path, stamp))
    for (day, path, stamp), content in zip(todo, wh.content_hashes(asset, [d for d, _, _ in todo])):
        _HASHES[str(path)] = (stamp, content)
        out[day] = content
    return [out[d] for d in days]


def label_inputs_digest(wh: Warehouse, day: dt.date, next_day: dt.date) -> str:
    """The digest a labels shard of ``day`` records: its inputs' content hashes, day and next session."""
    return _digests(wh, [(day, next_day)])[0]


def _digests(wh: Warehouse, pairs: list[tuple[dt.date, dt.date]]) -> list[str]:
    days = [d for pair in pairs for d in pair]
    hashes = {asset: current_hashes(wh, asset, days) for asset in LABEL_INPUTS}
    return [digest([hashes[a][2 * i + k] for a in LABEL_INPUTS for k in (0, 1)]) for i in range(len(pairs))]


def stale_label_days(wh: Warehouse, days: list[dt.date]) -> list[tuple[dt.date, dt.date, str, str]]:
    """(day, next session, recorded digest, current digest) of each labels day whose inputs changed since."""
    if not days:
        return []
    rows = wh.manifest_rows(LABELS, days, ["next_date", "inputs_digest"])
    current = _digests(wh, [(d, r["next_date"]) for d, r in zip(days, rows)])
    return [
        (d, r["next_date"], r["inputs_digest"], now)
        for d, r, now in zip(days, rows, current)
        if r["inputs_digest"] != now
    ]


def verified_labels(wh: Warehouse, days: list[dt.date]) -> list[Path]:
    """The labels shards of ``days``, after checking that each was built from the token and raw shards on disk
    now (``StalePairError`` naming the first stale day, its inputs and the fix) and that its bytes are the ones
    its manifest records (``Warehouse.verified_shards``)."""
    stale = stale_label_days(wh, sorted(days))
    if stale:
        day, nxt, recorded, now = stale[0]
        more = f" (and {len(stale) - 1} more day(s) through {stale[-1][0]})" if len(stale) > 1 else ""
        raise StalePairError(
            f"labels shard of {day}{more} was built from {' and '.join(LABEL_INPUTS)} of {day} and {nxt} whose digest "
            f"was {recorded[:16] or '-'}; those shards now digest to {now[:16]} (re-materialized since). "
            f"Re-materialize labels for {day}{' onwards' if more else ''} "
            "(python -m kinematic_pipeline materialize --select labels)"
        )
    return wh.verified_shards(LABELS, days)
