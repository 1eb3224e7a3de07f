"""Pins of the trained models: an adapter is loaded only beside the foundation it was fine-tuned from, a warm-started
foundation only beside the parent it continued from, a foundation only with the bytes its own files.json records,
predictions only beside the model files that made them; every recorded path relative to the warehouse root, so a
copied or moved warehouse checks its own files. No dagster.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import StalePairError, rematerialize
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import file_sha256, write_bytes_atomic
from kinematic_pipeline.warehouse.layout import PIN_FILE, PREDICTION_CLASS_WEIGHTS, PREDICTION_MODEL


def warehouse_path(wh: Warehouse, path: Path) -> str:
    """How a pin records ``path``: relative to the warehouse root (POSIX) when it lies under it, so that a copied or
    moved warehouse checks its own files; absolute otherwise."""
    resolved, root = Path(path).resolve(), wh.root.resolve()
    return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else str(path)


def resolve_pinned(wh: Warehouse, recorded: str, expected: list[Path] | None = None) -> Path | None:
    """The file a pin's ``recorded`` path names in this warehouse: a relative path under its root; an absolute one
    (written by an older version) as itself when it lies under this root, else by the part of it that is one of
    ``expected``'s paths relative to this root (the same file of the warehouse it was copied or moved from).
    None when an absolute path outside this warehouse matches none of them."""
    path = Path(recorded)
    if not path.is_absolute():
        return wh.root / path
    root = wh.root.resolve()
    if path.resolve().is_relative_to(root):
        return path
    for candidate in expected or []:
        rel = Path(candidate).resolve().relative_to(root) if Path(candidate).resolve().is_relative_to(root) else None
        if rel is not None and len(path.parts) > len(rel.parts) and path.parts[-len(rel.parts) :] == rel.parts:
            return wh.root / rel
    return None


def _expected_files(wh, asset: str, date: str | None) -> list[Path]:
    """Where the file an input record names by ``asset`` and ``date`` lies in this warehouse: a window store's
    tokens, a features file (either part), a day's shard."""
    from kinematic_pipeline.window_store import TOKENS_FILE

    for tok in TOKENIZATIONS.values():
        if asset == tok.window_store_asset:
            return [wh.window_store_dir(tok.tokens_asset) / TOKENS_FILE]
        if asset == tok.features_asset:
            return [wh.features_file(tok.name, part) for part in ("training", "test")]
    return [wh.shard(asset, date)] if date else []


def recorded_file(wh, asset: str, date: str | None, recorded: str) -> Path:
    """The file an input record (a row of the features' or the predictions' ``inputs``, of a ``shards_used.parquet``
    or of a provenance) names in this warehouse, as ``model_pins.resolve_pinned`` reads a model pin: a relative path
    under its root; an absolute one an older version wrote by its part under the warehouse it was written in (the
    file ``asset`` and ``date`` name); the recorded path itself when it names none of this warehouse's files."""
    path = resolve_pinned(wh, recorded)
    if path is None:
        path = resolve_pinned(wh, recorded, _expected_files(wh, asset, date))
    return Path(recorded) if path is None else path


def foundation_damage(wh: Warehouse, policy: Policy, sha256: str) -> str | None:
    """The one-line refusal when the foundation of ``policy`` no longer holds the bytes its own ``files.json``
    records (damaged since it was written: not a retrained foundation), None when it holds them (or records
    nothing to compare with)."""
    from kinematic_pipeline.warehouse.verified import MODEL_MANIFEST

    foundation = wh.foundation_checkpoint(policy)
    try:
        recorded = json.loads((foundation.parent / MODEL_MANIFEST).read_text()).get(foundation.name)
    except (OSError, ValueError, AttributeError):
        return None
    if recorded is None or recorded == sha256:
        return None
    return (
        f"{foundation} is not the file its manifest records (sha256 {sha256[:16]}, its "
        f"{MODEL_MANIFEST} says {recorded[:16]}): the foundation is damaged, not retrained; "
        f"{rematerialize(f'{policy.variant.name}_foundation', policy.fit_key)} (then its adapters)"
    )


def pin_foundation(
    wh: Warehouse, adapter_dir: Path, foundation: Path, foundation_sha256: str, task_record: dict
) -> Path:
    """Record, in an adapter's folder, the foundation (path relative to the warehouse, and sha256) it was fine-tuned
    from, and its task's record (``Task.record``: Buy/Sell/Hold's class weights, what its probabilities mean)."""
    path = Path(adapter_dir) / PIN_FILE
    record = {"foundation": warehouse_path(wh, foundation), "foundation_sha256": foundation_sha256, **task_record}
    write_bytes_atomic(path, json.dumps(record, indent=1).encode(), durable=wh.durable)
    return path


def check_pair(wh: Warehouse, policy: Policy) -> str:
    """The foundation's sha256 when the adapter of ``policy`` was fine-tuned from the foundation on disk now;
    ``StalePairError`` naming both hashes and the asset to re-materialize otherwise (a retrained foundation
    under an old adapter, or an adapter with no record of its foundation). A foundation whose bytes differ from
    its own ``files.json`` is damaged, not retrained: ``CorruptFileError`` naming it and the foundation to
    re-materialize (re-fine-tuning the adapters on it would bake the damage in)."""
    from kinematic_pipeline.warehouse.verified import CorruptFileError

    foundation, adapter = wh.policy_files(policy)
    fix = rematerialize(policy.variant.asset("adapter"), policy.key)
    pin = adapter / PIN_FILE
    now = file_sha256(foundation)
    damaged = foundation_damage(wh, policy, now)
    if damaged is not None:
        raise CorruptFileError(damaged)
    if not pin.exists():
        raise StalePairError(
            f"{adapter} records no foundation (no {PIN_FILE}; the foundation now is {now[:16]}): {fix}"
        )
    pinned = json.loads(pin.read_text())["foundation_sha256"]
    if pinned != now:
        raise StalePairError(
            f"the adapter of {policy} was fine-tuned from foundation sha256 {pinned[:16]}, but {foundation} is now "
            f"sha256 {now[:16]} (the foundation was retrained): {fix}"
        )
    return now


PARENT_FILE = "parent.json"  # beside a warm-started foundation: its parent (path relative to the warehouse, sha256)


def parent_foundation(settings: Settings, policy: Policy) -> Policy | None:
    """The foundation the foundation of ``policy`` continues from: the previous walk-forward fold's, same variant and
    seed, when ``train.warm_start`` is on; None for the first fold, a single cut, or warm starts off."""
    folds = settings.folds
    if not settings.train.warm_start or policy.fold not in folds or folds.index(policy.fold) == 0:
        return None
    return Foundation(policy.variant, policy.seed, folds[folds.index(policy.fold) - 1])


def pin_parent(wh: Warehouse, foundation_dir: Path, parent: Path | None, parent_sha256: str | None) -> Path:
    """Record, in a foundation's folder, the parent foundation (its ``model.pt``, relative to the warehouse root, and
    its sha256) it was warm-started from; with no parent, remove a record an earlier warm-started run left."""
    path = Path(foundation_dir) / PARENT_FILE
    if parent is None:
        path.unlink(missing_ok=True)
        return path
    record = {"parent": warehouse_path(wh, parent), "parent_sha256": parent_sha256}
    write_bytes_atomic(path, json.dumps(record, indent=1).encode(), durable=wh.durable)
    return path


def check_parent(settings: Settings, policy: Policy, foundation_dir: Path | None = None) -> str | None:
    """The sha256 of the parent the foundation of ``policy`` (in ``foundation_dir``, default the warehouse's) was
    warm-started from, when that parent on disk now is the one it recorded, and so on back to the first fold (None for
    a foundation trained from scratch, as the settings say it should be). ``StalePairError`` naming both files and the
    fix otherwise: a retrained parent, a missing one, or a record that disagrees with ``train.warm_start``."""
    from kinematic_pipeline.warehouse.layout import MODEL_FILE
    from kinematic_pipeline.warehouse.verified import verify_model_folder

    wh, policy = settings.warehouse, policy.foundation
    folder = Path(foundation_dir or wh.foundation_dir(policy))
    child, pin = folder / MODEL_FILE, folder / PARENT_FILE
    fix = rematerialize(policy.variant.asset("foundation"), policy.fit_key)
    expected = parent_foundation(settings, policy)
    recorded = json.loads(pin.read_text()) if pin.exists() else None
    if expected is None:
        if recorded is not None:
            raise StalePairError(
                f"{child} was warm-started from {recorded['parent']} ({pin}), but this run trains fold "
                f"{policy.fold.label} from scratch (train.warm_start, KP_WARM_START): {fix}"
            )
        return None
    parent = wh.foundation_checkpoint(expected)
    if recorded is None:
        raise StalePairError(
            f"{child} was trained from scratch (no {PARENT_FILE}), but this run warm-starts it from {parent} "
            f"(train.warm_start, KP_WARM_START): {fix}"
        )
    if recorded["parent"] != warehouse_path(wh, parent):
        raise StalePairError(f"{child} was warm-started from {recorded['parent']}, not from {parent}: {fix}")
    parent_fix = rematerialize(policy.variant.asset("foundation"), expected.fit_key)
    if not parent.exists():
        raise StalePairError(
            f"{child} was warm-started from {parent} (sha256 {recorded['parent_sha256'][:16]}), which is missing now: "
            f"{parent_fix}, then {fix}"
        )
    now = verify_model_folder(parent.parent, parent_fix).get(MODEL_FILE) or file_sha256(parent)
    if now != recorded["parent_sha256"]:
        raise StalePairError(
            f"{child} was warm-started from {parent} sha256 {recorded['parent_sha256'][:16]}, but {parent} is now "
            f"sha256 {now[:16]} (the parent foundation was retrained): {fix}"
        )
    check_parent(settings, expected)  # the parent's own parent, back to the first fold
    return now


# --- the predictions' pin: the model files that made them -----------------------------------------------------


MODEL_FILES_SCHEMA = {"path": pl.String, "sha256": pl.String}


def model_files(settings: Settings, policy: Policy) -> list[Path]:
    """The files that decide a policy's predictions: a model's foundation and adapter, a probe's fit (a rule: none)."""
    return policy.variant.model_files(settings.warehouse, policy)


def model_files_frame(settings: Settings, policy: Policy) -> pl.DataFrame:
    """The model files of ``policy`` and their sha256, each path relative to the warehouse root (``pins.
    warehouse_path``): a copied or moved warehouse checks its own files, never the original's."""
    wh = settings.warehouse
    rows = [{"path": warehouse_path(wh, p), "sha256": file_sha256(p)} for p in model_files(settings, policy)]
    return pl.DataFrame(rows, schema=MODEL_FILES_SCHEMA)


def check_predictions_model(settings: Settings, policy: Policy) -> None:
    """The predictions of ``policy`` were made by the model files on disk now, in this warehouse (a recorded path is
    relative to its root; an absolute one an older version wrote is read by its part under the warehouse it was
    written in); ``StalePairError`` naming the file, both hashes and the partition to re-materialize otherwise (a
    re-fine-tuned adapter under old predictions, a model replaced in a copy of the warehouse)."""
    wh = settings.warehouse
    path = wh.predictions_extra(PREDICTION_MODEL, policy)
    key = policy.key
    fix = f"re-materialize {policy.variant.name}_predictions partition {key}"
    if not path.exists():
        raise StalePairError(f"the predictions of {policy} record no model files ({path} is missing): {fix}")
    expected = None
    for row in exact.read_parquet(path).iter_rows(named=True):
        file = resolve_pinned(wh, row["path"])
        if file is None:  # an absolute path of another warehouse: matched by its part relative to that one
            expected = model_files(settings, policy) if expected is None else expected
            file = resolve_pinned(wh, row["path"], expected)
        if file is None:
            raise StalePairError(
                f"the predictions of {policy} record {row['path']}, outside this warehouse ({wh.root}) and none of "
                f"its model files: {fix}"
            )
        now = file_sha256(file) if file.exists() else "missing"
        if now != row["sha256"]:
            raise StalePairError(
                f"the predictions of {policy} were made by {file} sha256 {row['sha256'][:16]}, it is now "
                f"{now[:16]}: {fix}"
            )


# --- the class weights a model was trained with: they define what its probabilities mean ----------------------


def trained_class_weights(settings: Settings, policy: Policy) -> tuple[float, float, float] | None:
    """The class weights [Buy, Sell, Hold] ``policy``'s model was trained with, as its adapter's pin or its probe's
    fit record holds them; None for a rule (its one-hot actions mean the same under any weights) and for a task that
    trains with none (its ``Task.record`` names no class weights). A model that records none (fitted by an older
    version) is refused, naming the partition to re-materialize."""
    record = policy.variant.training_record(settings.warehouse, policy)
    if record is None or "class_weights" not in policy.task.record:
        return None
    path, asset, _ = record
    recorded = json.loads(path.read_text()).get("class_weights") if path.exists() else None
    if recorded is None:
        raise StalePairError(
            f"{path} records no class weights (trained by an older version): {rematerialize(asset, policy.key)}"
        )
    return tuple(float(w) for w in recorded)


def check_class_weights(settings: Settings, policy: Policy) -> tuple[float, float, float] | None:
    """``trained_class_weights`` when they are the settings' ``train.class_weights`` (what evaluation would read the
    probabilities with); ``StalePairError`` naming both vectors and the partition to re-materialize otherwise."""
    trained, now = trained_class_weights(settings, policy), tuple(float(w) for w in settings.train.class_weights)
    if trained is not None and trained != now:
        _, asset, kind = policy.variant.training_record(settings.warehouse, policy)
        raise StalePairError(
            f"{policy} was {kind} with class weights {_weights_text(trained)}, but train.class_weights is now "
            f"{_weights_text(now)}: its probabilities would be de-weighted with the wrong vector; "
            f"{rematerialize(asset, policy.key)} (or restore train.class_weights)"
        )
    return trained


def _weights_text(weights) -> str:
    return "[" + ", ".join(f"{w:g}" for w in weights) + "]"


WEIGHT_COLUMNS = ("w_buy", "w_sell", "w_hold")  # predictions/class_weights/<stem>.parquet: one row


def predictions_class_weights(settings: Settings, policy: Policy) -> tuple[float, float, float] | None:
    """The class weights ``policy``'s predictions carry (written with them, the model's own), checked against its
    model's record on read; None for a rule. ``StalePairError`` naming the partition to re-materialize when they
    are missing (predictions of an older version) or differ from the model's (re-trained since)."""
    trained = trained_class_weights(settings, policy)
    if trained is None:
        return None
    path = settings.warehouse.predictions_extra(PREDICTION_CLASS_WEIGHTS, policy)
    fix = rematerialize(policy.variant.asset("predictions"), policy.key)
    if not path.exists():
        raise StalePairError(f"the predictions of {policy} record no class weights ({path} is missing): {fix}")
    carried = tuple(float(w) for w in exact.read_parquet(path).select(WEIGHT_COLUMNS).row(0))
    if carried != trained:
        raise StalePairError(
            f"the predictions of {policy} carry class weights {_weights_text(carried)}, its model was trained with "
            f"{_weights_text(trained)}: {fix}"
        )
    return carried


def run_class_weights(settings: Settings) -> tuple[float, float, float]:
    """The class weights of the run's predictions, read with every table that undoes them: the one vector every
    trained policy of the run (``run_keys.run_policies``) whose predictions were written carries; a ValueError
    naming them when they differ. A run with no trained policy predicted yet reads ``train.class_weights`` (a
    rule's one-hot probabilities mean the same under any weights)."""
    from kinematic_pipeline.run_keys import run_policies

    found: dict[tuple, list[str]] = {}
    wh = settings.warehouse
    for policy in run_policies(settings):
        trained = policy.variant.training_record(wh, policy) is not None
        if trained and wh.predictions_extra(PREDICTION_CLASS_WEIGHTS, policy).exists():
            found.setdefault(predictions_class_weights(settings, policy), []).append(str(policy))
    if len(found) > 1:
        named = "; ".join(f"{_weights_text(w)}: {', '.join(names[:3])}" for w, names in found.items())
        raise ValueError(f"the run's predictions carry more than one set of class weights ({named}): re-materialize")
    return next(iter(found), tuple(float(w) for w in settings.train.class_weights))
