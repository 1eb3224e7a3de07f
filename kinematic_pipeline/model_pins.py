"""Pins of the trained models: an adapter is loaded only beside the foundation it was fine-tuned from, a warm-started
foundation only beside the parent it continued from, a foundation only with the bytes its own files.json records;
every recorded path relative to the warehouse root, so a copied or moved warehouse checks its own files. No dagster.
"""

from __future__ import annotations

import json
from pathlib import Path

from kinematic_pipeline.atomic_files import file_sha256, write_bytes_atomic
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import fold_of
from kinematic_pipeline.layout import PIN_FILE
from kinematic_pipeline.pins import StalePairError, rematerialize
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.warehouse import Warehouse


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


def foundation_damage(wh: Warehouse, policy: Policy, sha256: str) -> str | None:
    """The one-line refusal when the foundation of ``policy`` no longer holds the bytes its own ``files.json``
    records (damaged since it was written: not a retrained foundation), None when it holds them (or records
    nothing to compare with)."""
    from kinematic_pipeline.verified import MODEL_MANIFEST

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
        f"{rematerialize(f'{policy.variant}_foundation', policy.fit_key)} (then its adapters)"
    )


def pin_foundation(wh: Warehouse, adapter_dir: Path, foundation: Path, foundation_sha256: str) -> Path:
    """Record, in an adapter's folder, the foundation (path relative to the warehouse, and sha256) it was fine-tuned
    from."""
    path = Path(adapter_dir) / PIN_FILE
    record = {"foundation": warehouse_path(wh, foundation), "foundation_sha256": foundation_sha256}
    write_bytes_atomic(path, json.dumps(record, indent=1).encode(), durable=wh.durable)
    return path


def check_pair(wh: Warehouse, policy: Policy) -> str:
    """The foundation's sha256 when the adapter of ``policy`` was fine-tuned from the foundation on disk now;
    ``StalePairError`` naming both hashes and the asset to re-materialize otherwise (a retrained foundation
    under an old adapter, or an adapter with no record of its foundation). A foundation whose bytes differ from
    its own ``files.json`` is damaged, not retrained: ``CorruptFileError`` naming it and the foundation to
    re-materialize (re-fine-tuning the adapters on it would bake the damage in)."""
    from kinematic_pipeline.verified import CorruptFileError

    foundation, adapter = wh.policy_files(policy)
    fix = rematerialize(f"{policy.variant}_adapter", policy.key)
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
    from kinematic_pipeline.folds import fold_names

    names = fold_names(settings)
    if not settings.train.warm_start or policy.fold not in names or names.index(policy.fold) == 0:
        return None
    return Policy(policy.variant, policy.seed, None, names[names.index(policy.fold) - 1])


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
    from kinematic_pipeline.layout import MODEL_FILE
    from kinematic_pipeline.verified import verify_model_folder

    wh, policy = settings.warehouse, policy.foundation
    folder = Path(foundation_dir or wh.foundation_dir(policy))
    child, pin = folder / MODEL_FILE, folder / PARENT_FILE
    fix = rematerialize(f"{policy.variant}_foundation", policy.fit_key)
    expected = parent_foundation(settings, policy)
    recorded = json.loads(pin.read_text()) if pin.exists() else None
    if expected is None:
        if recorded is not None:
            raise StalePairError(
                f"{child} was warm-started from {recorded['parent']} ({pin}), but this run trains fold "
                f"{fold_of(settings, policy.fold).label} from scratch (train.warm_start, KP_WARM_START): {fix}"
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
    parent_fix = rematerialize(f"{policy.variant}_foundation", expected.fit_key)
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
