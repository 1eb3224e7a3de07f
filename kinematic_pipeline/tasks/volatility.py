"""Next-week volatility (issue 53): the log of the realized variance over the next h sessions, a forecast task.

For a ticker's day t and its close-to-close log returns r_t+1 .. r_t+h over the h sessions after it
(``targets.label_returns_close``, whatever ``tokenize.label_source`` the classes use):

    RV_h(t) = sum_{i=1..h} r_t+i^2,   target(t) = ln max(RV_h(t), VARIANCE_FLOOR)

NaN until all h returns are known (the newest days) or where one is undefined (a missing bar). h = 5 (next week) by
default; h = 1 (next day) is a second key. ``research/volatility.md`` has the field's protocol and its sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.targets import VARIANCE_FLOOR, log_realized_variance
from kinematic_pipeline.variants import variant as lookup_variant

DEFAULT_HORIZON = 5  # sessions: next week

__all__ = ["DEFAULT_HORIZON", "VARIANCE_FLOOR", "RealizedVariance", "log_realized_variance"]


@dataclass(frozen=True)
class RealizedVariance(Task):
    """ln RV_h of the next ``horizon`` sessions (``log_realized_variance``), forecast by one regression output z:
    the forecast variance is exp(z).

    It trains on QLIKE(RV, exp z) = RV / exp z - ln(RV / exp z) - 1 (Patton 2011), the loss its forecasts are ranked
    by. It is the Gaussian likelihood too: the h returns' negative log-likelihood under N(0, exp z / h) each is
    (h / 2)(z + RV / exp z) + const = (h / 2)(QLIKE + ln RV + 1) + const, so both have the same minimiser, E[RV | the
    window]; QLIKE's zero at z = ln RV makes its value readable. Its prior is the ln of the training rows' mean RV
    (the constant that minimises QLIKE on them); its validation metric is QLIKE itself. No decision rule: a forecast
    takes no action."""

    horizon: int = DEFAULT_HORIZON  # type: ignore[misc]  # an instance's, unlike Buy/Sell/Hold's class-wide 1

    kind: ClassVar[str] = "vol"
    returns: ClassVar[str | None] = "close"  # close-to-close, whatever the classes' tokenize.label_source
    outputs: ClassVar[tuple[str, ...]] = ("log_variance",)
    head_width: ClassVar[int] = 1
    target_dtype: ClassVar[type[pl.DataType]] = pl.Float32
    probe_objective: ClassVar[str | None] = "gamma"  # the probes regress RV on QLIKE too (stages.probe_learners)
    # its forecasts size a volatility-targeted position (backtest/volatility_targeting.policy_targeting): each
    # policy's backtests partition, traced by `lineage` like a rule's
    sizes_positions: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int) or self.horizon < 1:
            raise ValueError(f"a volatility horizon is a whole number of sessions >= 1, got {self.horizon!r}")

    @property
    def key(self) -> str:
        return f"vol{self.horizon}"  # splinegpt_vol5_seed1234, adapters/task=vol5, labels column label_vol_vol5

    def target(self, forward: np.ndarray) -> np.ndarray:
        return log_realized_variance(np.asarray(forward)[:, : self.horizon])

    def loss(self, logits, target):
        """The mean QLIKE of the batch's known targets; 0 (with a gradient path) when none is known."""
        known = target.isfinite()
        gap = target[known] - logits[:, 0][known]
        return (gap.exp() - gap - 1.0).mean() if bool(known.any()) else logits.sum() * 0.0

    val_loss = loss

    def summary(self, targets: np.ndarray) -> dict:
        """The training rows' count and mean RV (of the known targets)."""
        values = np.asarray(targets, dtype=np.float64)
        values = values[np.isfinite(values)]
        return {"rows": int(values.size), "mean_variance": float(np.mean(np.exp(values))) if values.size else 1.0}

    def prior(self, summary: dict) -> np.ndarray:
        return np.array([np.log(summary["mean_variance"])])

    def outputs_of(self, logits) -> np.ndarray:
        return logits.float().numpy()

    def reported(self, settings) -> bool:
        """The first horizon the run names (``tokenize.vol_horizons``; next week by default) is the report's; the
        others are swept on the tau sweep's folds and seeds."""
        return self.horizon == settings.tokenize.vol_horizons[0]

    def evaluated_by(self, variant, settings) -> bool:
        """The variants that fit any target (the fine-tuned transformers: ``Variant.any_target``) and the probes,
        as regressors on their tokenization's features (``probe_objective``); not the fixed rules, which forecast
        nothing."""
        return variant.any_target or getattr(variant, "learner", None) is not None

    evidence_reads_bars: ClassVar[bool] = True  # the references are fitted on the bars

    def evidence_titles(self) -> dict[str, str]:
        h = self.horizon
        return {
            "forecasters": f"Next-{h}-session variance: the models against vol20, EWMA, GARCH and HAR",
            "references": f"Next-{h}-session variance: each model against HAR and GARCH, seeds as replicates",
            "tokenizations": f"Next-{h}-session variance: spline tokens against the others, seeds as replicates",
            "targeting": f"Volatility targeting on each next-{h}-session forecast, against Buy & Hold",
        }

    def evidence(
        self,
        settings,
        predictions: pl.DataFrame,
        bars: pl.DataFrame | None = None,
        oracle: pl.DataFrame | None = None,
    ) -> dict[str, pl.DataFrame]:
        """Every forecaster on the same test ticker-days (``volatility_evidence.forecaster_table``: QLIKE with its
        block interval, MSE, R^2 of ln RV, rank IC, Diebold-Mariano against HAR, the model confidence set), each
        model against HAR and GARCH and the tokenizations' paired rows, both with seeds as replicates
        (``reference_table``, ``tokenization_table``), and volatility targeting on each forecast against Buy & Hold
        at the verdict's cost (``volatility_targeting.targeting_table``). ``oracle``: a planted universe's exact
        forecast (``KP_PLANTED_VOL``), a row of its own among the forecasters, never one the comparisons name."""
        # arch and statsmodels load here, not wherever the settings are read (the registry imports this module)
        from kinematic_pipeline.backtest.volatility_evidence import (
            forecaster_table,
            reference_table,
            scored_forecasts,
            tokenization_table,
        )
        from kinematic_pipeline.backtest.volatility_targeting import targeting_table

        if bars is None:
            raise ValueError("the volatility task's evidence needs the bars of its predictions' tickers")
        scored, train_mean = scored_forecasts(predictions, bars, self.horizon, settings.folds, oracle)
        ev = settings.evaluate
        reps, first_cut = ev.skill_bootstrap_resamples, min(f.train_end for f in settings.folds)
        return {
            "forecasters": forecaster_table(scored, self.horizon, train_mean, reps=reps),
            "references": reference_table(scored, n_boot=reps, fitted_once=_fitted_once(settings)),
            "tokenizations": tokenization_table(scored, n_boot=reps),
            "targeting": targeting_table(scored, bars, self.horizon, first_cut, ev.verdict_cost_bps, ev.backtest),
        }

    def verdict_rows(self, tables: dict[str, pl.DataFrame]) -> list[dict]:
        """Does a learned forecaster beat HAR and GARCH, and do spline tokens beat the others, on this horizon
        (``volatility_evidence.verdict_rows``); only the reported horizon's (the others are swept)."""
        from kinematic_pipeline.backtest.volatility_evidence import verdict_rows

        return verdict_rows(tables, self.horizon)


def _fitted_once(settings) -> frozenset[str]:
    """The run's variants fitted once, not per training seed (``Variant.seeded`` false: the probes)."""
    return frozenset(name for name in settings.evaluated_variants if not lookup_variant(name).seeded)
