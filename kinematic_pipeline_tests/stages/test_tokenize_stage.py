"""The tokenize stage on disk: no look-ahead, byte-identical shards, zero volume as a missing measurement,
labels, alpha by marginal likelihood, and corpus statistics that never read the test period."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.stages.alpha import materialize_alpha_estimates
from kinematic_pipeline.stages.corpus import fit_corpus_stats
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.buy_sell_hold import tau_column
from kinematic_pipeline.tokenizations import SPLINE, TOKENIZATIONS
from kinematic_pipeline.tokenize import tokenize_price_windows, tokenize_volume_windows
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline_tests.conftest import CUT, END, START, _bars, _perturb_after, _run_all, _settings

TOKEN_ASSETS = ("spline_tokens", "fd_tokens", "raw_tokens")  # the three tokenizations' assets


@pytest.mark.slow
def test_tokens_and_labels_do_not_change_when_future_bars_change(tmp_path):
    bars = _bars()
    base = _settings(tmp_path, "base", bars)
    other = _settings(tmp_path, "perturbed", _perturb_after(bars, CUT))
    days = _run_all(base)
    assert _run_all(other) == days
    before, after = [d for d in days if d <= CUT], [d for d in days if d > CUT]
    assert len(before) > 50 and len(after) > 20
    for asset in TOKEN_ASSETS:
        for day in before:  # windows ending on or before t: bit-identical shards
            assert file_sha256(base.warehouse.shard(asset, day)) == file_sha256(other.warehouse.shard(asset, day)), (
                asset,
                day,
            )
        changed = [
            d
            for d in after
            if file_sha256(base.warehouse.shard(asset, d)) != file_sha256(other.warehouse.shard(asset, d))
        ]
        assert changed == after, f"{asset}: the perturbation must reach every later window"
    for day in before[:-1]:  # labels of day t use day t+1: identical up to t-1
        assert file_sha256(base.warehouse.shard("labels", day)) == file_sha256(other.warehouse.shard("labels", day)), (
            day
        )
    assert file_sha256(base.warehouse.shard("labels", CUT)) != file_sha256(other.warehouse.shard("labels", CUT))


@pytest.mark.slow
def test_rematerializing_a_day_gives_a_byte_identical_shard(tmp_path):
    settings = _settings(tmp_path, "wh", _bars())
    days = _run_all(settings)
    day = days[40]
    before = {a: file_sha256(settings.warehouse.shard(a, day)) for a in (*TOKEN_ASSETS, "labels")}
    materialize_tokens(settings, [day], progress=False)  # the nightly path: one day alone
    materialize_labels(settings, [day], progress=False)
    assert {a: file_sha256(settings.warehouse.shard(a, day)) for a in before} == before


@pytest.mark.slow
def test_a_zero_volume_day_is_a_missing_measurement_and_tokens_stay_finite(tmp_path):
    bars = _bars(2)
    zero_day = dt.date(2021, 5, 12)
    bars = bars.with_columns(
        pl.when((pl.col("ticker") == "SYN000") & (pl.col("date") == zero_day))
        .then(0.0)
        .otherwise(pl.col("volume"))
        .alias("volume")
    )
    settings = _settings(tmp_path, "wh", bars)
    _run_all(settings)
    day = dt.date(2021, 5, 20)  # a window that contains the zero-volume day
    shard = pl.read_parquet(settings.warehouse.shard("spline_tokens", day)).filter(pl.col("ticker") == "SYN000")
    tokens = shard["tokens"].to_numpy()[0]
    assert np.isfinite(tokens).all() and shard["n_missing_volume"][0] == 1
    # The same window solved directly with that measurement dropped (NaN): identical volume tokens.
    sessions = trading_days(START, day)[-65:]
    ticker = bars.filter(pl.col("ticker") == "SYN000").filter(pl.col("date").is_in(sessions)).sort("date")
    log_volume = np.log(np.where(ticker["volume"].to_numpy() > 0, ticker["volume"].to_numpy(), np.nan))[1:]
    assert np.isnan(log_volume).sum() == 1
    expected = tokenize_volume_windows(log_volume[None, :], 5.0)[0]
    np.testing.assert_array_equal(tokens[:, 4:], expected.astype(np.float32))
    expected_price = tokenize_price_windows(np.log(ticker["close"].to_numpy())[None, :], 5.0)[0]
    np.testing.assert_array_equal(tokens[:, :4], expected_price.astype(np.float32))


@pytest.mark.slow  # nightly lane (the fast lane keeps its budget)
def test_labels_follow_the_next_days_return(tmp_path):
    settings = _settings(tmp_path, "wh", _bars())
    days = _run_all(settings)
    labels = query(settings.warehouse, "SELECT * FROM labels ORDER BY ticker, date")
    closes = query(settings.warehouse, "SELECT ticker, date, close FROM raw_ohlcv")
    day = labels["date"].unique().sort()[10]
    row = labels.filter(pl.col("date") == day).row(0, named=True)
    c = closes.filter(pl.col("ticker") == row["ticker"]).sort("date")
    i = c["date"].to_list().index(day)
    assert row["r_close"] == pytest.approx(np.log(c["close"][i + 1] / c["close"][i]), abs=1e-12)
    assert row["label_source"] == "spline"
    r = labels["r_spline"].to_numpy()
    for tau in settings.tokenize.taus:
        col = labels[tau_column(tau)].to_numpy()
        known = ~np.isnan(r)
        assert ((col[known] == 0) == (r[known] > tau)).all() and ((col[known] == 1) == (r[known] < -tau)).all()
    last = labels.filter(pl.col("date") == days[-1])
    assert (last[tau_column(0.01)] == -1).all()  # the newest day's next bar does not exist yet


def test_mle_alpha_is_estimated_on_the_training_period_and_used_by_the_tokenizer(tmp_path):
    settings = _settings(tmp_path, "wh", _bars(), alpha_price="mle", alpha_volume="mle")
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    estimates = materialize_alpha_estimates(settings).estimates
    corpus = estimates.filter(pl.col("scope") == "__corpus__")
    assert corpus["fit_end"].to_list() == [CUT, CUT] and (corpus["alpha"] > 0).all()
    summaries = materialize_tokens(settings, days[-3:], tokenizations=(SPLINE,), progress=False)
    alpha_price = corpus.filter(pl.col("kind") == "price")["alpha"][0]
    assert summaries["spline_tokens"].manifest["alpha_price"][0] == f"mle:corpus:corpus={alpha_price:.6g}"


@pytest.mark.slow  # nightly lane (the fast lane keeps its budget)
def test_corpus_stats_never_read_a_shard_after_the_training_cut(tmp_path):
    settings = _settings(tmp_path, "wh", _bars())
    days = _run_all(settings)
    for tok in TOKENIZATIONS.values():
        materialize_window_store(settings, tok, progress=False)
    stats = pl.concat([fit_corpus_stats(settings, tok) for tok in TOKENIZATIONS.values()])
    assert (stats["fit_end"] <= CUT).all() and stats.height == 3 * 7
    for asset in TOKEN_ASSETS:  # wreck every later shard: an honest fit cannot notice
        for day in (d for d in days if d > CUT):
            settings.warehouse.shard(asset, day).write_bytes(b"not parquet")
    assert pl.concat([fit_corpus_stats(settings, tok) for tok in TOKENIZATIONS.values()]).equals(stats)
    # anchored channels start at zero; z-scored spline channels are standardized on the training windows
    tokens = pl.read_parquet([settings.warehouse.shard("spline_tokens", d) for d in days if d <= CUT])[
        "tokens"
    ].to_numpy()
    normalized = SPLINE.normalize(tokens, stats)
    assert (normalized[:, 0, [0, 4]] == 0).all()
    # the slow way: every token of the training shards at once, numpy's mean and std
    values = tokens.astype(np.float64).reshape(-1, 9)
    spline = stats.filter(pl.col("tokenization") == "spline").sort("channel")
    channels = spline["channel"].to_list()
    np.testing.assert_allclose(spline["mean"].to_numpy(), values.mean(axis=0)[channels], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(spline["std"].to_numpy(), values.std(axis=0)[channels], rtol=1e-9)
    z = normalized[:, :, [1, 2, 3, 5, 6, 7, 8]].reshape(-1, 7)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-3)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-3)


def test_numba_kernels_use_a_threading_layer_that_does_not_starve_torch():
    import subprocess
    import sys

    code = (
        "import numpy as np, numba\n"
        "from kinematic_pipeline.tokenize import tokenize_price_windows\n"
        "tokenize_price_windows(np.cumsum(np.ones((64, 65)), axis=1), 5.0)\n"
        "print(numba.threading_layer())\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "workqueue"  # OpenMP here + torch's OpenMP slowed training 30-75x


@pytest.mark.slow
def test_token_days_are_pinned_to_the_raw_days_behind_their_windows(tmp_path):
    """A bar corrected and re-ingested on day d makes exactly the token days whose windows read d (d and the 64
    sessions after it) stale; every reader refuses them naming both digests; re-tokenizing them restores the pin."""
    from kinematic_pipeline.orchestration.checks import build_token_checks
    from kinematic_pipeline.pins import StalePairError, check_token_inputs, stale_token_days

    bars = _bars()
    settings = _settings(tmp_path, "wh", bars)
    days = _run_all(settings)
    assert all(stale_token_days(settings, kind, days) == [] for kind in TOKEN_ASSETS)  # pinned as written
    day = days[10]
    corrected = bars.with_columns(
        close=pl.when((pl.col("date") == day) & (pl.col("ticker") == bars["ticker"][0]))
        .then(pl.col("close") * 1.01)
        .otherwise(pl.col("close"))
    )
    corrected.write_parquet(settings.data.source_path)
    materialize_raw_ohlcv(settings, [day], progress=False)  # the re-ingest of one corrected day
    sessions = trading_days(day, END)
    reading_day = [d for d in days if d in set(sessions[:65])]
    assert len(reading_day) == 65
    for kind in TOKEN_ASSETS:
        stale = stale_token_days(settings, kind, days)
        assert [d for d, _, _ in stale] == reading_day, kind
        assert all(recorded != current for _, recorded, current in stale)
    recorded = settings.warehouse.manifest_row("spline_tokens", day, ["raw_inputs_digest"])["raw_inputs_digest"]
    with pytest.raises(StalePairError, match=f"spline_tokens shard of {day} .* digest was {recorded[:16]}"):
        check_token_inputs(settings, "spline_tokens", days)
    with pytest.raises(StalePairError, match="Re-materialize spline_tokens"):
        materialize_window_store(settings, SPLINE)
    check_token_inputs(settings, "spline_tokens", days[:10])  # days before d still hold
    # the asset check says the same in Dagster
    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions

    defs = build_definitions(settings)
    result = dg.materialize(
        [*defs.assets, *build_token_checks(settings)],
        selection=dg.AssetSelection.checks_for_assets("spline_tokens"),
        resources=defs.resources,
        instance=dg.DagsterInstance.ephemeral(),
    )
    (evaluation,) = result.get_asset_check_evaluations()
    assert not evaluation.passed and evaluation.metadata["days_checked"].value == len(days)
    assert "65 of" in evaluation.metadata["detail"].value
    materialize_tokens(settings, reading_day, progress=False)  # re-materialized: the pair holds again
    assert all(stale_token_days(settings, kind, days) == [] for kind in TOKEN_ASSETS)
