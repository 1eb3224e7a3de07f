"""The window store: the shards' windows byte for byte, nothing after the cut, deterministic, and an error
when it no longer matches the warehouse; uniform epoch samples and their expected day coverage."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import shutil

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.sampling import epoch_sample, expected_distinct_days, part_of
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.verified import SIDECAR_SUFFIX
from kinematic_pipeline.window_store import StaleStoreError, open_store
from kinematic_pipeline_tests.conftest import CUT, _bars, _perturb_after, _run_all, _settings, copy_warehouse

ASSET = SPLINE.tokens_asset


@pytest.fixture(scope="module")
def built(tokenized_once, tmp_path_factory):
    """A copy of the run's tokenized warehouse: its window stores are built (``_training_inputs``)."""
    return copy_warehouse(tokenized_once, tmp_path_factory.mktemp("store"))


def _files(folder) -> dict[str, str]:
    """The store's files and their hashes (not the verified-sidecars: they hold the files' mtimes)."""
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if not p.name.endswith(SIDECAR_SUFFIX)}


def test_the_store_holds_every_window_of_every_day_up_to_the_cut_as_the_shards_do(built):
    store = open_store(built, SPLINE)
    wh = built.warehouse
    days = wh.shard_days(ASSET, until=built.split.train_end)
    assert store.days["date"].max() <= built.split.train_end and store.manifest["train_end"] == built.split.train_end
    row = 0
    for day in days:  # the slow way: each shard on its own, in day order
        shard = pl.read_parquet(wh.shard(ASSET, day), columns=["ticker", "date", "tokens"])
        if shard.height == 0:
            continue
        tokens = shard["tokens"].to_numpy()
        np.testing.assert_array_equal(store.tokens[row : row + shard.height], tokens)
        assert store.rows[row : row + shard.height].select("date", "ticker").equals(shard.select("date", "ticker"))
        row += shard.height
    assert row == store.tokens.shape[0] == store.manifest["windows"]
    rows = np.array([row - 1, 0, row // 2, 3])
    np.testing.assert_array_equal(store.read(rows), np.asarray(store.tokens)[rows])


def test_a_rebuild_from_the_same_shards_is_byte_identical_and_an_unchanged_store_is_left_alone(built, tmp_path):
    folder = built.warehouse.window_store_dir(ASSET)
    before = _files(folder)
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert not materialize_window_store(built, SPLINE, progress=False).rebuilt
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    copy = dataclasses.replace(built, warehouse=tmp_path / "copy")
    shutil.copytree(built.warehouse, copy.warehouse, ignore=shutil.ignore_patterns("window_store"))
    assert materialize_window_store(copy, SPLINE, progress=False).rebuilt
    assert _files(copy.warehouse.window_store_dir(ASSET)) == before


@pytest.mark.slow
def test_the_store_does_not_change_when_bars_after_the_cut_change(built, tmp_path):
    other = _settings(tmp_path, "perturbed", _perturb_after(_bars(), CUT), taus=(0.01,))
    _run_all(other)
    materialize_window_store(other, SPLINE, progress=False)
    assert _files(other.warehouse.window_store_dir(ASSET)) == _files(built.warehouse.window_store_dir(ASSET))


def test_a_store_of_other_shards_or_another_cut_is_an_error_naming_the_asset_to_materialize(built, tmp_path):
    settings = dataclasses.replace(built, warehouse=tmp_path / "wh")
    shutil.copytree(built.warehouse, settings.warehouse)
    earlier = dataclasses.replace(settings, split=dataclasses.replace(settings.split, train_end=dt.date(2021, 5, 28)))
    with pytest.raises(StaleStoreError, match="built for the training cut .*: materialize spline_window_store"):
        open_store(earlier, SPLINE)
    wh = settings.warehouse
    day = wh.shard_days(ASSET, until=settings.split.train_end)[-1]
    manifest = pl.read_parquet(wh.manifest(ASSET, day)).with_columns(pl.lit("0" * 64).alias("content_hash"))
    manifest.write_parquet(wh.manifest(ASSET, day))  # as a re-tokenized day would: its shard has new bytes
    with pytest.raises(StaleStoreError, match="built from other spline_tokens shards.*materialize spline_window_store"):
        open_store(settings, SPLINE)
    shutil.rmtree(wh.window_store_dir(ASSET))
    with pytest.raises(StaleStoreError, match="no window store of spline_tokens"):
        open_store(settings, SPLINE)


def test_a_shard_that_does_not_hold_what_its_manifest_says_stops_the_build_naming_the_day(built, tmp_path):
    settings = dataclasses.replace(built, warehouse=tmp_path / "wh")
    shutil.copytree(built.warehouse, settings.warehouse, ignore=shutil.ignore_patterns("window_store"))
    wh = settings.warehouse
    day = wh.shard_days(ASSET, until=settings.split.train_end)[-3]
    shard = pl.read_parquet(wh.shard(ASSET, day))
    shard.head(shard.height - 1).write_parquet(wh.shard(ASSET, day))
    # its bytes are checked against the manifest's sha256 before a row is read (``Warehouse.verified_shards``)
    with pytest.raises(ValueError, match=f"is not the file its manifest records .* Re-materialize {ASSET} for {day}"):
        materialize_window_store(settings, SPLINE, progress=False)
    assert not wh.window_store_dir(ASSET).exists() and not list(wh.window_store_dir(ASSET).parent.glob(".staging/*"))


def test_a_full_disk_names_the_store_and_a_second_builder_waits_for_the_first(built, tmp_path, monkeypatch):
    import errno
    import threading

    from kinematic_pipeline.stages import window_store

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(window_store, "_build_window_store", full)
    with pytest.raises(OSError, match=r"no space left on the device building the spline_window_store .* GB free"):
        materialize_window_store(built, SPLINE, progress=False)
    order = []

    def slow(settings, asset, progress):
        order.append("start")
        threading.Event().wait(0.3)
        order.append("end")

    monkeypatch.setattr(window_store, "_build_window_store", slow)
    builders = [threading.Thread(target=materialize_window_store, args=(built, SPLINE, False)) for _ in range(2)]
    for b in builders:
        b.start()
    for b in builders:
        b.join()
    assert order == ["start", "end", "start", "end"]  # one writer at a time (flock per open file, even in-process)


def test_a_byte_flipped_in_the_store_with_its_mtime_put_back_is_refused_naming_the_block_and_the_fix(built, tmp_path):
    """Bit rot keeps the mtime (and ``cp -p`` puts it back): the store's bytes are verified per block on open."""
    from kinematic_pipeline.warehouse.verified import CorruptFileError
    from kinematic_pipeline_tests.unit.test_verified_files import flip_keeping_mtime

    settings = dataclasses.replace(built, warehouse=tmp_path / "wh")
    shutil.copytree(built.warehouse, settings.warehouse)
    folder = settings.warehouse.window_store_dir(ASSET)
    store = open_store(settings, SPLINE)
    assert store.manifest["block_sha256"] and store.manifest["block_bytes"] == 64 << 20
    tokens = folder / "tokens.npy"
    flip_keeping_mtime(tokens, offset=tokens.stat().st_size - 100)  # a value in the last window
    with pytest.raises(
        CorruptFileError, match=r"tokens.npy is not the file its manifest records: block 0 .*rows 0\.\."
    ):
        open_store(settings, SPLINE)
    try:
        open_store(settings, SPLINE)
    except CorruptFileError as exc:
        assert "\n" not in str(exc) and str(exc).endswith(": materialize spline_window_store")
    flip_keeping_mtime(folder / "rows.parquet")
    with pytest.raises(CorruptFileError, match="rows.parquet .* is not the file its manifest records"):
        open_store(settings, SPLINE)
    summary = materialize_window_store(settings, SPLINE, progress=False)  # the fix the line names
    assert summary.rebuilt and _files(folder) == _files(built.warehouse.window_store_dir(ASSET))
    open_store(settings, SPLINE)


def test_a_read_verifies_the_blocks_it_touches_and_names_the_damaged_one(built, tmp_path, monkeypatch):
    """Blocks of 16 KB (about 7 windows): a read of rows in intact blocks is served, one touching the damaged block is
    refused naming its rows and days; a store built before block checksums is rebuilt, byte-identical."""
    from kinematic_pipeline.stages import window_store as stage
    from kinematic_pipeline.warehouse.verified import CorruptFileError
    from kinematic_pipeline.window_store import WindowStore, read_manifest
    from kinematic_pipeline_tests.unit.test_verified_files import flip_keeping_mtime

    settings = dataclasses.replace(built, warehouse=tmp_path / "wh")
    shutil.copytree(built.warehouse, settings.warehouse, ignore=shutil.ignore_patterns("window_store"))
    monkeypatch.setattr(stage, "BLOCK_BYTES", 16 << 10)
    materialize_window_store(settings, SPLINE, progress=False)
    store = open_store(settings, SPLINE)
    n, blocks = store.manifest["windows"], len(store.manifest["block_sha256"])
    assert blocks == -(-store.path.stat().st_size // (16 << 10)) > 10
    offset = store.path.stat().st_size - n * store.window_bytes
    row = n // 2
    flip_keeping_mtime(store.path, offset=offset + row * store.window_bytes + 7)
    damaged = (offset + row * store.window_bytes) // (16 << 10)
    fresh = WindowStore(store.folder, store.manifest, store.days, store.rows, SPLINE)  # opened, nothing verified yet
    fresh.read(np.array([0, 1, n - 1]))  # blocks 0 and the last: intact
    with pytest.raises(CorruptFileError, match=rf"block {damaged} \(bytes .*rows .*{row:,}.*, days 2021-"):
        fresh.read(np.array([2, row]))
    with pytest.raises(CorruptFileError, match=f"block {damaged} "):
        open_store(settings, SPLINE)
    # a manifest without block checksums (an older version's): refused, and the next build rebuilds it
    materialize_window_store(settings, SPLINE, progress=False)
    folder = settings.warehouse.window_store_dir(ASSET)
    old = pl.read_parquet(folder / "manifest.parquet").drop("block_bytes", "block_sha256")
    old.write_parquet(folder / "manifest.parquet")
    with pytest.raises(StaleStoreError, match="built by an older version .*: materialize spline_window_store"):
        open_store(settings, SPLINE)
    assert materialize_window_store(settings, SPLINE, progress=False).rebuilt
    assert read_manifest(folder)["block_sha256"] and open_store(settings, SPLINE)


def test_the_staging_a_killed_swap_left_is_cleared_by_the_next_build(built, tmp_path):
    """A build killed (SIGKILL) right after its swap leaves the old store in the staging folder; the next build, which
    finds the store current and writes nothing, removes it."""
    import pickle
    import signal
    import subprocess
    import sys

    from kinematic_pipeline_tests.unit.test_verified_files import flip_keeping_mtime

    settings = dataclasses.replace(built, warehouse=tmp_path / "wh")
    shutil.copytree(built.warehouse, settings.warehouse)
    folder = settings.warehouse.window_store_dir(ASSET)
    flip_keeping_mtime(folder / "tokens.npy")  # so that the build rebuilds and swaps
    (tmp_path / "settings.pickle").write_bytes(pickle.dumps(settings))
    child = f"""
import os, pickle, signal
from kinematic_pipeline.stages import window_store as stage
from kinematic_pipeline.tokenizations import SPLINE
swap = stage.swap_in_folder
def swap_then_die(*args, **kwargs):
    swap(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # after the exchange, before the old store is removed
stage.swap_in_folder = swap_then_die
stage.materialize_window_store(pickle.loads(open({str(tmp_path / "settings.pickle")!r}, "rb").read()), SPLINE, False)
"""
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    staging = folder.parent / ".staging"
    left = list(staging.glob(f"{ASSET}.*"))
    assert len(left) == 1 and (left[0] / "tokens.npy").exists()  # the old (damaged) store, swapped out
    assert not materialize_window_store(settings, SPLINE, progress=False).rebuilt  # the new store is current
    assert not list(staging.glob(f"{ASSET}.*"))
    assert _files(folder) == _files(built.warehouse.window_store_dir(ASSET))


# --- sampling ------------------------------------------------------------------------------------------


def test_an_epoch_sample_is_uniform_without_replacement_and_deterministic():
    n, cap = 1000, 100
    a = epoch_sample(n, cap, seed=1, epoch=0, split="train")
    assert len(a) == cap and len(np.unique(a)) == cap and a.min() >= 0 and a.max() < n
    np.testing.assert_array_equal(a, epoch_sample(n, cap, seed=1, epoch=0, split="train"))
    assert not np.array_equal(a, epoch_sample(n, cap, seed=1, epoch=1, split="train"))
    assert not np.array_equal(a, epoch_sample(n, cap, seed=2, epoch=0, split="train"))
    assert not np.array_equal(a, epoch_sample(n, cap, seed=1, epoch=0, split="val"))
    assert sorted(epoch_sample(n, None, 1, 0, "train")) == list(range(n))  # no cap: a permutation
    hits = np.bincount(np.concatenate([epoch_sample(n, cap, 7, e, "train") for e in range(2000)]), minlength=n)
    from scipy.stats import chisquare

    assert chisquare(hits).pvalue > 0.001  # every window equally likely (expected 200 draws each)


def test_a_capped_validation_sample_is_the_same_windows_for_every_seed_in_each_seeds_order():
    """The seeds' best validation losses then differ by their training, not by their samples: the budget test's
    seed spread on real was the samples' (SplineGPT's fold-2020 foundations: 0.036-0.041 on seed 1234's sample,
    0.014-0.018 on the others', docs/results/2026-12-04.md, stop 69)."""
    n, cap = 1000, 100
    one, two = (epoch_sample(n, cap, seed=s, epoch=0, split="val") for s in (1, 2))
    assert len(one) == cap and set(one) == set(two) and not np.array_equal(one, two)
    assert set(one) != set(epoch_sample(n, cap, seed=1, epoch=0, split="train"))
    uncapped = [epoch_sample(n, None, s, 0, "val") for s in (1, 2)]
    assert sorted(uncapped[0]) == list(range(n)) and not np.array_equal(*uncapped)  # every window: as before
    hits = np.bincount(np.concatenate([epoch_sample(n, cap, 7, e, "val") for e in range(2000)]), minlength=n)
    from scipy.stats import chisquare

    assert chisquare(hits).pvalue > 0.001  # each epoch's (each fold's) sample still uniform over the windows


def test_parts_are_disjoint_equal_and_cover_the_sample_but_its_remainder():
    sample = epoch_sample(1003, None, 3, 0, "train")
    parts = [part_of(sample, p, 4) for p in range(4)]
    assert {len(p) for p in parts} == {1003 // 4}
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined) and set(joined) <= set(sample)
    np.testing.assert_array_equal(part_of(sample, 0, 1), sample)


def _exact_expected_days(per_day: list[int], k: int) -> float:
    """The slow twin: every k-subset of the windows, the mean number of days it touches."""
    day_of = np.repeat(np.arange(len(per_day)), per_day)
    subsets = list(itertools.combinations(range(len(day_of)), k))
    return sum(len(set(day_of[list(s)])) for s in subsets) / len(subsets)


@pytest.mark.parametrize("per_day, k", [([1, 2, 3], 2), ([4, 1, 1, 2], 3), ([2, 2, 2, 2, 2], 4), ([5, 1], 6)])
def test_expected_distinct_days_equals_the_exhaustive_count(per_day, k):
    assert expected_distinct_days(np.array(per_day), k) == pytest.approx(_exact_expected_days(per_day, k), rel=1e-9)


def test_expected_distinct_days_at_real_scale_matches_a_simulation():
    rng = np.random.default_rng(0)
    per_day = rng.integers(200, 460, size=4300)
    k = 8192
    expected = expected_distinct_days(per_day, k)
    day_of = np.repeat(np.arange(per_day.size), per_day)
    simulated = [len(np.unique(day_of[epoch_sample(day_of.size, k, 5, e, "train")])) for e in range(20)]
    assert abs(np.mean(simulated) / expected - 1) < 0.005
    poisson = np.sum(1 - np.exp(-k * per_day / per_day.sum()))  # sampling with replacement, nearly the same here
    assert poisson <= expected <= poisson * 1.002  # without replacement a sample touches a few more days
