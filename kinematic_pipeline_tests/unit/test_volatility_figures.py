"""The volatility task's figures (``report.volatility_figures``) on a small synthetic scored frame: each writes a
non-empty PNG, draws exactly the forecasters it is given, and the targeting equity is the backtest's, checked by a
forecaster whose weight is 1 every day (Buy & Hold's equity) and one at half weight."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.volatility_evidence import forecaster_table
from kinematic_pipeline.report import volatility_figures as draw
from kinematic_pipeline.stages.volatility_report import volatility_figures

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
H = 5
TRAIN = [dt.date(2022, 1, 3) + dt.timedelta(days=i) for i in range(40)]
TEST = [dt.date(2022, 3, 1) + dt.timedelta(days=i) for i in range(30)]
MODELS = ("splinegpt seed 2", "splinegpt seed 1", "rawgpt_fd seed 1")


def _bars() -> pl.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for ticker in ("AAA", "BBB"):
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(TRAIN) + len(TEST))))
        rows += [{"ticker": ticker, "date": d, "close": float(c)} for d, c in zip(TRAIN + TEST, close)]
    return pl.DataFrame(rows)


def _scored(forecasts: dict[str, float] | None = None) -> pl.DataFrame:
    """ticker, date, forecaster, log_variance, log_rv on the test days; ``forecasts``: a constant per forecaster."""
    rng = np.random.default_rng(1)
    names = forecasts or dict.fromkeys(("har", "garch", "vol20", *MODELS), np.log(H * 1e-4))
    rows = []
    for ticker in ("AAA", "BBB"):
        for day in TEST:
            realized = float(np.log(H * 1e-4) + rng.normal(0, 0.5))
            noise = 0.0 if forecasts else 0.1  # given constants are kept exact
            rows += [
                {
                    "ticker": ticker,
                    "date": day,
                    "forecaster": n,
                    "log_variance": v + rng.normal(0, noise),
                    "log_rv": realized,
                }
                for n, v in names.items()
            ]
    return pl.DataFrame(rows)


@pytest.fixture
def drawn(monkeypatch):
    """{file name: the matplotlib figure ``draw`` saved there}, the PNG still written."""
    figures, save = {}, draw.save_figure

    def keep(fig, path):
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(draw, "save_figure", keep)
    return figures


def _labels(fig) -> list[str]:
    return [line.get_label() for ax in fig.axes for line in ax.get_lines()]


def test_the_shown_forecasters_are_har_garch_and_each_variants_first_seed_after_a_planted_runs_oracle():
    names = ["vol20", "garch", *MODELS, "har", "ewma"]
    assert draw.shown_forecasters(names) == ["har", "garch", "rawgpt_fd seed 1", "splinegpt seed 1"]
    assert draw.shown_forecasters([*names, "oracle"])[:3] == ["oracle", "har", "garch"]


def test_forecast_against_realized_draws_exactly_the_forecasters_given(tmp_path, drawn):
    shown = ["har", "splinegpt seed 1"]
    png = draw.forecasts_png(_scored(), "AAA", shown, tmp_path / "f.png")
    assert png.startswith(PNG_SIGNATURE) and (tmp_path / "f.png").stat().st_size == len(png) > 1000
    assert _labels(drawn["f.png"]) == ["realized", *shown]
    assert draw.forecasts_png(_scored(), "ZZZ", shown, tmp_path / "none.png").startswith(PNG_SIGNATURE)  # no data


def test_qlike_by_forecaster_draws_every_row_of_the_table_with_its_interval(tmp_path, drawn):
    table = forecaster_table(_scored(), H, float(np.log(H * 1e-4)), reps=50)
    assert table.height == 6 and {"qlike_low", "qlike_high", "in_mcs"} <= set(table.columns)
    png = draw.qlike_png(table, tmp_path / "q.png")
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1000
    (ax,) = drawn["q.png"].axes
    assert [t.get_text() for t in ax.get_yticklabels()] == table.sort("qlike", descending=True)["forecaster"].to_list()
    assert draw.qlike_png(table.clear(), tmp_path / "empty.png").startswith(PNG_SIGNATURE)


def test_targeting_at_the_training_variance_is_buy_and_hold_and_four_times_it_half_the_exposure(tmp_path):
    bars = _bars()
    returns = np.diff(np.log(bars.filter(pl.col("ticker") == "AAA")["close"].to_numpy()[: len(TRAIN)]))
    at_train = float(np.log(H * np.var(returns, ddof=1)))  # w = min(1, sigma_train / sigma_hat) = 1
    scored = _scored({"har": at_train, "garch": at_train + np.log(4.0)})  # w = 1/2
    equity = draw.targeting_equity(scored, bars, "AAA", ["har", "garch"], H, TRAIN[-1], cost_bps=0.0)
    curves = {n: f["equity"].to_numpy() for (n,), f in equity.partition_by("forecaster", as_dict=True).items()}
    assert set(curves) == {"har", "garch", "buy_and_hold"} and len(curves["har"]) == len(TEST)
    np.testing.assert_allclose(curves["har"], curves["buy_and_hold"], rtol=1e-12)
    hold_move = curves["buy_and_hold"][-1] / curves["buy_and_hold"][0] - 1
    half_move = curves["garch"][-1] / curves["garch"][0] - 1
    assert abs(half_move) < abs(hold_move) and np.sign(half_move) == np.sign(hold_move)
    png = draw.targeting_png(equity, "AAA", tmp_path / "t.png")
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1000


def test_a_run_without_a_volatility_task_or_its_predictions_draws_none(tmp_path):
    from kinematic_pipeline.config import load_settings

    for env in ({}, {"KP_TASKS": "bsh,vol"}):
        settings = load_settings("ci", warehouse=tmp_path / "wh", env=env)
        assert volatility_figures(settings, "SYN000", tmp_path) == {}
    assert not list(tmp_path.glob("*.png"))
