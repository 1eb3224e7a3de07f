"""Does a tokenization carry tradable information? The evidence the report adds to the paper's tables, one
table each (``evidence_tables``), at the report's tau and cost; the universe tables score every ticker-day of the
test period (or the seeded sample ``evaluate.universe_tickers``), the same rows for every variant.

- ``signal``: per (outcome, variant, seed) the daily cross-sectional rank IC and IC of the score p_buy - p_sell
  against the next-day return (mean, ICIR, Newey-West t, share of positive days) and the direction AUC
  (``backtest.signal``), with the trailing-volatility reference's row: its score is 0 on every row (p_buy = p_sell),
  so it has no IC.
- ``label_artefact``: the same statistics for the spline labels' own return r_spline = r_close + e_t - e_{t+1}
  beside r_close, and for e_t alone (today's residual of the causal fit, known at decision time): how much of a
  spline-label score is the label's construction, not the future.
- ``information``: log-loss and Brier skill against the training base rates of each outcome (0 = no
  information), balanced accuracy and macro-F1 of the argmax of the de-weighted probabilities, balanced accuracy
  of the policy's own actions and the AUC of Buy-vs-rest and Sell-vs-rest (``backtest.skill``,
  ``backtest.skill_seeds``, ``backtest.policy_frames``). A cell is the mean over seeds, the 95% bootstrap
  interval of that mean (circular blocks of ``evaluate.skill_bootstrap_block_days`` test days, one resample shared
  by the seeds) and the std over seeds; with ``tokenize.label_source = "close"`` the two outcomes coincide and one
  set is shown. Beside the models, the trailing-volatility reference (``backtest.volatility_reference``: p from
  N(0, vol20^2) at tau, nothing fitted), and each model's log-loss skill beyond it, paired on the same ticker-days
  (``policy_frames.skill_beyond_reference_frame``). On synthetic data also the informed policy that acts on the
  true latent drift (``backtest.oracle``): the ceiling.
- ``information_uncalibrated``: the same table of the probabilities before calibration, when every policy wrote
  them.
- ``time_series_ic``: per backtested ticker, the rank IC over time of the score against r_close.
- ``decisions``: per policy, why it trades or liquidates under the calibrated argmax (the argmax of the calibrated
  class-weighted probabilities, the predictions' action; ``backtest.decisions``): base rates, the no-information
  action, the Buy/Sell margin against ln(w_sell/w_buy).
- ``decision_rules``: the three rules side by side: the paper's (the argmax of the network's own softmax), the
  calibrated argmax and the margin rule (trade beyond a margin m of the de-weighted p, chosen on validation days), as
  pooled by ``stages.pooled``, with each rule's equal-weight portfolio.
- ``data_seen``: the dates each variant's fit, validation and normalization saw, per fold (contamination).

Everything reads shards of the warehouse; training statistics come from days on or before the cut only.
No dagster here.
"""

from __future__ import annotations

import functools

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.policy_frames import (
    BEYOND,
    BEYOND_TRIVIAL,
    SkillOptions,
    decision_frame,
    seed_mean_skill_frame,
    skill_beyond_reference_frame,
)
from kinematic_pipeline.backtest.signal import daily_ic, direction_auc, ic_summary, time_series_ic
from kinematic_pipeline.config import EvalConfig, Settings
from kinematic_pipeline.model_pins import run_class_weights
from kinematic_pipeline.pins import verified_labels
from kinematic_pipeline.report import evidence_tables as evidence_tables_report
from kinematic_pipeline.stages.base_rates import (
    CLOSE,
    TRAINED,
    calibrated_prior_rows,
    close_labels,
    train_base_rates,
    validation_base_rates,
)
from kinematic_pipeline.stages.oracle_control import oracle_test_predictions
from kinematic_pipeline.stages.pooled import (
    read_view,
    rule_portfolios,
    rule_records,
)
from kinematic_pipeline.stages.reference_rows import volatility_reference, with_reference_scores
from kinematic_pipeline.tasks.actions import PROB_COLUMNS, UNKNOWN_LABEL
from kinematic_pipeline.tasks.buy_sell_hold import at_tau
from kinematic_pipeline.variants import TRIVIAL_PROBE
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS, PREDICTIONS
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.layout import UNIVERSE_PREDICTIONS, UNIVERSE_RAW_PREDICTIONS

E_T = "e_t"  # the label-artefact table's reference row: the causal fit's residual today, scored as it is
CLOSE_LABEL = "label_close"  # the column of close-to-close labels joined onto the predictions


def outcome_names(label_source: str) -> dict[str, str]:
    """{outcome: how the information table names it}, in table order; one outcome when the trained-on labels
    already are the close-to-close ones."""
    if label_source == "close":
        return {TRAINED: "close-to-close (trained on and traded: one set, the two coincide)"}
    return {TRAINED: f"trained-on labels ({label_source})", CLOSE: "close-to-close (what the backtest trades)"}


def with_close_labels(predictions: pl.DataFrame, returns: pl.DataFrame) -> pl.DataFrame:
    """``predictions`` plus CLOSE_LABEL: the close-to-close label, at the row's tau, of the ``r_close`` of its
    (ticker, date) in ``returns`` (ticker, date, r_close: the labels shards'); -1 without one."""
    joined = predictions.join(
        returns.select("ticker", "date", "r_close"), on=["ticker", "date"], how="left", validate="m:1"
    )
    labels = np.full(joined.height, UNKNOWN_LABEL, dtype=np.int8)
    tau = joined["tau"].to_numpy()
    for t in np.unique(tau):
        rows = tau == t
        labels[rows] = close_labels(joined["r_close"].filter(pl.Series(rows)), float(t))
    return joined.drop("r_close").with_columns(pl.Series(CLOSE_LABEL, labels, dtype=pl.Int8))


def prediction_day_returns(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame:
    """ticker, date, r_close from the labels shards of the prediction days."""
    days = sorted(predictions["date"].unique().to_list())
    return exact.read_parquet(verified_labels(settings, days), columns=["ticker", "date", "r_close"])


def skill_options(ev: EvalConfig, label_column: str = "label") -> SkillOptions:
    """The skill frames' bootstrap of this run (``evaluate.skill_bootstrap_resamples`` resamples of circular blocks
    of ``evaluate.skill_bootstrap_block_days`` test days, seeded like the backtests' Sharpe), scoring
    ``label_column``."""
    return SkillOptions(
        n_boot=ev.skill_bootstrap_resamples,
        block_days=ev.skill_bootstrap_block_days,
        boot_seed=ev.backtest.bootstrap_seed,
        label_column=label_column,
    )


def _with_reference(
    scored: pl.DataFrame, models: pl.DataFrame, reference: pl.DataFrame | None, rates: dict, options
) -> pl.DataFrame:
    """``seed_mean_skill_frame`` of ``scored``; with a ``reference`` its own row and each model's log-loss skill
    beyond it on the same ticker-days (``skill_beyond_reference_frame``'s columns, null for the reference and the
    informed ceiling); and where the trivial probe is among ``models``, each model's skill beyond it likewise
    (``BEYOND_TRIVIAL``'s columns: the zero a two-feature probe sets, science-6 M-D)."""
    frame = seed_mean_skill_frame(scored, rates, options)
    if reference is not None and reference.height:
        own = seed_mean_skill_frame(reference, rates, options)
        beyond = skill_beyond_reference_frame(models, reference, rates, options)
        frame = pl.concat([frame, own], how="diagonal_relaxed").join(beyond, on=["variant", "tau"], how="left")
    trivial = models.filter(pl.col("variant") == TRIVIAL_PROBE)
    if trivial.height and models["variant"].n_unique() > 1:
        renamed = {f"{BEYOND}{end}": f"{BEYOND_TRIVIAL}{end}" for end in ("", "_ci_low", "_ci_high", "_seed_std")}
        beyond = skill_beyond_reference_frame(models, trivial, rates, options).select("variant", "tau", *renamed)
        frame = frame.join(beyond.rename(renamed), on=["variant", "tau"], how="left")
    return frame.sort("variant", "tau")


def information_skill(
    settings: Settings,
    report_rows: pl.DataFrame,
    rates: dict,
    tau: float,
    reference: pl.DataFrame | None = None,
    prior: dict | None = None,
) -> dict[str, pl.DataFrame]:
    """{outcome name: ``seed_mean_skill_frame``} of the test predictions at ``tau``: on the trained-on labels
    (with the informed ceiling on synthetic data) and, unless they coincide, on close-to-close labels. With
    ``reference`` (``volatility_reference`` of the same rows), its row and each model's skill beyond it; with
    ``prior`` (``base_rates.validation_base_rates``), the calibrated prior's row: the zero point of a model that
    learned nothing, after calibration."""
    ev, names = settings.evaluate, outcome_names(settings.tokenize.label_source)
    weights = run_class_weights(settings) if prior is not None else None  # the prior's rows: a model's softmax
    options = skill_options(ev)
    report_rows = report_rows.drop("fold", strict=False)  # the folds' test days pooled: one record per policy
    oracle = oracle_test_predictions(settings, report_rows, tau) if report_rows.height else None
    extra = [] if oracle is None else [oracle.cast(report_rows.schema)]
    if prior is not None and report_rows.height:
        extra.append(calibrated_prior_rows(report_rows, prior[TRAINED][tau], tau, weights, "label"))
    scored = pl.concat([report_rows, *extra], how="vertical") if extra else report_rows
    out = {names[TRAINED]: _with_reference(scored, report_rows, reference, rates[TRAINED], options)}
    if CLOSE in names and report_rows.height:
        returns = prediction_day_returns(settings, report_rows)
        close = with_close_labels(report_rows, returns)
        close_reference = None if reference is None else with_close_labels(reference, returns)
        close_options = skill_options(ev, CLOSE_LABEL)
        if prior is not None:
            prior_rows = calibrated_prior_rows(report_rows, prior[CLOSE][tau], tau, weights, "label")
            close_scored = pl.concat([close, with_close_labels(prior_rows, returns)], how="vertical")
        else:
            close_scored = close
        out[names[CLOSE]] = _with_reference(close_scored, close, close_reference, rates[CLOSE], close_options)
    return out


def evidence_tables(settings: Settings, metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The evidence tables at the report's tau and cost (see the module docstring)."""
    ev, tau = settings.evaluate, settings.evaluate.report_tau
    predictions = read_view(settings, PREDICTIONS)
    rates, weights = train_base_rates(settings), run_class_weights(settings)
    decisions = decision_frame(predictions, rates[TRAINED], weights)
    present = set(predictions["variant"].unique().to_list())
    seen = data_seen(settings, tuple(v for v in settings.evaluated_variants if v in present))
    universe = universe_evidence(settings, metrics, rates, seen)
    return {
        "signal": universe["signal"],
        "label_artefact": universe["label_artefact"],
        "information": universe["information"],
        **(
            {"information_uncalibrated": universe["information_uncalibrated"]}
            if "information_uncalibrated" in universe
            else {}
        ),
        "time_series_ic": universe["time_series_ic"],
        "decisions": evidence_tables_report.decisions_table(decisions, tau, weights),
        "decision_rules": evidence_tables_report.decision_rules_table(
            rule_records(settings, metrics), tau, ev.report_cost_bps, seen, rule_portfolios(settings)
        ),
        "data_seen": universe["data_seen"],
    }


# --- the signal on the universe --------------------------------------------------------------------------


def universe_predictions(
    settings: Settings, variants: tuple[str, ...], kind: str = UNIVERSE_PREDICTIONS
) -> pl.DataFrame:
    """Every ``variants`` policy's predictions on the universe (``predictions/universe/``, written at the
    report's tau; ``kind`` "universe_raw": before calibration), with ``r_close`` and ``r_spline`` of each
    ticker-day and the score s = p_buy - p_sell of the de-weighted probabilities (a rule's one-hot action:
    +1 / -1 / 0)."""
    folder = settings.warehouse.predictions_folder(kind)
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    frames = [f for f in (exact.read_parquet(p) for p in files) if f.height and f["variant"][0] in set(variants)]
    from kinematic_pipeline.run_keys import one_universe  # the run's policies, under one membership file (or refused)

    frames = one_universe(settings, frames)
    if not frames:
        raise FileNotFoundError(f"no universe predictions under {folder}: materialize the predictions assets")
    frame = pl.concat(frames, how="vertical").filter(at_tau(settings.evaluate.report_tau))
    wh, days = settings.warehouse, sorted(frame["date"].unique().to_list())
    returns = exact.read_parquet(
        verified_labels(settings, [d for d in days if wh.shard(LABELS, d).exists()]),
        columns=["ticker", "date", "r_close", "r_spline"],
    )
    frame = frame.join(returns, on=["ticker", "date"], how="left", validate="m:1")
    p = frame.select(PROB_COLUMNS).to_numpy().astype(np.float64)
    return frame.with_columns(pl.Series("score", p[:, 0] - p[:, 1]))


def outcome_returns(label_source: str) -> dict[str, str]:
    """{outcome name: the return column it is measured against}: the trained-on labels' return and r_close."""
    names = outcome_names(label_source)
    trained = "r_spline" if label_source == "spline" else "r_close"
    return {names[TRAINED]: trained} | ({names[CLOSE]: "r_close"} if CLOSE in names else {})


def signal_statistics(settings: Settings, universe: pl.DataFrame) -> pl.DataFrame:
    """One row per (outcome, variant, seed): the daily cross-sectional rank IC and IC of the score against the
    outcome's next-day return (mean, ICIR, Newey-West t, share of positive days), and the direction AUC (Buy
    vs Sell among the rows that moved beyond tau, by the outcome's labels)."""
    tau, rows = settings.evaluate.report_tau, []
    for outcome, column in outcome_returns(settings.tokenize.label_source).items():
        for (variant, seed), group in universe.group_by("variant", "seed", maintain_order=True):
            daily = daily_ic(group, "score", column)
            rank, pearson = ic_summary(daily, "rank_ic"), ic_summary(daily, "ic")
            labels = close_labels(group[column], tau) if column == "r_close" else group["label"].to_numpy()
            rows.append(
                {
                    "outcome": outcome,
                    "variant": variant,
                    "seed": seed,
                    "ticker_days": group.height,
                    "tickers": group["ticker"].n_unique(),
                    "days": rank["days"],
                    "rank_ic": rank["mean"],
                    "rank_icir": rank["icir"],
                    "rank_ic_t_nw": rank["t_nw"],
                    "rank_ic_positive": rank["share_positive"],
                    "ic": pearson["mean"],
                    "ic_t_nw": pearson["t_nw"],
                    "auc_direction": direction_auc(group["score"].to_numpy(), labels),
                }
            )
    return pl.DataFrame(rows)


def backtested_time_series_ic(settings: Settings, universe: pl.DataFrame, tickers: list[str]) -> pl.DataFrame:
    """Per (variant, seed, backtested ticker): the rank IC over time of the score against r_close."""
    rows = universe.filter(pl.col("ticker").is_in(tickers))
    parts = [
        time_series_ic(group, "score", "r_close").with_columns(
            pl.lit(variant).alias("variant"), pl.lit(seed).cast(pl.Int64).alias("seed")
        )
        for (variant, seed), group in rows.group_by("variant", "seed", maintain_order=True)
    ]
    return pl.concat(parts) if parts else pl.DataFrame()


def prior_rates(settings: Settings) -> dict | None:
    """The validation-day base rates of the run's first token kind (the folds' validation days are the same days
    for every kind): the calibrated prior's probabilities; None without them."""
    from kinematic_pipeline.variants import variant as lookup_variant

    try:
        return validation_base_rates(settings, lookup_variant(settings.evaluated_variants[0]).token_asset)
    except (FileNotFoundError, IndexError, ValueError):
        return None


def universe_evidence(
    settings: Settings, metrics: pl.DataFrame, rates: dict, seen: dict[str, str]
) -> dict[str, pl.DataFrame]:
    """The universe tables: the signal (IC), the time-series IC of the backtested tickers, the skill on the
    universe (the information table), the label artefact and the data each variant saw."""
    variants, tau = settings.evaluated_variants, settings.evaluate.report_tau
    universe = universe_predictions(settings, variants)
    reference = volatility_reference(settings, universe, tau)
    stats = signal_statistics(settings, with_reference_scores(universe, reference))
    tickers = sorted(metrics["ticker"].unique().to_list())
    sample = universe_note(settings, universe)
    return {
        "signal": evidence_tables_report.signal_table(stats, seen, sample),
        "time_series_ic": evidence_tables_report.time_series_ic_table(
            backtested_time_series_ic(settings, universe, tickers), tickers
        ),
        "information": evidence_tables_report.information_table(
            information_skill(
                settings, universe.drop("score", "r_close", "r_spline"), rates, tau, reference, prior_rates(settings)
            ),
            tau,
            seen,
            settings.evaluate.skill_bootstrap_block_days,
        ),
        "label_artefact": evidence_tables_report.label_artefact_table(
            stats, settings.tokenize.label_source, residual_statistics(settings, universe)
        ),
        "data_seen": evidence_tables_report.data_seen_table(seen),
        **uncalibrated_information(settings, variants, rates, seen, reference),
    }


def residual_statistics(settings: Settings, universe: pl.DataFrame) -> pl.DataFrame:
    """``signal_statistics`` of e_t, today's residual of the causal fit (ln C_t - x_t(t) = -c3 / alpha^2 of
    token 63), on the universe's ticker-days: what a spline label knows at decision time, scored directly
    (r_spline = r_close + e_t - e_(t+1)). Empty without spline labels or the spline features file."""
    from kinematic_pipeline.stages.alpha import AlphaLookup
    from kinematic_pipeline.stages.features import read_features

    if settings.tokenize.label_source != "spline" or universe.height == 0:
        return pl.DataFrame()
    try:
        folds = [read_features(settings, "lr_spline", f, ("test",)) for f in settings.folds]
    except FileNotFoundError:
        return pl.DataFrame()
    c3 = pl.concat(folds).select("ticker", "date", "t63_c3").unique(["ticker", "date"])
    rows = universe.select("ticker", "date", "r_close", "r_spline", "label").unique(["ticker", "date"])
    rows = rows.join(c3, on=["ticker", "date"], how="inner").sort("ticker", "date")
    alpha, _ = AlphaLookup.from_settings(settings).for_tickers(rows["ticker"].to_list())
    score = -rows["t63_c3"].to_numpy().astype(np.float64) / np.asarray(alpha, dtype=np.float64) ** 2
    rows = rows.with_columns(pl.Series("score", score), pl.lit(E_T).alias("variant"), pl.lit(0).alias("seed"))
    return signal_statistics(settings, rows)


def uncalibrated_information(
    settings: Settings, variants: tuple[str, ...], rates: dict, seen, reference: pl.DataFrame | None = None
) -> dict:
    """The information table of the probabilities before calibration (``predictions/universe_raw/``), when every
    policy of the universe wrote them; with the trailing-volatility ``reference`` (it has no calibration)."""
    try:
        raw = universe_predictions(settings, variants, UNIVERSE_RAW_PREDICTIONS)
    except FileNotFoundError:
        return {}
    tau, block = settings.evaluate.report_tau, settings.evaluate.skill_bootstrap_block_days
    skill = information_skill(settings, raw.drop("score", "r_close", "r_spline"), rates, tau, reference)
    return {"information_uncalibrated": evidence_tables_report.information_table(skill, tau, seen, block)}


def universe_note(settings: Settings, universe: pl.DataFrame) -> str:
    """Which rows the universe tables score: every ticker, or the seeded sample, with the names of each fold (the
    membership filter keeps fewer in earlier folds)."""
    n, days = universe["ticker"].n_unique(), universe["date"].n_unique()
    rows = universe.group_by("variant", "seed").len()["len"].max()
    per_fold = ""
    if "fold" in universe.columns and universe["fold"].n_unique() > 1:
        counts = universe.group_by("fold").agg(pl.col("ticker").n_unique()).sort("fold")
        per_fold = "; per fold " + ", ".join(f"{f} {k}" for f, k in counts.iter_rows())
    members = "; members on each fold's first test day only" if settings.evaluate.membership_file else ""
    if settings.evaluate.universe_tickers is None:
        return (
            f"every ticker of the test period ({n} tickers{per_fold}{members}, {days} days, {rows:,} ticker-days per "
            "policy)"
        )
    return (
        f"a fixed sample of {n} tickers drawn (evaluate.universe_tickers = {settings.evaluate.universe_tickers}, seed "
        f"{settings.evaluate.universe_seed}; the backtested tickers always in{per_fold}{members}), {days} days, "
        f"{rows:,} ticker-days per policy, the same rows for every variant"
    )


def data_seen(settings: Settings, variants: tuple[str, ...]) -> dict[str, str]:
    """{variant: the dates its fit, validation and normalization saw, per fold} (the contamination column)."""
    from kinematic_pipeline.window_store import fold_split

    seen = {v: lookup_variant(v) for v in variants}
    return {
        v: s.data_seen(settings.folds, functools.partial(fold_split, settings, s.token_asset)) for v, s in seen.items()
    }
