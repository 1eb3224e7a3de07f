"""The volatility task's evidence (issue 53): every forecaster of the next h sessions' variance on the same ticker-days,
and the tokenizations compared with seeds as replicates.

The forecasters: each fine-tuned model of the run (one per variant and seed, its ``log_variance`` predictions) and
the field's references (``volatility_forecasts``: vol20 and EWMA with no fit, GARCH(1,1) per name and the pooled HAR
on the daily range, both refitted on each fold's training days), each restricted to the ticker-days the models
predict in that fold's test period. Every number is over the ticker-days where the target and every forecaster are
known (``volatility_metrics.common_rows``), so a row never wins by skipping hard days.

The tokenization comparison pairs variants that share a backbone and differ in their tokens (``PAIRS``): for each
pair and each seed the run trained both with, the per-day difference of the daily mean QLIKE (A - B: negative = A
forecasts better) and of the daily rank IC of forecast against realized (A - B: positive = A ranks better);
``seed_replicates.replicated_verdict`` says "yes" only when at least three seeds agree in sign and the two-level
interval (seeds, then day blocks) excludes 0. Its interval is conditional on the trained models; the detectable
difference is 2.8 times the two-level standard error (a 5% two-sided test with 80% power), what the run could have
told apart. The same paired test asks whether a learned forecaster beats HAR and GARCH (``reference_table``), and
``verdict_rows`` turns both tables into the verdict's rows. Pure: frames in, frames out; no dagster, no file I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy.stats import norm

from kinematic_pipeline.backtest.seed_replicates import replicated_verdict
from kinematic_pipeline.backtest.volatility_forecasts import (
    ewma_forecast,
    garch_forecast,
    har_forecast,
    realized,
    vol20_forecast,
)
from kinematic_pipeline.backtest.volatility_metrics import (
    BLOCK_DAYS,
    KEYS,
    TABLE_SCHEMA,
    common_rows,
    daily_losses,
    daily_rank_ic,
    forecast_table,
    scored_frame,
)
from kinematic_pipeline.folds import Fold, fold_labelled

BENCHMARK = "har"  # the reference every forecaster's Diebold-Mariano test is against
BEATEN = (BENCHMARK, "garch")  # the references a learned forecaster must beat (the verdict's question)
PAIRS = (("splinegpt", "rawgpt_fd"), ("splinegpt", "rawgpt"))  # one backbone (GPT), two tokenizations each
POWER_Z = float(norm.ppf(0.80))  # a difference of (z_(1 - alpha / 2) + POWER_Z) standard errors: found with 80% power
SEED_SEPARATOR = " seed "  # a model forecaster's name: "<variant> seed <seed>"
ORACLE = "oracle"  # the exact forecast of a planted-volatility universe (KP_PLANTED_VOL), a row of its own kind

COMPARISON_SCHEMA = {
    "variant_a": pl.String,
    "variant_b": pl.String,
    "metric": pl.String,  # "qlike" (A - B < 0: A better) or "rank_ic" (A - B > 0: A better)
    "difference": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "day_only_ci_low": pl.Float64,
    "day_only_ci_high": pl.Float64,
    "detectable": pl.Float64,
    "n_seeds": pl.Int64,
    "sign_agreement": pl.Float64,
    "days": pl.Int64,
    "answer": pl.String,
    "reason": pl.String,
    "conditional_on": pl.String,
}


def reference_forecasts(bars: pl.DataFrame, h: int, train_end) -> dict[str, pl.DataFrame]:
    """The references' forecasts (ticker, date, log_variance) on every bar, GARCH and HAR fitted on bars dated
    <= ``train_end``."""
    return {
        "vol20": vol20_forecast(bars, h),
        "ewma": ewma_forecast(bars, h),
        "garch": garch_forecast(bars, h, train_end),
        BENCHMARK: har_forecast(bars, h, train_end),
    }


def scored_forecasts(
    predictions: pl.DataFrame,
    bars: pl.DataFrame,
    h: int,
    folds: Sequence[Fold],
    oracle: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, float]:
    """Every forecaster's rows (``volatility_metrics.scored_frame``: ticker, date, forecaster, log_variance, log_rv)
    on the ticker-days of ``predictions`` (the task's: variant, seed, fold, ticker, date, log_variance), fold by
    fold, the references refitted on each fold's training days, and ``oracle`` (ticker, date, log_variance: a
    planted universe's exact forecast) as the forecaster ``ORACLE``; and the mean log RV of the first fold's
    training rows (``label_end`` and before: the R^2's zero, known before any test day)."""
    targets = realized(bars, h)
    parts = []
    for (label,), rows in predictions.group_by("fold", maintain_order=True):
        fold = fold_labelled(tuple(folds), label)
        days = rows.select(*KEYS).unique()
        forecasts = {
            name: frame.join(days, on=list(KEYS), how="semi")
            for name, frame in reference_forecasts(bars, h, fold.train_end).items()
        }
        if oracle is not None:
            forecasts[ORACLE] = oracle.join(days, on=list(KEYS), how="semi").select(*KEYS, "log_variance")
        for (variant, seed), model in rows.sort("variant", "seed").group_by("variant", "seed", maintain_order=True):
            forecasts[f"{variant}{SEED_SEPARATOR}{seed}"] = model.select(*KEYS, pl.col("log_variance").cast(pl.Float64))
        parts.append(scored_frame(targets, forecasts))
    first = min(folds, key=lambda f: f.train_end)
    training = targets.filter((pl.col("date") <= first.label_end) & pl.col("log_rv").is_finite())["log_rv"]
    scored = pl.concat(parts, how="vertical")
    # a reference that forecasts none of these days (GARCH on a name with under a year of training returns) is left
    # out, not allowed to empty the common rows of every other
    forecasting = scored.group_by("forecaster").agg(pl.col("log_variance").is_finite().any().alias("any"))
    scored = scored.join(forecasting.filter("any").select("forecaster"), on="forecaster", how="semi")
    return scored, float(training.mean()) if training.len() else float("nan")


def forecaster_table(scored: pl.DataFrame, h: int, train_mean: float, reps: int = 1000, seed: int = 0) -> pl.DataFrame:
    """``volatility_metrics.forecast_table`` of every forecaster against HAR, sorted by QLIKE, with each row's
    ``kind`` (reference, model, or the planted universe's oracle)."""
    wide, names = common_rows(scored)
    if len(names) < 2 or wide["date"].n_unique() < 2:  # nothing to compare on: too few forecasters or days
        return pl.DataFrame(schema={**TABLE_SCHEMA, "kind": pl.String})
    table = forecast_table(scored, h, train_mean, BENCHMARK, reps=reps, seed=seed)
    kind = (
        pl.when(pl.col("forecaster").str.contains(SEED_SEPARATOR))
        .then(pl.lit("model"))
        .when(pl.col("forecaster") == ORACLE)
        .then(pl.lit(ORACLE))
        .otherwise(pl.lit("reference"))
    )
    return table.with_columns(kind.alias("kind")).sort("qlike")


def _per_seed_days(wide: pl.DataFrame, losses: pl.DataFrame, variant: str, seeds: list[int], metric: str) -> np.ndarray:
    """[seeds, days of ``losses``] of ``variant``'s daily mean QLIKE (``losses``: ``daily_losses``) or daily rank IC
    on ``wide``'s rows (``common_rows``); NaN on a day without one."""
    names = [f"{variant}{SEED_SEPARATOR}{s}" for s in seeds]
    if metric == "qlike":
        return losses.select(names).to_numpy().T
    days = losses.select("date")
    ics = [days.join(daily_rank_ic(wide, n, "log_rv")[0], on="date", how="left")["rank_ic"] for n in names]
    return np.vstack([ic.fill_null(float("nan")).to_numpy() for ic in ics])


def tokenization_table(
    scored: pl.DataFrame, n_boot: int = 1000, block_days: int = BLOCK_DAYS, seed: int = 0
) -> pl.DataFrame:
    """One row per pair of ``PAIRS`` both of whose variants the run trained with the same seeds, per metric
    (``COMPARISON_SCHEMA``), on the ticker-days every forecaster shares; empty when no pair is there."""
    wide, names = common_rows(scored)
    if wide["date"].n_unique() < 2:
        return pl.DataFrame(schema=COMPARISON_SCHEMA)
    losses, trained = daily_losses(scored), trained_seeds(names)
    rows = []
    for a, b in PAIRS:
        seeds = sorted(trained.get(a, set()) & trained.get(b, set()))
        if not seeds:
            continue
        for metric in ("qlike", "rank_ic"):
            x, y = (_per_seed_days(wide, losses, v, seeds, metric) for v in (a, b))
            verdict = replicated_verdict(x, y, n_boot=n_boot, block_days=block_days, seed=seed)
            rows.append(_comparison_row(a, b, metric, verdict))
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)


def trained_seeds(names: Sequence[str]) -> dict[str, set[int]]:
    """{variant: its seeds} of the model forecasters among ``names`` ("<variant> seed <seed>")."""
    trained: dict[str, set[int]] = {}
    for name in names:
        if SEED_SEPARATOR in name:
            variant, _, s = name.partition(SEED_SEPARATOR)
            trained.setdefault(variant, set()).add(int(s))
    return trained


def _comparison_row(a: str, b: str, metric: str, verdict: dict, alpha: float = 0.05) -> dict:
    """One ``COMPARISON_SCHEMA`` row of ``replicated_verdict``'s ``verdict`` at two-sided level ``alpha``: its
    detectable difference is (z_(1 - alpha / 2) + z_0.80) standard errors, the standard error read off the
    interval's width."""
    z = float(norm.ppf(1 - alpha / 2))
    se = (verdict["ci_high"] - verdict["ci_low"]) / (2 * z)
    return {
        "variant_a": a,
        "variant_b": b,
        "metric": metric,
        "difference": verdict["mean_difference"],
        "ci_low": verdict["ci_low"],
        "ci_high": verdict["ci_high"],
        "day_only_ci_low": verdict["day_only_ci_low"],
        "day_only_ci_high": verdict["day_only_ci_high"],
        "detectable": (z + POWER_Z) * se,
        "n_seeds": verdict["n_seeds"],
        "sign_agreement": verdict["sign_agreement"],
        "days": verdict["n_days"],
        "answer": verdict["answer"],
        "reason": verdict["reason"],
        "conditional_on": verdict["conditional_on"],
    }


def reference_table(
    scored: pl.DataFrame,
    n_boot: int = 1000,
    block_days: int = BLOCK_DAYS,
    seed: int = 0,
    alpha: float = 0.05,
    fitted_once: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """Does a learned forecaster beat HAR and GARCH (``BEATEN``)? One row per model variant and reference
    (``COMPARISON_SCHEMA``, metric "qlike", variant_b the reference): the paired daily mean QLIKE, model - reference
    (negative: the model forecasts better), per seed against the reference's one series, with the seeds as
    replicates (``seed_replicates.replicated_verdict``); each interval at ``alpha`` / the number of rows (Bonferroni
    over the table: "yes" in any row answers the question at ``alpha``). A variant of ``fitted_once`` (a probe: one
    fit, no training seed to vary) needs no three seeds: its interval is of its one fit. Empty without a model or a
    reference."""
    wide, names = common_rows(scored)
    beaten = [r for r in BEATEN if r in names]
    trained = trained_seeds(names)
    if wide["date"].n_unique() < 2 or not beaten or not trained:
        return pl.DataFrame(schema=COMPARISON_SCHEMA)
    losses = daily_losses(scored)
    level = alpha / (len(trained) * len(beaten))
    rows = []
    for variant in sorted(trained):
        seeds = sorted(trained[variant])
        x = _per_seed_days(wide, losses, variant, seeds, "qlike")
        for reference in beaten:
            y = np.tile(losses[reference].to_numpy(), (len(seeds), 1))
            least = 1 if variant in fitted_once else 3
            verdict = replicated_verdict(
                x, y, n_boot=n_boot, block_days=block_days, seed=seed, alpha=level, min_seeds=least
            )
            rows.append(_comparison_row(variant, reference, "qlike", verdict, level))
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)


# ------------------------------------------------------------------------------------------ the verdict's rows

# why a seed of a pair may score no day: an adapter kept at its prior forecasts one value for every name
UNSCORED = "a seed scores no day (a forecast constant across names has no rank IC)"

NAMES = {"splinegpt": "spline tokens", "rawgpt_fd": "finite differences", "rawgpt": "raw values"}
METRICS = {"qlike": ("QLIKE", "negative"), "rank_ic": ("vol-rank IC", "positive")}


def _interval(row: dict) -> str:
    return (
        f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] two-level (seeds, then days; {row['conditional_on']}); "
        f"days only [{row['day_only_ci_low']:+.4f}, {row['day_only_ci_high']:+.4f}]"
    )


def _better(row: dict, metric: str) -> bool:
    """Whether ``row``'s side a is the better one: a lower QLIKE, a higher rank IC."""
    return row["difference"] < 0 if metric == "qlike" else row["difference"] > 0


def _answer(row: dict, metric: str, b: str) -> str:
    if row["answer"] != "yes":
        return f"no evidence: {row['reason']}"
    if _better(row, metric):
        return f"yes: {row['reason']}"
    return f"no: {b} is better ({row['reason']})"


def verdict_rows(tables: dict[str, pl.DataFrame], h: int) -> list[dict]:
    """The verdict's rows of the volatility task's tables (``forecasters``, ``references``, ``tokenizations``):
    does a learned forecaster beat HAR and GARCH (the best model variant's rows of ``reference_table``, "yes" only
    when it beats both), and do spline tokens beat finite differences or raw values (one row per pair and metric of
    ``tokenization_table``). The verdict's columns (``stages.verdict.VERDICT_SCHEMA``); none without models."""
    rows: list[dict] = []
    forecasters, references = tables.get("forecasters"), tables.get("references")
    target = f"next-{h}-session variance"
    if references is not None and references.height and forecasters is not None:
        qlike = dict(forecasters.select("forecaster", "qlike").iter_rows())
        # the variant whose largest difference (against its hardest reference) is the most negative
        worst = references.group_by("variant_a").agg(pl.col("difference").max()).sort("difference", "variant_a")
        best = worst["variant_a"][0]
        best_rows = references.filter(pl.col("variant_a") == best).to_dicts()
        seeds = best_rows[0]["n_seeds"]
        model_mean = np.mean([q for n, q in qlike.items() if n.startswith(f"{best}{SEED_SEPARATOR}")])
        fits = f"mean of {seeds} seeds" if seeds > 1 or "fewer" in best_rows[0]["reason"] else "one fit"
        failing = next((r for r in best_rows if not (r["answer"] == "yes" and r["difference"] < 0)), None)
        if failing is None:
            answer = f"yes: {best} beats {' and '.join(r['variant_b'] for r in best_rows)} ({best_rows[0]['reason']})"
        elif failing["answer"] != "yes":
            answer = f"no evidence against {failing['variant_b']}: {failing['reason']}"
        else:
            answer = f"no: {failing['variant_b']} forecasts better than {best} ({failing['reason']})"
        versus = ", ".join(f"{r['variant_b']} {qlike.get(r['variant_b'], float('nan')):.4f}" for r in best_rows)
        in_mcs = ", ".join(forecasters.filter("in_mcs")["forecaster"].head(5))
        rows.append(
            {
                "Question": f"Does a learned forecaster beat HAR and GARCH on {target} (QLIKE)?",
                "Test": "paired daily QLIKE, model - reference, per seed; two-level bootstrap (seeds, then day "
                f"blocks), Bonferroni over {references.height} model-reference rows; 'yes' only when >= 3 seeds "
                "agree (a probe: its one fit)",
                "Statistic": f"best {best}: QLIKE {model_mean:.4f} ({fits}) vs {versus}; the model "
                f"confidence set keeps {in_mcs}",
                "Interval or p-value": "; ".join(
                    f"vs {r['variant_b']} {r['difference']:+.4f} {_interval(r)}" for r in best_rows
                ),
                "Trials": f"{references['variant_a'].n_unique()} model variants x {seeds} seeds, "
                f"{best_rows[0]['days']} days",
                "Answer": answer,
                "Detectable at 80% power": f"a QLIKE difference of {max(r['detectable'] for r in best_rows):.4f}",
            }
        )
    pairs = tables.get("tokenizations")
    for row in pairs.iter_rows(named=True) if pairs is not None else ():
        a, b, metric = (
            NAMES.get(row["variant_a"], row["variant_a"]),
            NAMES.get(row["variant_b"], row["variant_b"]),
            row["metric"],
        )
        name, good = METRICS[metric]
        scored = bool(np.isfinite(row["difference"]))  # no: a seed scores no day (seed_replicates.unscored_reason)
        rows.append(
            {
                "Question": f"Do {a} beat {b} on {target} ({name})?",
                "Test": f"paired daily {name}, {row['variant_a']} - {row['variant_b']} ({good} = {a} better), per "
                "seed; two-level bootstrap (seeds, then day blocks); 'yes' only when >= 3 seeds agree",
                "Statistic": f"difference {row['difference']:+.4f}, seeds agreeing in sign {row['sign_agreement']:.0%}"
                if scored
                else f"undefined: {UNSCORED}",
                "Interval or p-value": _interval(row) if scored else "undefined",
                "Trials": f"{row['n_seeds']} seeds, {row['days']} days",
                "Answer": _answer(row, metric, b),
                "Detectable at 80% power": f"a {name} difference of {row['detectable']:.4f}" if scored else "-",
            }
        )
    return rows
