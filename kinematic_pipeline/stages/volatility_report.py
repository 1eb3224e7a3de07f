"""The volatility task's figures from the run's files: the reported volatility task's predictions, its references
refitted on the bars as its evidence tables fit them (``tasks.volatility.RealizedVariance.evidence``), drawn by
``report.volatility_figures``. A run without a reported volatility task, or before its predictions are written,
draws none. No dagster here.
"""

from __future__ import annotations

from pathlib import Path

from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.task_evidence import task_bars, task_oracle, task_predictions

VOLATILITY_FIGURES = ("volatility_forecasts", "volatility_qlike", "volatility_targeting")  # report_titles' names


def volatility_figures(settings: Settings, focus: str, out: Path) -> dict[str, Path]:
    """The volatility figures (``VOLATILITY_FIGURES``) written under ``out``, by name: forecast against realized and
    the volatility-targeting equity of ``focus`` (the first ticker forecast when it is not), the oracle's (a planted
    run's), HAR's, GARCH's and each model variant's first seed's (``shown_forecasters``), and QLIKE by forecaster; none without a reported volatility
    task with predictions."""
    task = next((t for t in settings.tasks if t.kind == "vol" and t.reported(settings)), None)
    predictions = task_predictions(settings, task) if task is not None else None
    if predictions is None or not predictions.height:
        return {}
    # arch and statsmodels load here, as the task's evidence loads them, not wherever the stages are imported
    from kinematic_pipeline.backtest.volatility_evidence import forecaster_table, scored_forecasts
    from kinematic_pipeline.report import volatility_figures as draw

    ev, h = settings.evaluate, task.horizon
    bars = task_bars(settings, predictions)
    scored, train_mean = scored_forecasts(predictions, bars, h, settings.folds, task_oracle(settings, task))
    tickers = scored["ticker"].unique().sort().to_list()
    ticker = focus if focus in tickers or not tickers else tickers[0]
    shown = draw.shown_forecasters(scored["forecaster"].unique(maintain_order=True).to_list())
    paths = {name: out / f"{name}.png" for name in VOLATILITY_FIGURES}
    draw.forecasts_png(scored, ticker, shown, paths["volatility_forecasts"], days=ev.figure_days)
    draw.qlike_png(
        forecaster_table(scored, h, train_mean, reps=ev.skill_bootstrap_resamples), paths["volatility_qlike"]
    )
    first_cut = min(f.train_end for f in settings.folds)  # sigma_target's days, as the targeting table's
    equity = draw.targeting_equity(scored, bars, ticker, shown, h, first_cut, ev.verdict_cost_bps, ev.backtest)
    draw.targeting_png(equity, ticker, paths["volatility_targeting"])
    return paths
