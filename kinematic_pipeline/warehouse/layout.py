"""The warehouse's layout by name: asset names, folder and file names, the day units. Names only: nothing here
builds a path or touches the disk (``store.py`` builds the paths, ``day_units.py`` writes the days).

``$KP_WAREHOUSE`` holds:

- ``<asset>/<YYYY-MM-DD>.parquet``: one shard per trading-day partition, with ``manifests/<asset>/<day>.parquet``
  beside it (its content hash and counts);
- ``raw_ohlcv/<YYYY-MM-DD>/`` (``DAY_UNITS``): a day as one unit, ``bars.parquet`` (the kept bars),
  ``quarantine.parquet`` (only when rows were quarantined) and ``manifest.parquet``, replaced together by one
  atomic rename (``day_units.write_shard`` with ``companions``); ``raw_ohlcv/_schema/`` holds typed zero-row twins
  so that the catalog's globs always match; the token assets and the labels likewise
  (``<token asset>/<YYYY-MM-DD>/tokens.parquet``, ``labels/<YYYY-MM-DD>/labels.parquet``, each with its
  ``manifest.parquet``);
- ``alpha_estimates/estimates.parquet``, ``corpus_stats/<tokenization>.parquet``, ``window_store/<token asset>/``
  (``window_store.py``);
- ``models/<variant>/seed=<seed>/foundation/model.pt`` and ``.../seed=<seed>/adapters/tau=<tau>/``, each with the
  ``shards_used.parquet`` it trained on and a ``loss.png``; a probe's ``models/<probe>/seed=0/probe/tau=<tau>/``;
- ``features/<tokenization>/``: the probes' and rules' decision-time features, ``training.parquet`` (the training
  period's rows: what a probe is fitted on) and ``test.parquet``, and ``inputs.parquet`` (what they were built from);
- ``<evaluation asset>/<policy stem>.parquet`` (``Policy.stem``), ``predictions/validation/``,
  ``predictions/inputs/`` and ``predictions/universe/`` beside the predictions, ``<asset>/buy_and_hold.parquet``;
- ``reports/``: ``pooled/`` (the ``pooled_backtests`` asset), ``tables/`` (with the ``verdict`` asset's
  ``verdict.parquet``), ``tables.md``, ``figures/``, ``report.md``; each of the first two with the digest of the
  evaluation files it was computed from;
- ``drop/`` (files dropped for ingest), ``_damaged/`` (what the self-repair moved aside), ``.locks/``;
- ``catalog.duckdb``: views over the shards, with globs relative to the warehouse.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.tokenizations import TOKENIZATIONS

# Asset names: each is the folder of its shards under the warehouse and the name of its catalog view.
RAW_OHLCV, QUARANTINE = "raw_ohlcv", "quarantine"
ALPHA_ESTIMATES, LABELS, CORPUS_STATS = "alpha_estimates", "labels", "corpus_stats"
PREDICTIONS, BACKTESTS, EQUITY_CURVES, TRADES, PROVENANCE = (
    "predictions",
    "backtests",
    "equity_curves",
    "trades",
    "provenance",
)
MARGIN_BACKTESTS = "margin_backtests"  # the margin rule's backtests (beside the calibrated argmax's)
TARGETING_BACKTESTS = "targeting_backtests"  # a forecast's volatility-targeted backtests (its backtests partition)

# Assets whose trading day is one unit: a folder ``<asset>/<day>/`` holding the shard (``bars.parquet``,
# ``tokens.parquet``), its companions (the quarantine) and its manifest, swapped in whole by one atomic rename:
# a crash never leaves a shard beside another shard's manifest. Each member has a catalog view over
# ``<asset>/*/<file>``, which always matches the typed zero-row files of ``<asset>/_schema/``.
DAY_UNITS: dict[str, dict[str, str]] = {
    RAW_OHLCV: {RAW_OHLCV: "bars.parquet", QUARANTINE: "quarantine.parquet", "manifest": "manifest.parquet"},
    **{
        t.tokens_asset: {t.tokens_asset: "tokens.parquet", "manifest": "manifest.parquet"}
        for t in TOKENIZATIONS.values()
    },
    LABELS: {LABELS: "labels.parquet", "manifest": "manifest.parquet"},
}
UNIT_OF = {member: asset for asset, members in DAY_UNITS.items() for member in members if member != "manifest"}
SCHEMA_DIR, STAGING_DIR = "_schema", ".staging"  # in a day-unit asset's folder: typed twins, writes in progress

# Top-level folders that are not an asset's shards.
MANIFESTS_DIR = "manifests"  # manifests/<asset>/<day>.parquet of the assets that are not day units
MODELS_DIR, WINDOW_STORE_DIR, FEATURES_DIR = "models", "window_store", "features"
DROP_DIR = "drop"  # the default ingest drop folder (``Settings.drop_dir``)
DAMAGED_DIR = "_damaged"  # where a file DuckDB cannot read is moved (with its day unit or manifest)
LOCKS_DIR = ".locks"  # .locks/<asset>/<day>.lock: one writer of a day at a time (``day_units.day_lock``)
REPORTS_DIR = "reports"
FLAT_SKIP = {REPORTS_DIR, MODELS_DIR, WINDOW_STORE_DIR, FEATURES_DIR, MANIFESTS_DIR, DROP_DIR, DAMAGED_DIR}

# Files of the report: reports/tables.md, reports/report.md, reports/tables/verdict.parquet, reports/pooled/.
TABLES_FILE, REPORT_FILE, VERDICT_FILE, POOLED_DIR = "tables.md", "report.md", "verdict.parquet", "pooled"
POOLED_ASSET, VERDICT_ASSET = "pooled_backtests", "verdict"  # the report group's products before the tables
# the pins of the report group's products: the digest of the evaluation files each was computed from
POOLED_PIN_FILE, VERDICT_PIN_FILE = "inputs.json", "verdict_inputs.json"
TABLES_PIN_FILE, TABLES_ASSET = "tables_inputs.json", "paper_tables"  # under reports/tables/: what report.md reads

# Files of a model folder.
MODEL_FILE = "model.pt"  # a foundation's weights: {"variant", "model_config", "state_dict"}
LOSS_PLOT_FILE = "loss.png"  # a foundation's or adapter's loss curves
# predictions/<folder>/<stem>.parquet: what a prediction writes beside its shard (subfolders: not in the view)
VALIDATION_PREDICTIONS = "validation"  # the validation days' predictions (calibration, the margin rule's m)
PREDICTION_INPUTS = "inputs"  # every shard the prediction read
PREDICTION_MODEL = "model"  # the model files' sha256 (model_pins.check_predictions_model)
PREDICTION_CALIBRATION = "calibration"  # the calibration fitted on the validation days, one row
UNIVERSE_PREDICTIONS = "universe"  # at the report's tau: the universe's predictions, calibrated
UNIVERSE_RAW_PREDICTIONS = "universe_raw"  # and before calibration
PREDICTION_CLASS_WEIGHTS = "class_weights"  # the class weights the model was trained with, one row
PROBE_FIT_FILE = "fit.json"  # beside each probe's model: how it was fitted (stages/baselines.py)
PROBE_TIMING_FILE = "fit_timing.json"  # beside it: the fit's wall time, never pinned (an unchanged refit: same bytes)
PROBE_MODEL_FILES = {"lr": "model.json", "lightgbm": "model.txt"}  # learner -> the model's file (data, not code)
PROBE_LEGACY_PICKLE = "model.joblib"  # what versions before issue 30 saved: refused, never loaded
PIN_FILE = "foundation.json"  # beside each adapter: the sha256 of the foundation it was fine-tuned from
SHARDS_USED_FILE = "shards_used.parquet"  # beside each checkpoint/adapter: the store and shards it trained on
SHARDS_USED_SCHEMA: dict[str, pl.DataType] = {
    "asset": pl.String,  # the token asset, labels, or the window store (split "store")
    "split": pl.String,  # train | val | store
    "date": pl.String,
    "path": pl.String,
    "content_hash": pl.String,
    "windows": pl.Int64,  # windows of the day (of the whole store for the store's row)
    "served": pl.Int64,  # windows of it served over every epoch (0: never drawn)
}
# what a features file or a prediction was built from (``features/<tokenization>/inputs.parquet``, the
# predictions' ``inputs/``): one row per file, its path relative to the warehouse (a rule's: the features' files)
INPUTS_SCHEMA: dict[str, pl.DataType] = {
    "asset": pl.String,
    "date": pl.String,  # the shard's day ("" for a file that is not a day's)
    "path": pl.String,
    "content_hash": pl.String,
}


def is_day_name(stem: str) -> bool:
    """Whether a file or folder name is a trading day (``YYYY-MM-DD``)."""
    return len(stem) == 10 and stem[4] == "-" and stem[7] == "-" and stem.replace("-", "").isdigit()
