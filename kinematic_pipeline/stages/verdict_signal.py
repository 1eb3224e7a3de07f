"""The verdict's rows on the universe's daily signal (questions 3 and 5 of ``stages.verdict``): each model's and
probe's daily rank IC and partial rank IC beyond the trivial features, Holm-adjusted one-sided Newey-West tests;
and the paired daily differences (rank IC, partial rank IC, log loss) a spline-vs-fd comparison tests, with a
Newey-West lag of at least ``HAC_LAG`` days. The verdict's level, power and number formats live here too: every row
of the verdict reads them. No dagster here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats as sps

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.backtest.seed_replicates import conditional_on, replicated_verdict
from kinematic_pipeline.backtest.signal import daily_ic, newey_west_lags, newey_west_t, partial_rank_ic
from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.features import read_features
from kinematic_pipeline.tasks.actions import PROB_COLUMNS
from kinematic_pipeline.tasks.buy_sell_hold import labels_from_returns
from kinematic_pipeline.tokenizations.raw import TRIVIAL_FEATURES
from kinematic_pipeline.variants import TRIVIAL_PROBE as TRIVIAL
from kinematic_pipeline.variants import trained
from kinematic_pipeline.variants import variant as lookup_variant

LEVEL = 0.05  # every verdict row's level
POWER = 0.8  # the power of its "detectable" column
# the paired tests' least Newey-West lag: daily differences between two forecasters persist for weeks (log-loss
# differences of vol60 vs vol20 on real data: autocorrelation 0.23 / 0.17 / 0.06 at lags 1 / 5 / 20), so the rule
# of thumb's 6 days at T = 1,007 understates their error (science-5 M5)
HAC_LAG = 20
BEYOND_TRIVIAL = "Does any model carry directional information beyond the trivial features?"
RANKS_NEXT_DAY = "Does any model's score rank the next day's returns (rank IC > 0)?"


def p_text(value: float) -> str:
    return "nan" if not np.isfinite(value) else (f"{value:.3f}" if value >= 0.001 else "<0.001")


def annual(daily_sharpe: float) -> float:
    return daily_sharpe * np.sqrt(252)


def daily_ics(universe: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """{variant: (date, rank_ic)}: each variant's daily cross-sectional rank IC of its score (seeds averaged)
    against the next day's close-to-close return."""
    scores = universe.group_by("variant", "ticker", "date").agg(pl.col("score").mean(), pl.col("r_close").first())
    return {
        v: daily_ic(g, "score", "r_close").select("date", "rank_ic")
        for (v,), g in scores.group_by("variant", maintain_order=True)
    }


def daily_ics_by_seed(universe: pl.DataFrame | None) -> dict[tuple[str, int], pl.DataFrame]:
    """{(variant, seed): (date, rank_ic)}: ``daily_ics`` of each seed on its own (the seeds as replicates)."""
    if universe is None or universe.height == 0 or "seed" not in universe.columns:
        return {}
    return {
        (v, int(s)): daily_ic(g, "score", "r_close").select("date", "rank_ic")
        for (v, s), g in universe.group_by("variant", "seed", maintain_order=True)
    }


def information_beyond_trivial(
    settings: Settings, universe: pl.DataFrame | None, partial: dict[str, pl.DataFrame] | None = None
) -> list[dict]:
    """Two rows: each model's and probe's daily partial rank IC given the trivial features (``ret1``, ``vol20``:
    what it ranks beyond them; the universe needs those columns, ``trivial_features``; ``partial``: the
    ``daily_partial_ics`` of every variant, when already computed), and its own IC against 0. (An IC minus the
    trivial probe's would flatter every score beside a trivial probe with a negative IC, the one-day reversal.)"""
    if universe is None or universe.height == 0:
        return []
    ic = daily_ics(universe)
    tested = [v for v in trained(sorted(ic)) if v != TRIVIAL]  # rules rank nothing
    rows = []
    partial = daily_partial_ics(universe, tested) if partial is None else {v: partial[v] for v in tested}
    if partial is not None:
        rows += ic_row(
            BEYOND_TRIVIAL,
            f"daily partial rank IC on the universe given {', '.join(TRIVIAL_FEATURES)} (the trivial probe's "
            "features; ranks regressed out within each day)",
            partial,
        )
    rows += ic_row(
        RANKS_NEXT_DAY,
        "daily rank IC on the universe against 0",
        {v: ic[v] for v in tested},
    )
    return rows


def daily_partial_ics(universe: pl.DataFrame | None, variants=None) -> dict[str, pl.DataFrame] | None:
    """{variant: (date, rank_ic)}: each variant's (of ``variants``, default all) daily partial rank IC of its score
    (seeds averaged) given the trivial features ``ret1`` and ``vol20`` (``partial_rank_ic``); None when the
    universe lacks those columns (``trivial_features``)."""
    if universe is None or universe.height == 0 or not all(c in universe.columns for c in TRIVIAL_FEATURES):
        return None
    scores = universe.group_by("variant", "ticker", "date").agg(
        pl.col("score").mean(), *(pl.col(c).first() for c in ("r_close", *TRIVIAL_FEATURES))
    )
    names = sorted(scores["variant"].unique()) if variants is None else variants
    return {
        v: partial_rank_ic(scores.filter(pl.col("variant") == v), TRIVIAL_FEATURES).select("date", "rank_ic")
        for v in names
    }


def ic_row(question: str, test: str, ic: dict[str, pl.DataFrame]) -> list[dict]:
    """One verdict row: a one-sided Newey-West t of each variant's daily IC, Holm-adjusted over the variants."""
    from statsmodels.stats.multitest import multipletests

    tests, errors = [], []
    for v, daily in ic.items():
        x = daily["rank_ic"].to_numpy()
        t, se, _ = newey_west_t(x)
        p = float(sps.norm.sf(t)) if np.isfinite(t) else float("nan")
        tests.append((v, float(np.nanmean(x)) if x.size else float("nan"), t, p, x.size))
        errors.append(se)
    if not tests:
        return []
    mde = mt.detectable(float(np.nanmedian(errors)), LEVEL / len(tests), POWER)
    pvals = np.array([p if np.isfinite(p) else 1.0 for *_, p, _ in tests])
    reject, adjusted, _, _ = multipletests(pvals, alpha=LEVEL, method="holm")
    winners = [tests[i][0] for i in range(len(tests)) if reject[i]]
    best = int(np.argmin(adjusted))
    return [
        {
            "Question": question,
            "Test": f"{test}, Newey-West t, one-sided, Holm over {len(tests)} models and probes "
            f"({tests[best][4]} days)",
            "Statistic": "; ".join(f"{v} {m:+.4f} (t {t:.2f})" for v, m, t, _, _ in tests),
            "Interval or p-value": f"smallest Holm p = {p_text(adjusted[best])} ({tests[best][0]})",
            "Trials": f"{len(tests)} (one per model and probe)",
            "Answer": f"yes: {', '.join(winners)} at 5% (Holm)" if winners else "no evidence at the 5% level",
            "Detectable at 80% power": f"a mean daily rank IC of "
            f"{mde:.4f} (one score, at 5%/{len(tests)}, the median Newey-West error, {tests[best][4]} days)",
        }
    ]


@dataclass(frozen=True)
class Comparison:
    """One test of the spline-vs-fd family: an estimate (a minus b) and its two-sided p, or why there is none."""

    test: str
    statistic: str = "-"
    interval: str = "-"
    estimate: float = float("nan")
    p: float = float("nan")
    why: str | None = None  # the reason it cannot be computed
    se: float = float("nan")  # the estimate's standard error (bootstrap or Newey-West)
    unit: str = ""  # how a detectable effect reads: "sharpe" (annualized), "rank_ic" or "log_loss"
    pair: tuple[str, str] = ("", "")  # the display names of a and b
    replication: dict | None = None  # over the seeds as replicates (seed_replicates.replicated_verdict); None: one fit


def replicated(
    comparison: Comparison, by_seed: dict, a: str, b: str, column: str, sign: float, boot: tuple[int, int]
) -> Comparison:
    """``comparison`` with its seeds as replicates (science-6 M-B): sign x (a - b) of ``column`` per seed both
    sides were trained with (``by_seed``: {(variant, seed): (date, column)}), the sign agreement and the two-level
    bootstrap interval (seeds, then day blocks; ``boot``: resamples and seed). Unchanged for a side fitted once
    (a probe) or with no per-seed series."""
    seeds = sorted({s for v, s in by_seed if v == a} & {s for v, s in by_seed if v == b})
    if not seeds or comparison.why is not None or not (lookup_variant(a).seeded and lookup_variant(b).seeded):
        return comparison
    days = sorted(set().union(*(set(by_seed[(v, s)]["date"].to_list()) for v in (a, b) for s in seeds)))
    frame = pl.DataFrame({"date": days}, schema={"date": by_seed[(a, seeds[0])].schema["date"]})

    def matrix(variant: str) -> np.ndarray:
        rows = [frame.join(by_seed[(variant, s)], on="date", how="left")[column] for s in seeds]
        return np.vstack([sign * r.cast(pl.Float64).fill_null(float("nan")).to_numpy() for r in rows])

    verdict = replicated_verdict(matrix(a), matrix(b), n_boot=boot[0], block_days=HAC_LAG, seed=boot[1])
    return dataclasses.replace(comparison, replication=verdict)


def replication_text(c: Comparison, scale=lambda x: x) -> str:
    """The statistic's seeds part: each seed's difference (through ``scale``: ``annual`` for a Sharpe ratio), their
    agreement and the two-level interval (where there is one)."""
    r = c.replication
    if r is None:
        return ""
    per_seed = ", ".join(f"{scale(d):+.4f}" if np.isfinite(d) else "none" for d in r["per_seed_differences"])
    if not np.isfinite(r["sign_agreement"]):  # a seed scores no day (seed_replicates.unscored_reason)
        return f"; seeds as replicates: {per_seed} ({r['reason']})"
    text = f"; seeds as replicates: {per_seed} ({r['n_seeds'] - r['n_disagree']} of {r['n_seeds']} agree)"
    if np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"]):
        text += f", two-level interval [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] (95%"
        return text + f", conditional on {r['conditional_on']})"
    return text + f" (conditional on {r['conditional_on']})"


def seed_sharpe_replication(by_seed: dict, a: str, b: str, least: int = 3) -> dict | None:
    """The timing rows' seeds as replicates: per seed both strategies ``a`` and ``b`` were trained with
    (``by_seed``: ``strategies.strategy_returns_by_seed``), Sharpe(a) - Sharpe(b) on the days both hold, and whether
    they agree in sign ("yes" only with at least ``least`` seeds, none at 0 or of the other sign: as
    ``seed_replicates.replicated_verdict``, with no two-level interval: a Sharpe ratio is not a mean of days).
    None with no seed in common."""
    seeds = sorted({s for v, s in by_seed if v == a} & {s for v, s in by_seed if v == b})
    if not seeds:
        return None
    diffs = []
    for s in seeds:
        x, y = by_seed[(a, s)], by_seed[(b, s)]
        both = np.isfinite(x) & np.isfinite(y)
        diffs.append(mt.sharpe_ratio(x[both]) - mt.sharpe_ratio(y[both]) if both.sum() > 1 else float("nan"))
    d = np.asarray(diffs, dtype=np.float64)
    mean = float(np.nanmean(d)) if np.isfinite(d).any() else float("nan")
    n_disagree = int(np.sum(~(np.sign(d) == np.sign(mean)) | (d == 0)))
    k = len(seeds)
    reason = (
        f"fewer than {least} seeds"
        if k < least
        else f"{n_disagree} of {k} seeds {'disagrees' if n_disagree == 1 else 'disagree'}"
        if n_disagree
        else ""
    )
    return {
        "answer": "no evidence" if reason else "yes",
        "reason": reason or f"all {k} seeds agree",
        "per_seed_differences": tuple(float(x) for x in d),
        "n_seeds": k,
        "n_disagree": n_disagree,
        "sign_agreement": (k - n_disagree) / k,
        "ci_low": float("nan"),
        "ci_high": float("nan"),
        "conditional_on": conditional_on(k),
    }


def daily_log_losses(settings: Settings, universe: pl.DataFrame | None, by_seed: bool = False) -> dict:
    """{variant: (date, log_loss)}: per day, the mean over the universe's ticker-days (and seeds) of -ln p(label)
    of the de-weighted calibrated probabilities, on close-to-close labels at the report's tau; ``by_seed``: keyed
    by (variant, seed), each seed on its own."""
    needed = {"variant", "date", *PROB_COLUMNS, "r_close"} | ({"seed"} if by_seed else set())
    if universe is None or universe.height == 0 or not needed <= set(universe.columns):
        return {}
    r = universe["r_close"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    labels = labels_from_returns(r, settings.evaluate.report_tau)
    p = universe.select(PROB_COLUMNS).to_numpy().astype(np.float64)
    known = labels >= 0
    loss = np.full(universe.height, np.nan)
    loss[known] = -np.log(np.clip(p[np.flatnonzero(known), labels[known]], 1e-12, 1.0))
    keys = ["variant", "seed"] if by_seed else ["variant"]
    frame = universe.select(*keys, "date").with_columns(pl.Series("log_loss", loss)).drop_nans("log_loss")
    daily = frame.group_by(*keys, "date").agg(pl.col("log_loss").mean()).sort(*keys, "date")
    grouped = daily.group_by(*keys, maintain_order=True)
    if by_seed:
        return {(v, int(s)): g.drop(keys) for (v, s), g in grouped}
    return {v: g.drop(keys) for (v,), g in grouped}


def hac_lag(n_days: int) -> int:
    """The paired tests' Newey-West lag: the rule of thumb, at least ``HAC_LAG`` days."""
    return max(HAC_LAG, newey_west_lags(n_days))


def paired(
    test: str,
    daily: dict[str, pl.DataFrame],
    a: str,
    b: str,
    column: str,
    sign: float,
    pair: tuple[str, str] = ("", ""),
    unit: str | None = None,
) -> Comparison:
    """A two-sided Newey-West test (lag ``hac_lag``) of the daily difference sign x (a - b) of ``column`` on the
    days both have."""
    absent = [v for v in (a, b) if v not in daily]
    if absent:
        return Comparison(test, why=f"no universe predictions of {' and '.join(absent)}", pair=pair)
    paired = daily[a].join(daily[b], on="date", suffix="_b").drop_nulls()
    x = sign * (paired[column] - paired[f"{column}_b"]).to_numpy()
    x = x[np.isfinite(x)]
    t, se, lags = newey_west_t(x, hac_lag(x.size))
    p = float(2 * sps.norm.sf(abs(t))) if np.isfinite(t) else float("nan")
    mean = float(np.mean(x)) if x.size else float("nan")
    statistic = f"{mean:+.4f} (t {t:.2f}, {x.size} days, Newey-West lag {lags})"
    return Comparison(test, statistic, "-", mean, p, se=se, unit=unit or column, pair=pair)


def trivial_features(settings: Settings) -> pl.DataFrame | None:
    """ret1 and vol20 of every universe ticker-day of every fold's test period (the trivial probe's features
    file), or None when the run has no such file."""
    if TRIVIAL not in settings.evaluate.baselines:
        return None
    try:
        frames = [read_features(settings, TRIVIAL, f, ("test",)) for f in settings.folds]
    except FileNotFoundError:
        return None
    return pl.concat(frames).select("ticker", "date", *TRIVIAL_FEATURES).unique(["ticker", "date"])
