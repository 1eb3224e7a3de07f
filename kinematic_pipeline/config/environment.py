"""The operator's environment variables: ``load_settings``, the only reader of ``KP_*``.

A profile (``ci``, ``demo``, ``real``, ``paper``) is a named set of values, selected by ``KP_PROFILE``. The
operator interface of DESIGN.md overrides fields from the environment: ``KP_SOURCE``, ``KP_SOURCE_PATH``,
``KP_WAREHOUSE``, ``KP_START_DATE`` / ``KP_END_DATE`` (narrow the history), ``KP_TRAIN_END`` (the training
cut: one fold unless ``KP_FOLDS`` says otherwise), ``KP_FOLDS`` (walk-forward folds after the cut),
``KP_TAU_SWEEP_FOLDS`` (the folds of the taus other than the report's: ``all``, ``last`` or ``none``), ``KP_TASKS``
(the task families: ``bsh``, ``bsh,vol``),
``KP_TRAIN_ACCELERATOR`` / ``_DEVICES`` / ``_PRECISION`` / ``_STRATEGY`` (the Lightning Trainer),
``KP_PLANTED_IC`` / ``KP_PLANTED_VOL`` (the synthetic source's positive controls), ``KP_TRAIN_SHARD_TRACE``, ``KP_WARM_START`` / ``KP_WARM_START_STEPS`` (rolling warm starts of the foundations over
walk-forward folds), ``KP_PRETRAIN_HORIZON`` (the GPTs' pretraining target), ``KP_TRAIN_SIDE_BY_SIDE`` / ``KP_TRAIN_THREADS`` (training runs at once and their torch
threads), ``KP_DROP_DIR`` and ``KP_DURABLE_WRITES``. ``load_settings`` is the only reader of the
environment: it resolves them once, when the definitions load, and partitions, schedules, sensors and every
asset body are built from that one ``Settings``. Nothing here imports dagster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

from kinematic_pipeline.calendar import CALENDAR_START, calendar_end, trading_days
from kinematic_pipeline.config.profiles import profile_settings
from kinematic_pipeline.config.settings import SOURCES, TAU_SWEEP_FOLDS, DataConfig, Settings
from kinematic_pipeline.warehouse.repair import upgrade_flat_days_once


def check_training_cut(data: DataConfig, train_end: dt.date) -> None:
    """The cut must leave at least one training day and, when the history's end is known, one test day."""
    if not trading_days(data.start_date, train_end):
        raise ValueError(
            f"training cut {train_end} (KP_TRAIN_END) leaves no training day: the history starts "
            f"{data.start_date} (KP_START_DATE); the cut must be on or after the first session"
        )
    if data.end_date is not None and not trading_days(train_end + dt.timedelta(days=1), data.end_date):
        raise ValueError(
            f"training cut {train_end} (KP_TRAIN_END) leaves no test day: the history ends {data.end_date} "
            "(KP_END_DATE); the test period is every session after the cut"
        )


def _parse_date(text: str, variable: str) -> dt.date:
    try:
        day = dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{variable}={text!r} is not an ISO date (YYYY-MM-DD)") from exc
    if not CALENDAR_START <= day <= calendar_end():
        raise ValueError(
            f"{variable}={text} is outside the NYSE calendar this pipeline builds "
            f"({CALENDAR_START}..{calendar_end()}); "
            f"set {variable} inside it"
        )
    return day


TRAIN_ENV = {  # environment variable -> TrainConfig field (Lightning Trainer arguments)
    "KP_TRAIN_ACCELERATOR": "accelerator",
    "KP_TRAIN_DEVICES": "devices",
    "KP_TRAIN_PRECISION": "precision",
    "KP_TRAIN_STRATEGY": "strategy",
    "KP_TRAIN_COMPILE": "compile",  # "regional": long pretraining runs compile each repeated block
}
TRAIN_BUDGET_ENV = {  # environment variable -> TrainConfig field (a longer budget overnight, a shorter one in a test)
    "KP_PRETRAIN_STEPS": "pretrain_steps",
    "KP_FINETUNE_STEPS": "finetune_steps",
    "KP_EVAL_EVERY": "eval_every",
    "KP_WARM_START_STEPS": "warm_start_steps",  # the budget of a fold's foundation warm-started from the previous fold's
}
TRAIN_PROCESS_ENV = {  # environment variable -> TrainConfig field (how training uses the machine's cores)
    "KP_TRAIN_SIDE_BY_SIDE": "side_by_side",  # runs at once in materialize (auto: one a core): a chain per process
    "KP_TRAIN_THREADS": "threads",  # torch's threads in a training step (a side-by-side worker sets its share)
}


def load_settings(
    profile: str | None = None,
    *,
    source: str | None = None,
    source_path: str | None = None,
    warehouse: str | os.PathLike | None = None,
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
    env: dict[str, str] | None = None,
) -> Settings:
    """Resolve settings: profile defaults < environment (KP_*) < explicit arguments."""
    env = dict(os.environ if env is None else env)
    base = profile_settings(profile or env.get("KP_PROFILE") or "ci")

    source = source or env.get("KP_SOURCE") or base.data.source
    if source not in SOURCES:
        raise ValueError(f"KP_SOURCE={source!r}: expected one of {', '.join(SOURCES)}")
    source_path = source_path or env.get("KP_SOURCE_PATH") or base.data.source_path
    if source in ("parquet", "csv") and not source_path:
        raise ValueError(f"KP_SOURCE={source} needs KP_SOURCE_PATH (a file or a directory of {source} files)")
    if start_date is None and env.get("KP_START_DATE"):
        start_date = _parse_date(env["KP_START_DATE"], "KP_START_DATE")
    if end_date is None and env.get("KP_END_DATE"):
        end_date = _parse_date(env["KP_END_DATE"], "KP_END_DATE")
    data = dataclasses.replace(
        base.data,
        source=source,
        source_path=source_path,
        start_date=start_date or base.data.start_date,
        end_date=end_date if end_date is not None else base.data.end_date,
    )
    # A real source has no fixed last day: load what it holds unless told otherwise.
    if source != "synthetic" and end_date is None and not env.get("KP_END_DATE"):
        data = dataclasses.replace(data, end_date=None)
    if data.end_date is not None and data.end_date < data.start_date:
        raise ValueError(f"end date {data.end_date} is before start date {data.start_date}")
    split = base.split
    if env.get("KP_TRAIN_END"):
        # An explicit cut must split the history. (A profile's default cut may lie beyond a history narrowed
        # for ingest only; the stages that need a training or a test day say so when they run.)
        split = dataclasses.replace(split, train_end=_parse_date(env["KP_TRAIN_END"], "KP_TRAIN_END"))
        check_training_cut(data, split.train_end)
    if env.get("KP_FOLDS") or env.get("KP_TRAIN_END"):
        # An explicit cut is one fold (the split it names) unless KP_FOLDS asks for walk-forward folds after it.
        text = env.get("KP_FOLDS") or "1"
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"KP_FOLDS={text!r}: expected a positive integer (1: the single cut KP_TRAIN_END)")
        split = dataclasses.replace(split, folds=int(text))
    if env.get("KP_TAU_SWEEP_FOLDS"):
        sweep = env["KP_TAU_SWEEP_FOLDS"]
        if sweep not in TAU_SWEEP_FOLDS:
            raise ValueError(f"KP_TAU_SWEEP_FOLDS={sweep!r}: expected one of {', '.join(TAU_SWEEP_FOLDS)}")
        split = dataclasses.replace(split, tau_sweep_folds=sweep)
    evaluate = base.evaluate
    tokenize = base.tokenize
    if env.get("KP_TASKS"):  # e.g. "bsh,vol": the task families the run labels and fine-tunes (tasks.registry)
        tokenize = dataclasses.replace(tokenize, tasks=tuple(p.strip() for p in env["KP_TASKS"].split(",")))

    synthetic = base.synthetic
    if env.get("KP_PLANTED_IC"):
        try:
            planted = float(env["KP_PLANTED_IC"])
        except ValueError:
            planted = -1.0
        if not 0.0 <= planted < 1.0 or source != "synthetic":
            raise ValueError(
                f"KP_PLANTED_IC={env['KP_PLANTED_IC']!r}: expected a daily IC in [0, 1) on the synthetic source"
            )
        synthetic = dataclasses.replace(synthetic, planted_ic=planted)
    if env.get("KP_PLANTED_VOL"):
        if env["KP_PLANTED_VOL"] not in ("0", "1") or source != "synthetic" or synthetic.planted_ic is not None:
            raise ValueError(
                f"KP_PLANTED_VOL={env['KP_PLANTED_VOL']!r}: expected 1 (a planted log-AR(1) variance) or 0, on the "
                "synthetic source and without KP_PLANTED_IC"
            )
        synthetic = dataclasses.replace(synthetic, planted_vol=env["KP_PLANTED_VOL"] == "1")
    if env.get("KP_SYNTHETIC_TICKERS"):
        if not env["KP_SYNTHETIC_TICKERS"].isdigit() or int(env["KP_SYNTHETIC_TICKERS"]) < 1:
            raise ValueError(f"KP_SYNTHETIC_TICKERS={env['KP_SYNTHETIC_TICKERS']!r}: expected a positive integer")
        synthetic = dataclasses.replace(synthetic, n_tickers=int(env["KP_SYNTHETIC_TICKERS"]))
    if env.get("KP_MEMBERSHIP_FILE"):
        membership = str(Path(env["KP_MEMBERSHIP_FILE"]).expanduser().resolve())
        evaluate = dataclasses.replace(evaluate, membership_file=membership)
    wh = Path(warehouse or env.get("KP_WAREHOUSE") or base.warehouse.root).expanduser().resolve()
    # Deployment settings of training (GPUs, precision, DDP), without a code change
    budget = {}
    for var, name in TRAIN_BUDGET_ENV.items():
        if env.get(var):
            if not env[var].isdigit() or int(env[var]) < 1:
                raise ValueError(f"{var}={env[var]!r}: expected a positive number of optimizer steps")
            budget[name] = int(env[var])
    for var, name in TRAIN_PROCESS_ENV.items():
        if env.get(var) == "auto":  # one run a usable core at one thread each (the demo's and real's default)
            budget[name] = None
        elif env.get(var):
            if not env[var].isdigit() or int(env[var]) < 1:
                raise ValueError(f"{var}={env[var]!r}: expected a positive integer or auto")
            budget[name] = int(env[var])
    if env.get("KP_SEEDS"):  # e.g. "1234,1235": one foundation, adapters and backtests per seed
        parts = [p.strip() for p in env["KP_SEEDS"].split(",")]
        if not all(p.lstrip("-").isdigit() for p in parts) or len(set(parts)) != len(parts):
            raise ValueError(f"KP_SEEDS={env['KP_SEEDS']!r}: expected distinct integers separated by commas")
        budget["seeds"] = tuple(int(p) for p in parts)
    if env.get("KP_WARM_START"):  # 1: fold k's foundation continues from fold k-1's; 0: every fold from scratch
        if env["KP_WARM_START"] not in ("0", "1"):
            raise ValueError(f"KP_WARM_START={env['KP_WARM_START']!r}: expected 1 (warm starts) or 0 (from scratch)")
        budget["warm_start"] = env["KP_WARM_START"] == "1"
    model = base.model
    if env.get("KP_PRETRAIN_HORIZON"):  # the GPTs' pretraining target: token t + h (1: the paper's next token)
        if not env["KP_PRETRAIN_HORIZON"].isdigit():
            raise ValueError(f"KP_PRETRAIN_HORIZON={env['KP_PRETRAIN_HORIZON']!r}: expected a positive integer")
        gpt = dataclasses.replace(model.gpt, pretrain_horizon=int(env["KP_PRETRAIN_HORIZON"]))
        model = dataclasses.replace(model, gpt=gpt)
    train = dataclasses.replace(
        base.train,
        **{field: env[var] for var, field in TRAIN_ENV.items() if env.get(var)},
        **budget,
        shard_trace=env.get("KP_TRAIN_SHARD_TRACE") or None,
    )
    drop = Path(env["KP_DROP_DIR"]).expanduser().resolve() if env.get("KP_DROP_DIR") else None
    durable = env.get("KP_DURABLE_WRITES", "0") == "1"
    settings = dataclasses.replace(
        base,
        warehouse=wh,
        data=data,
        split=split,
        tokenize=tokenize,
        synthetic=synthetic,
        model=model,
        train=train,
        evaluate=evaluate,
        drop_dir=drop,
        durable_writes=durable,
    )
    upgrade_flat_days_once(settings.warehouse)  # an older warehouse's flat days into day units, here and nowhere else
    return settings
