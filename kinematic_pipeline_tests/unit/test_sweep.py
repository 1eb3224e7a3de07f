"""Cost sweep over stored predictions (against direct engine + metric calls) and the Numba block bootstrap
(against its numpy twin)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import metrics as m
from kinematic_pipeline.backtest.engine import buy_and_hold, run_backtest
from kinematic_pipeline.backtest.sweep import (
    EQUITY_SCHEMA,
    METRICS_SCHEMA,
    TRADES_SCHEMA,
    bootstrap_seed,
    run_sweep,
)
from kinematic_pipeline.paper_conventions import BacktestConfig
from kinematic_pipeline.tasks.actions import stored_probabilities
from kinematic_pipeline_tests.helpers.frames import policy_series
from kinematic_pipeline_tests.naive_backtest import naive_block_bootstrap_sharpe_ci

B, S, H = 0, 1, 2
KEYS = ["variant", "tau", "seed", "ticker", "cost_bps"]
START = dt.date(2023, 1, 2)
SMALL = BacktestConfig(costs_bps=(0.0, 10.0), tax_year_days=10, bootstrap_resamples=200)  # short tax years: taxes


def _predictions(n_days=40, tickers=("AAA", "BBB"), variants=("lora", "zero_shot"), taus=(0.005, 0.01), seed=0):
    """Random-walk closes (one per ticker), persistent actions, Dirichlet probabilities, some unlabelled days."""
    rng = np.random.default_rng(seed)
    dates = [START + dt.timedelta(days=i) for i in range(n_days)]
    parts = []
    for ticker in tickers:
        close = 100 * np.exp(np.cumsum(rng.normal(0.001, 0.03, n_days)))
        for variant in variants:
            for tau in taus:
                probs = rng.dirichlet([2.0, 2.0, 3.0], n_days)
                labels = rng.integers(0, 3, n_days)
                labels[rng.random(n_days) < 0.2] = -1
                parts.append(policy_series(variant, tau, 7, ticker, dates, close, probs, labels))
    return pl.concat(parts)


def _series(pred: pl.DataFrame, variant, tau, ticker) -> pl.DataFrame:
    return pred.filter((pl.col("variant") == variant) & (pl.col("tau") == tau) & (pl.col("ticker") == ticker)).sort(
        "date"
    )


def _row(frame: pl.DataFrame, variant, tau, ticker, cost_bps) -> dict:
    tau_match = pl.col("tau").is_null() if tau is None else pl.col("tau") == tau
    rows = frame.filter(
        (pl.col("variant") == variant) & tau_match & (pl.col("ticker") == ticker) & (pl.col("cost_bps") == cost_bps)
    )
    assert rows.height >= 1
    return rows


# ----------------------------------------------------------------------------------------------- sweep


def test_metrics_rows_match_direct_engine_and_metric_calls():
    pred = _predictions()
    out = run_sweep(pred, SMALL)
    assert out.metrics.height == (2 * 2 * 2 + 2) * 2  # 8 policy series + 2 Buy & Hold, 2 costs each
    for variant in ("lora", "zero_shot"):
        for tau in (0.005, 0.01):
            for ticker in ("AAA", "BBB"):
                s = _series(pred, variant, tau, ticker)
                close, actions = s["close"].to_numpy(), s["action"].to_numpy()
                probs = s.select("p_buy", "p_sell", "p_hold").to_numpy().astype(np.float64)
                labels = s["label"].to_numpy()
                for cost in (0.0, 10.0):
                    r = run_backtest(close, actions, cost, SMALL)
                    row = _row(out.metrics, variant, tau, ticker, cost).row(0, named=True)
                    seed = bootstrap_seed(0, (variant, tau, 7, ticker))
                    lo, hi = m.block_bootstrap_sharpe_ci(r.equity, 20, 200, seed)
                    keep = labels >= 0
                    expected = {
                        "days": 40,
                        "first_date": START,
                        "last_date": START + dt.timedelta(days=39),
                        "final_equity": r.equity[-1],
                        "total_return": m.total_return(r.equity),
                        "sharpe": m.sharpe(r.equity),
                        "sharpe_ci_low": lo,
                        "sharpe_ci_high": hi,
                        "sortino": m.sortino(r.equity),
                        "max_drawdown": m.max_drawdown(r.equity),
                        "turnover_annual": m.annualized_turnover(r),
                        "n_trades": len(r.trades),
                        "n_invalid": r.n_invalid,
                        "taxes_paid": sum(a for _, a in r.taxes),
                        "pending_realized_gain": r.pending_realized_gain,
                        "n_buy": int(np.sum(actions == B)),
                        "n_sell": int(np.sum(actions == S)),
                        "n_hold": int(np.sum(actions == H)),
                        "action_rate": m.action_rate(actions),
                        "liquidation_equilibrium": m.liquidation_equilibrium(r.position),
                        "exposure": r.position.mean(),
                        "accuracy": np.mean(actions[keep] == labels[keep]),
                        "brier": m.brier_score(probs, labels),
                        "ece": m.expected_calibration_error(probs, labels),
                    }
                    for name, value in expected.items():  # the same calls on the same arrays: bit-identical
                        assert row[name] == value or (math.isnan(row[name]) and math.isnan(value)), name
                    eq = _row(out.equity, variant, tau, ticker, cost)
                    np.testing.assert_array_equal(eq["equity"].to_numpy(), r.equity)
                    np.testing.assert_array_equal(eq["position"].to_numpy(), r.position)
                    np.testing.assert_array_equal(eq["action"].to_numpy(), actions)
                    assert eq["date"].to_list() == s["date"].to_list()
                    tr = out.trades.filter(
                        (pl.col("variant") == variant)
                        & (pl.col("tau") == tau)
                        & (pl.col("ticker") == ticker)
                        & (pl.col("cost_bps") == cost)
                    )
                    assert tr["date"].to_list() == [s["date"][int(d)] for d in r.trades["day"]]
                    for name in ("side", "price", "shares", "notional", "cost"):
                        np.testing.assert_array_equal(tr[name].to_numpy(), r.trades[name])
    assert out.metrics["taxes_paid"].sum() > 0  # the short tax years did bill something


def test_brier_and_ece_score_the_de_weighted_probabilities_of_a_no_information_classifier():
    # The classifier knows only the base rates: its weighted softmax is q ∝ w * base on every day, and the
    # labels are drawn at the base rates. Its de-weighted probabilities (what the predictions store) are the base
    # rates themselves, so their Brier score is the reference Brier 1 - Σ base² and they are calibrated; q is not.
    w, base, n = np.array([2.0, 10.0, 1.0]), np.array([0.24, 0.22, 0.54]), 20_000
    q = w * base / (w * base).sum()
    labels = np.random.default_rng(0).choice(3, n, p=base)

    def frame(probs) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "variant": "lora",
                "tau": 0.01,
                "seed": 7,
                "ticker": "AAA",
                "date": [START + dt.timedelta(days=i) for i in range(n)],
                "close": 100.0,
                **{c: np.full(n, v) for c, v in zip(("p_buy", "p_sell", "p_hold"), probs)},
                "action": np.full(n, S, dtype=np.int8),  # the weighted argmax: Sell
                "label": labels.astype(np.int8),
            }
        )

    kw = dict(config=BacktestConfig(costs_bps=(0.0,), bootstrap_resamples=0), benchmark=False)
    stored = stored_probabilities(q[None, :], tuple(w))[0]  # as predictions_frame does
    fixed = run_sweep(frame(stored), **kw).metrics.row(0, named=True)
    reference_brier = 1 - np.sum(base**2)  # ≈ 0.602
    assert fixed["brier"] == pytest.approx(reference_brier, abs=0.01)  # sampling sd ≈ 0.002
    assert fixed["brier"] == pytest.approx(m.brier_score(np.tile(base, (n, 1)), labels), rel=1e-6)
    assert fixed["ece"] < 0.02
    raw = run_sweep(frame(q.astype(np.float32)), **kw).metrics.row(0, named=True)  # the weighted softmax as p
    assert raw["brier"] == pytest.approx(1 - 2 * q @ base + q @ q, abs=0.01)  # ≈ 0.964
    assert raw["ece"] == pytest.approx(q.max() - base[S], abs=0.01)  # confident Sell (0.68), right 22% of days
    assert raw["accuracy"] == fixed["accuracy"]  # the actions are scored the same way
    with pytest.raises(ValueError, match="class_weights"):
        stored_probabilities(q[None, :], (1.0, 0.0, 1.0))


def test_buy_and_hold_rows_equal_buy_and_hold():
    pred = _predictions()
    out = run_sweep(pred, SMALL)
    for ticker in ("AAA", "BBB"):
        close = _series(pred, "lora", 0.01, ticker)["close"].to_numpy()
        for cost in (0.0, 10.0):
            r = buy_and_hold(close, cost, SMALL)
            rows = _row(out.metrics, "buy_and_hold", None, ticker, cost)
            assert rows.height == 1
            row = rows.row(0, named=True)
            assert row["seed"] is None and row["tau"] is None
            assert row["final_equity"] == r.equity[-1]
            assert row["sharpe"] == pytest.approx(m.sharpe(r.equity), rel=1e-12)
            assert row["taxes_paid"] == 0.0 and row["n_trades"] == 1
            assert (row["n_buy"], row["n_sell"], row["n_hold"]) == (1, 0, 39)
            assert row["liquidation_equilibrium"] is False and row["exposure"] == 1.0
            assert row["accuracy"] is None and row["brier"] is None and row["ece"] is None
            eq = _row(out.equity, "buy_and_hold", None, ticker, cost)
            np.testing.assert_array_equal(eq["equity"].to_numpy(), r.equity)
    assert run_sweep(pred, SMALL, benchmark=False).metrics["variant"].unique().sort().to_list() == [
        "lora",
        "zero_shot",
    ]


def test_always_sell_is_flagged_liquidation_equilibrium_with_nan_sharpe():
    pred = _predictions(tickers=("AAA",), variants=("lora",), taus=(0.01,))
    pred = pred.with_columns(action=pl.lit(S, dtype=pl.Int8))
    row = _row(run_sweep(pred, SMALL).metrics, "lora", 0.01, "AAA", 10.0).row(0, named=True)
    assert row["liquidation_equilibrium"] is True
    assert math.isnan(row["sharpe"]) and math.isnan(row["sortino"])
    assert math.isnan(row["sharpe_ci_low"]) and math.isnan(row["sharpe_ci_high"])
    assert row["exposure"] == 0.0 and row["n_trades"] == 0 and row["n_invalid"] == 40
    assert row["final_equity"] == 10_000.0 and row["action_rate"] == 1.0


def test_unlabelled_series_have_nan_accuracy_brier_and_ece():
    pred = _predictions(tickers=("AAA",), variants=("lora",), taus=(0.01,)).with_columns(label=pl.lit(-1))
    row = run_sweep(pred, SMALL, benchmark=False).metrics.row(0, named=True)
    assert math.isnan(row["accuracy"]) and math.isnan(row["brier"]) and math.isnan(row["ece"])


def test_two_runs_and_shuffled_input_give_identical_sorted_frames():
    pred = _predictions()
    a = run_sweep(pred, SMALL)
    b = run_sweep(pred.sample(fraction=1.0, shuffle=True, seed=3), dataclasses.replace(SMALL, costs_bps=(10.0, 0.0)))
    for name, schema in (("metrics", METRICS_SCHEMA), ("equity", EQUITY_SCHEMA), ("trades", TRADES_SCHEMA)):
        fa, fb = getattr(a, name), getattr(b, name)
        assert fa.schema == pl.Schema(schema)
        assert fa.equals(fb), name
        order = KEYS + (["date"] if "date" in fa.columns else [])
        assert fa.equals(fa.sort(order, maintain_order=True)), name


def test_a_rows_bootstrap_does_not_depend_on_the_other_series_in_the_sweep():
    pred = _predictions()
    full = run_sweep(pred, SMALL).metrics
    alone = run_sweep(_series(pred, "zero_shot", 0.01, "BBB"), SMALL, benchmark=False).metrics
    ci = ["sharpe_ci_low", "sharpe_ci_high"]
    expected = _row(full, "zero_shot", 0.01, "BBB", 0.0).select(ci)
    assert _row(alone, "zero_shot", 0.01, "BBB", 0.0).select(ci).equals(expected)
    assert run_sweep(pred, dataclasses.replace(SMALL, bootstrap_resamples=0)).metrics["sharpe_ci_low"].is_nan().all()
    other_seed = run_sweep(pred, dataclasses.replace(SMALL, bootstrap_seed=1)).metrics
    assert not other_seed["sharpe_ci_low"].equals(full["sharpe_ci_low"])


def _break(pred: pl.DataFrame, i: int, **values) -> pl.DataFrame:
    return pl.concat([pred[:i], pred[i : i + 1].with_columns(**values), pred[i + 1 :]], how="vertical_relaxed")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.drop("p_hold"), r"lack column\(s\) \['p_hold'\]"),
        (lambda p: _break(p, 45, close=float("nan")), r"ticker='AAA' date=2023-01-07 has close=nan"),
        (lambda p: _break(p, 45, close=0.0), r"close must be finite and > 0.*date=2023-01-07 has close=0.0"),
        (lambda p: _break(p, 3, action=pl.lit(5, pl.Int8)), r"variant='lora'.*date=2023-01-05 has action=5"),
        (lambda p: _break(p, 3, label=pl.lit(3, pl.Int8)), r"ticker='AAA' date=2023-01-05 has label=3"),
        (lambda p: _break(p, 3, p_buy=pl.lit(1.5, pl.Float32)), r"date=2023-01-05 has p_buy=1.5"),
        (lambda p: pl.concat([p, p[41:42]]), r"duplicate.*tau=0.01 seed=7 ticker='AAA' date=2023-01-03"),
        (lambda p: _break(p, 0, close=None), r"null close"),
        (lambda p: p.with_columns(action=pl.lit("buy")), r"column 'action' \(String\) cannot be read"),
        (lambda p: _break(p, 0, variant=pl.lit("buy_and_hold")), r"reserved.*variant='buy_and_hold'"),
        (
            lambda p: p.filter(~((pl.col("tau") == 0.01) & (pl.col("date") == dt.date(2023, 1, 20)))),
            r"ticker 'AAA'.*first differing date 2023-01-20",
        ),
        (lambda p: _break(p, 50, close=123.0), r"ticker 'AAA'.*different close on 2023-01-12"),
    ],
)
def test_invalid_predictions_raise_naming_the_ticker_date_and_column(edit, message):
    pred = _predictions(tickers=("AAA",), variants=("lora",), taus=(0.005, 0.01))  # rows 0-39 tau 0.005
    with pytest.raises(ValueError, match=message):
        run_sweep(edit(pred), SMALL)


def test_unaligned_dates_are_fine_without_the_benchmark():
    pred = _predictions(tickers=("AAA",), variants=("lora",), taus=(0.005, 0.01))
    pred = pred.filter(~((pl.col("tau") == 0.01) & (pl.col("date") == dt.date(2023, 1, 20))))
    days = run_sweep(pred, SMALL, benchmark=False).metrics["days"].to_list()
    assert days == [40, 40, 39, 39]


# ------------------------------------------------------------------------------------------- bootstrap


def _gbm(rng, n, drift=0.0005, vol=0.015):
    return 10_000 * np.cumprod(1 + rng.normal(drift, vol, n))


def _assert_same_ci(equity, **kw):
    with np.errstate(divide="ignore", invalid="ignore"):
        fast = m.block_bootstrap_sharpe_ci(equity, **kw)
        slow = naive_block_bootstrap_sharpe_ci(equity, **kw)
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12, equal_nan=True)
    return fast


@pytest.mark.parametrize("seed", range(6))
def test_fast_bootstrap_equals_the_numpy_twin_on_random_curves(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 1200))
    ci = _assert_same_ci(_gbm(rng, n), block=int(rng.integers(1, 60)), n_boot=int(rng.integers(50, 600)), seed=seed)
    assert np.all(np.isfinite(ci))


def _mostly_cash(n=300):
    """Long on a few days only: many resamples are all zero returns (std exactly 0 -> dropped)."""
    equity = np.full(n, 10_000.0)
    equity[100:104] = [10_100.0, 9_950.0, 10_300.0, 10_250.0]
    equity[104:] = 10_250.0
    return equity


@pytest.mark.parametrize(
    ("equity", "kw"),
    [
        (np.full(200, 10_000.0), {}),  # flat: every resample undefined
        (_gbm(np.random.default_rng(1), 12), {"block": 20}),  # n < block
        (_gbm(np.random.default_rng(2), 21), {"block": 20}),  # n == block
        (_gbm(np.random.default_rng(3), 3), {}),  # 2 returns
        (np.array([100.0, 101.0]), {}),  # 1 return: no CI
        (np.array([100.0]), {}),  # 0 returns
        (100 * 1.001 ** np.arange(300), {}),  # constant growth: std 0 up to rounding
        (_mostly_cash(), {"block": 5, "n_boot": 500}),
        (_gbm(np.random.default_rng(4), 300), {"block": 1}),  # iid bootstrap
        (_gbm(np.random.default_rng(5), 300), {"block": 0}),  # clipped to 1
        (_gbm(np.random.default_rng(6), 300), {"alpha": 0.5, "rf_annual": 0.0, "periods": 12}),
        (np.r_[_gbm(np.random.default_rng(7), 100), 0.0, 5.0, _gbm(np.random.default_rng(8), 100)], {}),  # inf/nan
    ],
)
def test_fast_bootstrap_equals_the_numpy_twin_on_edge_curves(equity, kw):
    _assert_same_ci(equity, **kw)


def test_fast_bootstrap_of_a_flat_curve_and_of_one_return_is_nan():
    assert all(math.isnan(x) for x in m.block_bootstrap_sharpe_ci(np.full(100, 1.0)))
    assert all(math.isnan(x) for x in m.block_bootstrap_sharpe_ci(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match="n_boot"):
        m.block_bootstrap_sharpe_ci(np.full(100, 1.0), n_boot=0)
