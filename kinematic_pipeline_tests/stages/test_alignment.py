"""Alignment of windows, labels, classes and normalization across training, the probes and prediction (issue 28).

The label paired with a window ending on day t is the outcome of the move from t to the next session (``tasks.buy_sell_hold``:
Buy 0 if r > tau, Sell 1 if r < -tau, Hold 2 otherwise, -1 where the next session's value is missing), the same class
codes everywhere, and the model sees the same normalized window in training and in prediction. A reference computed
here by hand from the source bars (close labels) or from the spline shards' end positions (the paper's spline labels)
fixes what every (ticker, day) must carry; ``check_alignment`` compares to it:

- the (window, label) pairs the fine-tuning ``WindowDataModule`` serves, each traced back to its store row;
- the probes' training rows (``read_features``, what ``materialize_probe`` reads) and the rules' test rows;
- the prediction rows of ``predict`` on the store's days and the test days, made by an "oracle" classifier that
  answers, for a window it was served in training, that window's training class: its action reproduces the training
  label only if prediction feeds it the very array training served and reads its class index the same way;
- the labels shards themselves.

The mutation tests prove the checker fails on a label shifted by one day, two classes swapped, a window paired with
the next day's label, another normalization in prediction, and a permuted class index in the classifier's output.
"""

from __future__ import annotations

import datetime as dt
import math
from itertools import combinations
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline.folds import evaluation_days
from kinematic_pipeline.pins import fold_stats
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors import model as predict_mod
from kinematic_pipeline.predictors.model import predict
from kinematic_pipeline.stages.features import materialize_features, read_features
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_column
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.training import data as data_mod
from kinematic_pipeline.training.data import WindowDataModule
from kinematic_pipeline.variants import VARIANTS
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline_tests.conftest import TOKENIZED_FOLD, _bars, _run_all, _settings, _training_inputs
from kinematic_pipeline_tests.helpers.predictions import baseline_predictions

pytestmark = pytest.mark.slow  # the nightly lane: the fast lane keeps its 8 minutes on a slower machine

BUY, SELL, HOLD, UNKNOWN = 0, 1, 2, -1  # written out here on purpose: the codes the paper's table uses
MODELS = ("splinegpt", "rawgpt_fd", "rawgpt", "patchtst")
PROBE_VARIANTS = {"spline": "lr_spline", "fd": "lr_fd", "raw": "lr_raw"}  # a probe reading each features file
EXACT_TOL = 1e-5  # float32 tokens of a log price (~3.5 .. 5.5): a few 1e-7 apart from the float64 value
RETURN_TOL = 1e-9  # returns recomputed here from the same float64 numbers
TIE_TOL = 1e-9  # |r| this close to tau: the class depends on the last bit; compared only across sources
SPLINE_END_MAX = 0.01  # a smoothing spline's end may sit off ln close_t, but never by a day's move
SPLINE_NEAREST_RATIO = 0.25  # ... and on average far closer to ln close_t than to ln close of t-1 or t+1
MIN_SHARED = 100  # windows at least both served in training and predicted (of ~210), per model

PAIRS_SCHEMA = {
    "source": pl.String,  # train:<variant>, predict:<variant>, probe:<tokenization>, rule:<rule>, labels
    "ticker": pl.String,
    "date": pl.Date,  # the window's last day t
    "label": pl.Int64,  # the label the source pairs with the window of (ticker, t)
    "r": pl.Float64,  # the return behind the label, where the source carries it
    "end_kind": pl.String,  # how end_value identifies the window's last day: log_close | ret1 | spline_end
    "end_value": pl.Float64,  # read off the window's raw tokens
    "close": pl.Float64,  # the day's close the row carries (the backtest's fill price)
    "action": pl.Int64,  # a prediction's decided class (null: the classifier did not decide)
}


# --- the reference, by hand ------------------------------------------------------------------------------------


def _class(r: float | None, tau: float) -> int:
    """The label rule written out: Buy above tau, Sell below -tau, Hold otherwise (ties Hold), -1 unknown."""
    if r is None or math.isnan(r):
        return UNKNOWN
    if r > tau:
        return BUY
    if r < -tau:
        return SELL
    return HOLD


def build_reference(bars: pl.DataFrame, end_positions: dict, label_source: str, tau: float) -> pl.DataFrame:
    """Every (ticker, day t) of the source bars: ln close of t-1, t and the next session, and the expected return
    and class of the label rule ``label_source``: close (ln C_next - ln C_t) or spline (E_next - E_t, E the fitted log
    price at the end of the day's window, from the spline shards). The sessions are the days that have any bar."""
    close = {(t, d): c for t, d, c in bars.select("ticker", "date", "close").iter_rows()}
    sessions = sorted({d for _, d in close})

    def log_close(ticker: str, day: dt.date | None) -> float | None:
        return math.log(close[(ticker, day)]) if (ticker, day) in close else None

    rows = []
    for ticker in sorted({t for t, _ in close}):
        for i, day in enumerate(sessions):
            if (ticker, day) not in close:
                continue
            prev = sessions[i - 1] if i > 0 else None
            nxt = sessions[i + 1] if i + 1 < len(sessions) else None  # the next session, whoever trades on it
            c_t, c_next = log_close(ticker, day), log_close(ticker, nxt)
            r_close = None if c_next is None else c_next - c_t
            e_t, e_next = end_positions.get((ticker, day)), end_positions.get((ticker, nxt))
            r_spline = None if e_t is None or e_next is None else e_next - e_t
            r = r_close if label_source == "close" else r_spline
            rows.append(
                dict(
                    ticker=ticker,
                    date=day,
                    log_close=c_t,
                    prev_log_close=log_close(ticker, prev),
                    next_log_close=c_next,
                    r=r,
                    label=_class(r, tau),
                    ambiguous=r is not None and abs(abs(r) - tau) < TIE_TOL,
                )
            )
    schema = {"ticker": pl.String, "date": pl.Date, "log_close": pl.Float64, "prev_log_close": pl.Float64}
    schema |= {"next_log_close": pl.Float64, "r": pl.Float64, "label": pl.Int64, "ambiguous": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)


def spline_end(raw_window: np.ndarray) -> float:
    """The fitted log price at the window's end: token 63's cubic (Taylor coefficients at knot t_63, day t-1) one
    session later, c0 + c1 + c2/2 + c3/6 (session time: h = 1)."""
    c0, c1, c2, c3 = (float(v) for v in raw_window[63, :4])
    return c0 + c1 + c2 / 2 + c3 / 6


def end_identity(asset: str, raw_window: np.ndarray) -> tuple[str, float]:
    """What the window's last token says about its last day t: raw and fd tokens carry ln close_t as token 63's c0
    (tokenize/baselines.py); spline tokens its smoothed value (``spline_end``)."""
    if asset == "spline_tokens":
        return "spline_end", spline_end(raw_window)
    return "log_close", float(raw_window[63, 0])


# --- the checker -----------------------------------------------------------------------------------------------


def _first(frame: pl.DataFrame) -> str:
    return ", ".join(f"{k}={v}" for k, v in frame.row(0, named=True).items())


def check_alignment(pairs: pl.DataFrame, reference: pl.DataFrame, inputs: dict | None = None) -> None:
    """AssertionError naming the first offending row unless every pair is aligned with the reference:

    1. its (ticker, t) is a bar of the source; its label is the reference class of (ticker, t) (-1 where the next
       session's value is missing; never -1 in a training pair), its return (where given) the reference return;
    2. its window ends on t: ``log_close`` end values are ln close_t, ``ret1`` ones ln close_t - ln close_t-1 (within
       float32), ``spline_end`` ones lie near ln close_t and, per source, on average far nearer to it than to ln close
       of t-1 or t+1; its close (where given) is close_t;
    3. every source gives (ticker, t) the same label; a decided action is that label, and a prediction of a window a
       training source served decides it;
    4. ``inputs`` {model: {"train" | "predict" | "shard": {(ticker, t): model input}}}: the arrays given for the same
       (ticker, t) are identical (training's normalization is prediction's), train and predict share windows, and
       every predicted window is the normalized shard window of its row's (ticker, t).
    """
    assert pairs.height > 0, "no pairs to check"
    ref = reference.rename({c: f"ref_{c}" for c in reference.columns if c not in ("ticker", "date")})
    joined = pairs.join(ref, on=["ticker", "date"], how="left")
    bad = joined.filter(pl.col("ref_log_close").is_null())
    assert bad.height == 0, f"a pair on a day without a bar: {_first(bad)}"
    bad = joined.filter(pl.col("label").is_null())
    assert bad.height == 0, f"a pair without a label: {_first(bad)}"

    # 1. labels and returns
    comparable = ~pl.col("ref_ambiguous")
    bad = joined.filter(comparable & (pl.col("label") != pl.col("ref_label")))
    assert bad.height == 0, f"{bad.height} label(s) differ from the reference outcome of t -> t+1, first: {_first(bad)}"
    bad = joined.filter(pl.col("source").str.starts_with("train:") & (pl.col("label") < 0))
    assert bad.height == 0, f"a training pair with an unknown label: {_first(bad)}"
    r = pl.col("r").fill_nan(None)
    # a source may omit r (null); one that gives it (NaN: unknown) must know a return exactly where the reference does
    bad = joined.filter(pl.col("r").is_not_null() & (r.is_null() != pl.col("ref_r").is_null()))
    assert bad.height == 0, f"a return where the reference has none, or none where it has one: {_first(bad)}"
    bad = joined.filter(r.is_not_null() & ((r - pl.col("ref_r")).abs() > RETURN_TOL))
    assert bad.height == 0, f"{bad.height} return(s) are not the reference's, first: {_first(bad)}"

    # 2. the window's last day, and the day's close
    kind, value = pl.col("end_kind"), pl.col("end_value")
    exact = {
        "log_close": pl.col("ref_log_close"),
        "ret1": pl.col("ref_log_close") - pl.col("ref_prev_log_close"),
    }
    for name, expected in exact.items():
        rows = joined.filter(kind == name)
        bad = rows.filter(expected.is_null() | ((value - expected).abs() > EXACT_TOL))
        assert bad.height == 0, f"{bad.height} window(s) do not end on their day ({name}), first: {_first(bad)}"
    assert set(joined["end_kind"].drop_nulls().unique()) <= set(exact) | {"spline_end"}
    spline = joined.filter(kind == "spline_end")
    bad = spline.filter((value - pl.col("ref_log_close")).abs() > SPLINE_END_MAX)
    assert bad.height == 0, f"{bad.height} spline window end(s) off ln close_t, first: {_first(bad)}"
    for (source,), rows in spline.group_by("source"):
        rows = rows.filter(pl.col("ref_prev_log_close").is_not_null() & pl.col("ref_next_log_close").is_not_null())
        if rows.height == 0:
            continue
        gap = {c: float((rows["end_value"] - rows[c]).abs().mean()) for c in ("ref_log_close", "ref_prev_log_close")}
        gap["ref_next_log_close"] = float((rows["end_value"] - rows["ref_next_log_close"]).abs().mean())
        nearest = min(gap["ref_prev_log_close"], gap["ref_next_log_close"])
        assert gap["ref_log_close"] < SPLINE_NEAREST_RATIO * nearest, f"{source}: spline windows end nearer {gap}"
    bad = joined.filter(
        pl.col("close").is_not_null() & ((pl.col("close").log() - pl.col("ref_log_close")).abs() > 1e-12)
    )
    assert bad.height == 0, f"{bad.height} row(s) carry another day's close, first: {_first(bad)}"

    # 3. one label per (ticker, t) everywhere; decisions in the labels' class codes
    labels = joined.group_by("ticker", "date").agg(pl.col("label").n_unique().alias("n"), pl.col("source"), "label")
    bad = labels.filter(pl.col("n") > 1)
    assert bad.height == 0, f"sources disagree on a label: {_first(bad)}"
    bad = joined.filter(pl.col("action").is_not_null() & (pl.col("action") != pl.col("label")))
    assert bad.height == 0, f"{bad.height} decision(s) in another class code than the label, first: {_first(bad)}"
    served = joined.filter(pl.col("source").str.starts_with("train:")).select(
        pl.col("source").str.strip_prefix("train:").alias("model"), "ticker", "date", pl.col("label").alias("served")
    )
    predicted = joined.filter(pl.col("source").str.starts_with("predict:")).with_columns(
        pl.col("source").str.strip_prefix("predict:").alias("model")
    )
    both = predicted.join(served, on=["model", "ticker", "date"])
    bad = both.filter(pl.col("action").is_null() | (pl.col("action") != pl.col("served")))
    assert bad.height == 0, f"{bad.height} served window(s) predicted otherwise than trained, first: {_first(bad)}"

    # 4. the same model input for the same window in training and prediction
    for model, kinds in (inputs or {}).items():
        for a, b in combinations(sorted(kinds), 2):
            shared = kinds[a].keys() & kinds[b].keys()
            for key in sorted(shared):
                assert np.array_equal(kinds[a][key], kinds[b][key]), f"{model}: {a} and {b} inputs differ at {key}"
        if "train" in kinds and "predict" in kinds:
            assert kinds["train"].keys() & kinds["predict"].keys(), f"{model}: no window both trained and predicted"
        if "predict" in kinds and "shard" in kinds:
            missing = kinds["predict"].keys() - kinds["shard"].keys()
            assert not missing, f"{model}: predicted windows without a shard window: {sorted(missing)[:3]}"


# --- the warehouse and what each source pairs ----------------------------------------------------------------


def _frame(source: str, rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{"source": source, **row} for row in rows], schema=PAIRS_SCHEMA)


@pytest.fixture(scope="module", params=["close", "spline"])
def ctx(request, tmp_path_factory):
    """A four-ticker warehouse (2021-01 .. 2021-07, cut 2021-06-15) labelled with ``label_source``: bars, tokens,
    labels, window stores, corpus statistics and features; the reference of the profile's report tau."""
    label_source = request.param
    bars = _bars()
    settings = _settings(tmp_path_factory.mktemp(f"align_{label_source}"), "w", bars, label_source=label_source)
    _run_all(settings)
    _training_inputs(settings)
    for tok in TOKENIZATIONS.values():
        materialize_features(settings, tok, progress=False)
    wh = settings.warehouse
    shards = {}  # asset -> {(ticker, t): raw tokens [64, 9]} of every day's token shard, read here
    end_positions = {}
    for asset in (t.tokens_asset for t in TOKENIZATIONS.values()):
        frame = pl.concat([pl.read_parquet(wh.shard(asset, d)) for d in wh.shard_days(asset)])
        tokens = frame["tokens"].to_numpy()
        shards[asset] = {(t, d): tokens[i] for i, (t, d) in enumerate(frame.select("ticker", "date").iter_rows())}
        if asset == "spline_tokens":
            end_positions = dict(zip(frame.select("ticker", "date").iter_rows(), frame["end_position"].to_list()))
            hand = np.array([spline_end(w) for w in tokens])  # the stored end positions are the windows' ends
            np.testing.assert_allclose(hand, frame["end_position"].to_numpy(), rtol=0, atol=EXACT_TOL)
    tau = settings.evaluate.report_tau
    reference = build_reference(bars, end_positions, label_source, tau)
    return SimpleNamespace(
        settings=settings,
        bars=bars,
        tau=tau,
        label_col=tau_column(tau),
        r_col="r_close" if label_source == "close" else "r_spline",
        seed=settings.train.seeds[0],
        reference=reference,
        shards=shards,
        fold=settings.folds[0],
    )


def training_pairs(ctx, model: str) -> tuple[pl.DataFrame, dict]:
    """Every (window, label) pair the fine-tuning data module serves in an epoch (train and validation streams),
    each traced back to its store row by its bytes, with the row's (ticker, t) and its raw window's end."""
    dm = WindowDataModule(ctx.settings, Policy(model, BuySellHold(ctx.tau), ctx.seed, TOKENIZED_FOLD))
    dm.setup()
    store = dm.store
    raw = store.read(np.arange(store.rows.height))
    normalized = dm._train.normalize(raw)
    row_of = {w.tobytes(): i for i, w in enumerate(normalized)}
    assert len(row_of) == len(normalized), "two store windows are the same bytes: rows cannot be traced"
    keys = store.rows.select("ticker", "date").rows()
    rows, inputs = [], {}
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        for x, y in loader:
            for window, label in zip(x.numpy(), y.numpy()):
                i = row_of[window.tobytes()]  # a KeyError: a served window that is no store row
                kind, value = end_identity(store.asset, raw[i])
                ticker, day = keys[i]
                rows.append(dict(ticker=ticker, date=day, label=int(label), end_kind=kind, end_value=value))
                inputs[(ticker, day)] = window
    assert len(inputs) == len(rows), "a window served twice in one epoch"
    return _frame(f"train:{model}", rows), inputs


class Oracle(torch.nn.Module):
    """A classifier that knows the class of every window it was served in training (by the input's bytes): a
    one-hot logit on that class index (on ``permute[class]`` to simulate a head read in another class order);
    no decision (equal logits) on any other window. It records every input it is shown."""

    def __init__(self, table: dict[bytes, int], permute: tuple[int, int, int] = (0, 1, 2)) -> None:
        super().__init__()
        self.table, self.permute, self.seen = table, permute, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        windows = x.numpy()
        self.seen.append(windows.copy())
        logits = torch.zeros(len(windows), 3)
        for i, window in enumerate(windows):
            label = self.table.get(window.tobytes())
            if label is not None:
                logits[i, self.permute[label]] = 30.0
        return logits


def prediction_pairs(ctx, model: str, served: dict, permute=(0, 1, 2)) -> tuple[pl.DataFrame, dict, dict]:
    """``predict`` on every day of the window store and of the test period with the oracle of ``served`` (training
    inputs and their labels); the rows, the inputs the classifier was shown per row, and the shard windows of the
    same (ticker, t), normalized as predict.py normalizes them."""
    spec = lookup_variant(model)
    table = {window.tobytes(): label for window, label in served.values()}
    oracle = Oracle(table, permute)
    store_days = ctx.settings.warehouse.shard_days(spec.token_asset, until=ctx.fold.train_end)
    days = sorted(set(store_days) | set(evaluation_days(ctx.settings, spec.token_asset, ctx.fold)))
    frame = predict(
        ctx.settings, Policy(model, BuySellHold(ctx.tau), ctx.seed, TOKENIZED_FOLD), oracle, days=days
    ).frame
    shown = np.concatenate(oracle.seen)
    assert len(shown) == frame.height
    normalize = spec.tokenization.normalizer(
        fold_stats(ctx.settings, spec.tokenization, TOKENIZED_FOLD) if spec.normalized else None, spec.channels
    )
    probs = frame.select("p_buy", "p_sell", "p_hold").to_numpy()
    decided = probs.max(axis=1) > 0.5
    rows, inputs, shard_inputs = [], {}, {}
    for i, row in enumerate(frame.iter_rows(named=True)):
        key = (row["ticker"], row["date"])
        raw = ctx.shards[spec.token_asset][key]
        kind, value = end_identity(spec.token_asset, raw)
        action = int(row["action"]) if decided[i] else None
        rows.append(dict(ticker=key[0], date=key[1], label=row["label"], end_kind=kind, end_value=value))
        rows[-1] |= dict(close=row["close"], action=action)
        inputs[key] = shown[i]
        shard_inputs[key] = normalize(raw[None])[0]
    return _frame(f"predict:{model}", rows), inputs, shard_inputs


def probe_pairs(ctx) -> pl.DataFrame:
    """The training and validation rows each probe is fitted on (``read_features``, as ``materialize_probe`` reads them):
    labels withheld only after the fold's label_end (the purge) or where the next session is missing."""
    frames = []
    for tokenization, probe in PROBE_VARIANTS.items():
        extra = (ctx.label_col, ctx.r_col)  # t63_c1 (token 63 c1) is one of the features read anyway
        rows = read_features(ctx.settings, probe, TOKENIZED_FOLD, ("train", "validation"), extra)
        withheld = rows.filter(pl.col(ctx.label_col).is_null() | (pl.col(ctx.label_col) < 0))
        unknown = withheld.join(ctx.reference, on=["ticker", "date"]).filter(pl.col("label") < 0)
        assert (withheld["date"] > ctx.fold.label_end).sum() + unknown.height == withheld.height, withheld
        rows = rows.filter(pl.col("date") <= ctx.fold.label_end)
        end = pl.lit(None if tokenization == "spline" else "ret1", pl.String)  # fd and raw token 63's Dy: ret1
        frames.append(
            rows.select(
                pl.lit(f"probe:{tokenization}").alias("source"),
                "ticker",
                "date",
                pl.col(ctx.label_col).alias("label"),
                pl.col(ctx.r_col).alias("r"),
                end.alias("end_kind"),
                pl.when(end.is_not_null()).then(pl.col("t63_c1")).alias("end_value"),
            )
        )
    return pl.concat(frames, how="diagonal_relaxed").cast({"label": pl.Int64})


def rule_pairs(ctx) -> pl.DataFrame:
    """The momentum rule's test rows (features test file): label and close of each (ticker, t)."""
    frame = baseline_predictions(
        ctx.settings, Policy("momentum_1d", BuySellHold(ctx.tau), 0, TOKENIZED_FOLD), "test", None
    )
    return frame.select(
        pl.lit("rule:momentum_1d").alias("source"), "ticker", "date", pl.col("label").cast(pl.Int64), "close"
    )


def labels_pairs(ctx) -> pl.DataFrame:
    wh = ctx.settings.warehouse
    frame = pl.concat([pl.read_parquet(wh.shard("labels", d)) for d in wh.shard_days("labels")])
    return frame.select(
        pl.lit("labels").alias("source"),
        "ticker",
        "date",
        pl.col(ctx.label_col).cast(pl.Int64).alias("label"),
        pl.col(ctx.r_col).alias("r"),
    )


def _union(frames: list[pl.DataFrame]) -> pl.DataFrame:
    empty = pl.DataFrame(schema=PAIRS_SCHEMA)
    return pl.concat([empty, *frames], how="diagonal_relaxed").select(list(PAIRS_SCHEMA)).cast(PAIRS_SCHEMA)


@pytest.fixture(scope="module")
def collected(ctx):
    frames, inputs = [labels_pairs(ctx), probe_pairs(ctx), rule_pairs(ctx)], {}
    for model in MODELS:
        train, served_inputs = training_pairs(ctx, model)
        labels = dict(zip(train.select("ticker", "date").rows(), train["label"].to_list()))
        served = {key: (window, labels[key]) for key, window in served_inputs.items()}
        predicted, predict_inputs, shard_inputs = prediction_pairs(ctx, model, served)
        frames += [train, predicted]
        inputs[model] = {"train": served_inputs, "predict": predict_inputs, "shard": shard_inputs}
    return SimpleNamespace(pairs=_union(frames), inputs=inputs)


# --- the tests ---------------------------------------------------------------------------------------------------


def test_every_source_pairs_each_window_with_the_outcome_of_the_next_day(ctx, collected):
    pairs = collected.pairs
    check_alignment(pairs, ctx.reference, collected.inputs)
    # the check bites: every source is there, Buy and Sell are among the served labels (a swap would show), and
    # most windows of the store are both served and predicted
    sources = set(pairs["source"].unique())
    assert {"labels", "probe:spline", "probe:fd", "probe:raw", "rule:momentum_1d"} <= sources
    assert {f"{kind}:{m}" for m in MODELS for kind in ("train", "predict")} <= sources
    for model in MODELS:
        served = pairs.filter(pl.col("source") == f"train:{model}")
        assert served.height > 150 and {BUY, SELL, HOLD} <= set(served["label"])
        predicted = pairs.filter(pl.col("source") == f"predict:{model}")
        assert predicted.filter(pl.col("action").is_not_null()).height >= MIN_SHARED
        assert predicted["date"].max() > ctx.fold.train_end  # the test days too
        shared = collected.inputs[model]["train"].keys() & collected.inputs[model]["predict"].keys()
        assert len(shared) == served.height
    assert ctx.reference.filter(pl.col("ambiguous")).height <= 2
    # the last day's label is unknown (no next session), and so is every source's
    last = pairs.filter(pl.col("date") == ctx.reference["date"].max())
    assert last.height > 0 and set(last["label"]) == {UNKNOWN}


def test_training_and_prediction_normalize_a_window_identically(ctx):
    """The data module's normalizer and the one predict.py builds (``Tokenization.normalizer``) give the
    same bytes on the same raw windows (the whole store)."""
    for model in MODELS:
        spec = VARIANTS[model]
        dm = WindowDataModule(ctx.settings, Policy(model, BuySellHold(ctx.tau), ctx.seed, TOKENIZED_FOLD))
        dm.setup()
        raw = dm.store.read(np.arange(dm.store.rows.height))
        stats = fold_stats(ctx.settings, spec.tokenization, TOKENIZED_FOLD) if spec.normalized else None
        prediction = spec.tokenization.normalizer(stats, spec.channels)(raw)
        assert np.array_equal(dm._train.normalize(raw), prediction) and np.array_equal(
            dm._val.normalize(raw), prediction
        )
        assert prediction.shape[-1] == (9 if spec.normalized else len(spec.channels))


def test_the_momentum_rule_decides_in_the_label_class_codes(ctx):
    """The rule Buys (0) after a 1-day log return above tau and Sells (1) after one below -tau: its actions are the
    reference class of ln C_t - ln C_t-1, the same codes as the labels."""
    frame = baseline_predictions(
        ctx.settings, Policy("momentum_1d", BuySellHold(ctx.tau), 0, TOKENIZED_FOLD), "test", None
    )
    joined = frame.join(ctx.reference, on=["ticker", "date"], suffix="_ref")
    assert joined.height == frame.height > 0
    for row in joined.iter_rows(named=True):
        ret1 = row["log_close"] - row["prev_log_close"]
        if abs(abs(ret1) - ctx.tau) > 1e-6:  # ret1 is read off float32 tokens
            assert row["action"] == _class(ret1, ctx.tau), row
    assert {BUY, SELL} <= set(frame["action"])


# --- mutations: the checker catches a shift or a swap -----------------------------------------------------------


def _shift_labels(pairs: pl.DataFrame, sources: str, days: int) -> pl.DataFrame:
    """The labels of ``sources`` (a prefix) moved by ``days`` sessions within each (source, ticker): the window of t
    paired with the label of t + days."""
    hit = pl.col("source").str.starts_with(sources)
    moved = pairs.sort("source", "ticker", "date").with_columns(
        pl.when(hit).then(pl.col("label").shift(-days).over("source", "ticker")).otherwise("label").alias("label")
    )
    return moved.filter(pl.col("label").is_not_null())


def _swap(pairs: pl.DataFrame, sources: str, a: int = BUY, b: int = SELL) -> pl.DataFrame:
    hit, label = pl.col("source").str.starts_with(sources), pl.col("label")
    swapped = pl.when(label == a).then(b).when(label == b).then(a).otherwise(label)
    return pairs.with_columns(pl.when(hit).then(swapped).otherwise(label).alias("label"))


@pytest.mark.parametrize("days", [1, -1])
@pytest.mark.parametrize("sources", ["train:splinegpt", "train:", "predict:patchtst", "probe:raw", "labels", ""])
def test_a_label_shifted_by_one_day_fails(ctx, collected, sources, days):
    """One source shifted (the others disagree with it) or all of them consistently (the reference disagrees)."""
    with pytest.raises(AssertionError):
        check_alignment(_shift_labels(collected.pairs, sources, days), ctx.reference)


@pytest.mark.parametrize("classes", [(BUY, SELL), (BUY, HOLD), (SELL, HOLD)])
@pytest.mark.parametrize("sources", ["train:rawgpt", "probe:spline", "rule:", ""])
def test_two_swapped_classes_fail(ctx, collected, sources, classes):
    with pytest.raises(AssertionError):
        check_alignment(_swap(collected.pairs, sources, *classes), ctx.reference)


@pytest.mark.parametrize("sources", ["train:splinegpt", "train:rawgpt", "predict:rawgpt_fd", "probe:fd"])
def test_a_window_paired_with_the_next_days_label_fails(ctx, collected, sources):
    """The window of t-1 recorded as the window of t (its label and close those of t): its end is a day early."""
    hit = pl.col("source") == sources
    moved = collected.pairs.sort("source", "ticker", "date").with_columns(
        pl.when(hit).then(pl.col("end_value").shift(1).over("source", "ticker")).otherwise("end_value")
    )
    moved = moved.filter(~hit | pl.col("end_value").is_not_null())
    with pytest.raises(AssertionError, match="end"):
        check_alignment(moved, ctx.reference)


def test_store_labels_joined_one_day_late_fail(ctx, monkeypatch):
    """A data module whose labels come off by one session (the label of t+1 joined to the window of t) is caught."""
    original = data_mod.store_labels

    def shifted_by_ticker(settings, store, tau, until=None):
        labels, hashes = original(settings, store, tau, until)
        frame = store.rows.select("ticker").with_row_index().with_columns(pl.Series("y", labels))
        moved = frame.with_columns(pl.col("y").shift(-1).over("ticker").fill_null(UNKNOWN)).sort("index")
        return moved["y"].to_numpy().astype(np.int64), hashes

    monkeypatch.setattr(data_mod, "store_labels", shifted_by_ticker)
    pairs, _ = training_pairs(ctx, "splinegpt")
    with pytest.raises(AssertionError, match="label"):
        check_alignment(pairs, ctx.reference)
    monkeypatch.undo()
    pairs, _ = training_pairs(ctx, "splinegpt")
    check_alignment(pairs, ctx.reference)


def test_another_normalization_in_prediction_fails(ctx, collected, monkeypatch):
    """Prediction with statistics other than training's: the inputs differ and the oracle no longer recognizes the
    windows it was trained on."""
    model = "splinegpt"
    train = collected.pairs.filter(pl.col("source") == f"train:{model}")
    labels = dict(zip(train.select("ticker", "date").rows(), train["label"].to_list()))
    inputs = collected.inputs[model]
    served = {key: (window, labels[key]) for key, window in inputs["train"].items()}
    real = predict_mod.fold_stats
    monkeypatch.setattr(predict_mod, "fold_stats", lambda *a: real(*a).with_columns(pl.col("mean") + 1e-3))
    predicted, predict_inputs, _ = prediction_pairs(ctx, model, served)
    with pytest.raises(AssertionError):
        check_alignment(_union([train, predicted]), ctx.reference)
    with pytest.raises(AssertionError, match="inputs differ"):
        check_alignment(train, ctx.reference, {model: {"train": inputs["train"], "predict": predict_inputs}})


@pytest.mark.parametrize("permute", [(1, 0, 2), (2, 1, 0)])
def test_a_classifier_read_in_another_class_order_fails(ctx, collected, permute):
    """The head's class index k must be the label code k: an output in another order decides the wrong class."""
    model = "rawgpt"
    train = collected.pairs.filter(pl.col("source") == f"train:{model}")
    labels = dict(zip(train.select("ticker", "date").rows(), train["label"].to_list()))
    served = {key: (window, labels[key]) for key, window in collected.inputs[model]["train"].items()}
    predicted, _, _ = prediction_pairs(ctx, model, served, permute)
    with pytest.raises(AssertionError, match="class code|predicted otherwise"):
        check_alignment(_union([train, predicted]), ctx.reference)


def test_the_reference_is_the_rule_written_out():
    """The hand rule on a few returns: ties at +-tau are Hold, missing is -1, codes Buy 0, Sell 1, Hold 2."""
    assert [_class(r, 0.01) for r in (0.02, -0.02, 0.01, -0.01, 0.0, None, float("nan"))] == [0, 1, 2, 2, 2, -1, -1]
    bars = pl.DataFrame(
        {
            "ticker": ["A"] * 3 + ["B"] * 2,
            "date": [dt.date(2021, 1, 4), dt.date(2021, 1, 5), dt.date(2021, 1, 6)] * 1
            + [dt.date(2021, 1, 4), dt.date(2021, 1, 6)],
            "close": [100.0, 103.0, 101.0, 50.0, 50.0],
        }
    )
    ref = build_reference(bars, {}, "close", 0.01).sort("ticker", "date")
    # A: +2.96% then -1.96%, last day unknown; B has no bar on the 5th: its label of the 4th is unknown
    assert ref["label"].to_list() == [BUY, SELL, UNKNOWN, UNKNOWN, UNKNOWN]
    assert ref["r"][0] == pytest.approx(math.log(103 / 100))
