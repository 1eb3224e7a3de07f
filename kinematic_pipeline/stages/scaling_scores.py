"""How the data-scaling curves score each learner (``stages/scaling.py``): its calibrated universe predictions'
rank IC and log-loss skill on close-to-close labels, its skill beyond the trailing-volatility reference paired on the
ticker-days it scored, and the reference's own row on the ticker-days every learner scored. No dagster here.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import verified_labels
from kinematic_pipeline.tasks.actions import PROB_COLUMNS
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline.warehouse import exact_paths as exact

VOL_REFERENCE = "trailing_vol20"  # the learner of the reference row: nothing learned (volatility_reference.REFERENCE)
BEYOND_VOL20 = "logloss_skill_beyond_vol20"  # the paired column (and _ci_low, _ci_high)


def _returns(settings: Settings, days: list) -> pl.DataFrame:
    """ticker, date, r_close of the labels shards of ``days`` (those that have one)."""
    wh = settings.warehouse
    have = [d for d in days if wh.shard(LABELS, d).exists()]
    if not have:
        raise FileNotFoundError(f"no labels shard on the scaling fold's test days: materialize {LABELS}")
    return exact.read_parquet(verified_labels(settings, have), columns=["ticker", "date", "r_close"])


def score_universe(settings: Settings, universe: pl.DataFrame, rates: dict) -> dict:
    """The rank IC (and its Newey-West t) of s = p_buy - p_sell of the stored (de-weighted) p against r_close, and the
    log-loss skill (with its day-bootstrap interval) on close-to-close labels against ``rates`` ({tau:
    FoldRates}: ``train_base_rates(settings)[CLOSE]``), of one policy's calibrated universe predictions."""
    from kinematic_pipeline.backtest.policy_frames import skill_frame
    from kinematic_pipeline.backtest.signal import daily_ic, ic_summary
    from kinematic_pipeline.stages.evidence import CLOSE_LABEL, skill_options, with_close_labels

    ev = settings.evaluate
    returns = _returns(settings, sorted(universe["date"].unique().to_list()))
    p = universe.select(PROB_COLUMNS).to_numpy().astype(np.float64)
    scored = universe.with_columns(pl.Series("score", p[:, 0] - p[:, 1])).join(
        returns, on=["ticker", "date"], how="left", validate="m:1"
    )
    rank = ic_summary(daily_ic(scored, "score", "r_close"), "rank_ic")
    close = with_close_labels(universe, returns)
    skill = skill_frame(close, rates, skill_options(ev, CLOSE_LABEL)).row(0, named=True)
    return {
        "rank_ic": rank["mean"],
        "rank_ic_t_nw": rank["t_nw"],
        "logloss_skill": skill["log_loss_skill"],
        "logloss_skill_ci_low": skill["log_loss_skill_ci_low"],
        "logloss_skill_ci_high": skill["log_loss_skill_ci_high"],
        "ci_block_days": ev.skill_bootstrap_block_days,
        "test_rows": skill["n_rows"],
    }


def skill_beyond_vol20(
    settings: Settings, universe: pl.DataFrame, reference: pl.DataFrame, returns: pl.DataFrame, rates: dict
) -> dict:
    """The log-loss skill of one learner's calibrated ``universe`` predictions minus the trailing-volatility
    reference's, paired on the ticker-days of ``universe`` that ``reference`` (``volatility_reference`` rows, p
    itself) forecasts, on close-to-close labels from ``returns`` (ticker, date, r_close) against ``rates``, with the
    block-bootstrap interval of ``evaluate.skill_bootstrap_*``: the information table's
    ``skill_beyond_reference_frame``. Null, with 0 rows, where no ticker-day pairs."""
    from kinematic_pipeline.backtest.policy_frames import BEYOND, skill_beyond_reference_frame
    from kinematic_pipeline.stages.evidence import CLOSE_LABEL, skill_options, with_close_labels

    ev = settings.evaluate
    options = skill_options(ev, CLOSE_LABEL)
    beyond = skill_beyond_reference_frame(with_close_labels(universe, returns), reference, rates, options)
    if beyond.height > 1:
        raise ValueError(f"one learner's universe holds {beyond.height} policies: {beyond['variant'].to_list()}")
    row = beyond.row(0, named=True) if beyond.height else {}
    return {
        BEYOND_VOL20: row.get(BEYOND),
        f"{BEYOND_VOL20}_ci_low": row.get(f"{BEYOND}_ci_low"),
        f"{BEYOND_VOL20}_ci_high": row.get(f"{BEYOND}_ci_high"),
        "beyond_vol20_rows": row.get("paired_rows", 0),
    }


def shared_ticker_days(universes: list[pl.DataFrame]) -> pl.DataFrame:
    """ticker, date of the ticker-days every one of ``universes`` scored: the reference row's rows."""
    if not universes:
        raise ValueError("no learner's universe: no ticker-day to score the reference on")
    shared = universes[0].select("ticker", "date").unique()
    for universe in universes[1:]:
        shared = shared.join(universe.select("ticker", "date"), on=["ticker", "date"], how="semi")
    return shared.sort("ticker", "date")


def reference_row(settings: Settings, variant: str, forecast: pl.DataFrame, rows: pl.DataFrame, rates: dict) -> dict:
    """The trailing-volatility reference's row: its ``forecast`` (``stages.reference_rows.volatility_reference``) on
    the ticker-days of ``rows`` (``shared_ticker_days``: those every learner scored), scored as the learners are
    (its p as it stores it). Nothing is fitted: no windows, rows or steps; nothing beyond itself."""
    from kinematic_pipeline.backtest.volatility_reference import REFERENCE

    started = time.perf_counter()
    on_rows = forecast.join(rows.select("ticker", "date"), on=["ticker", "date"], how="semi")
    return {
        "variant": variant,
        "learner": VOL_REFERENCE,
        "model": REFERENCE,
        "n_windows": None,
        "windows_seen": None,
        "distinct_windows": None,
        "train_rows": 0,
        "steps": None,
        "best_step": None,
        **score_universe(settings, on_rows, rates),
        BEYOND_VOL20: None,
        f"{BEYOND_VOL20}_ci_low": None,
        f"{BEYOND_VOL20}_ci_high": None,
        "beyond_vol20_rows": None,
        "seconds": time.perf_counter() - started,
    }


def with_vol20(
    settings: Settings, variant: str, learned: list[tuple[dict, pl.DataFrame]], rates: dict, log=None
) -> list[dict]:
    """The ``learned`` rows (each with the universe it was scored on), each with its skill beyond the
    trailing-volatility reference paired on its own ticker-days, then the reference's row on the ticker-days every
    one of them scored. The reference is forecast once on every ticker-day any learner scored: a day's forecast
    reads only the bars up to it, never which other rows were asked."""
    from kinematic_pipeline.stages.reference_rows import volatility_reference

    universes = [universe for _, universe in learned]
    every = pl.concat([u.select("ticker", "date", "label") for u in universes]).unique(
        ["ticker", "date"], keep="first", maintain_order=True
    )
    forecast = volatility_reference(settings, every.sort("ticker", "date"), settings.evaluate.report_tau)
    returns = _returns(settings, sorted(every["date"].unique().to_list()))
    rows = []
    for row, universe in learned:
        rows.append(row | skill_beyond_vol20(settings, universe, forecast, returns, rates))
        log_row(log, rows[-1])
    rows.append(reference_row(settings, variant, forecast, shared_ticker_days(universes), rates))
    log_row(log, rows[-1])
    return rows


def log_row(log, row: dict) -> None:
    """One learner's row as a line of ``log`` (nothing without one)."""
    if log is None:
        return
    beyond = row.get(BEYOND_VOL20)
    log(
        f"{row['model']} ({row['learner']}) n={row['n_windows']}: rank IC {row['rank_ic']:+.3f} "
        f"(t {row['rank_ic_t_nw']:+.1f}), skill {row['logloss_skill']:+.3f}"
        + ("" if beyond is None else f", beyond vol20 {beyond:+.3f} on {row['beyond_vol20_rows']} rows")
        + f", {row['seconds']:.0f} s"
    )
