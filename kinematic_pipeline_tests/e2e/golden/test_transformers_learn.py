"""The transformers learn what the ci universe holds (issue 28's acceptance, on a whole ci materialization).

The ci profile's synthetic universe has persistent latent trends: a logistic regression on the last five tokens
reaches a daily rank IC of about +0.39 against the next day's close-to-close return. A transformer trained to its
best validation loss must reach at least half of the logistic-regression probe's IC on its own tokens, with a
Newey-West t of at least 2 (before issue 28 they scored -0.11 to +0.01: an untrained head).

    KP_GOLDEN_WAREHOUSE=warehouse/ci pytest -m e2e kinematic_pipeline_tests/e2e/golden/test_transformers_learn.py -s
"""

from __future__ import annotations

import polars as pl
import pytest

from kinematic_pipeline.stages.evidence import outcome_returns, signal_statistics, universe_predictions
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline_tests.conftest import golden_ci_settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def settings():
    return golden_ci_settings()


def test_every_transformer_reaches_half_the_probe_ic_on_its_own_tokens(settings):
    models = settings.train.variants
    probes = {v: f"lr_{lookup_variant(v).tokenization.name}" for v in models}
    universe = universe_predictions(settings, (*models, *sorted(set(probes.values()))))
    stats = signal_statistics(settings, universe)
    close = next(
        name for name, column in outcome_returns(settings.tokenize.label_source).items() if column == "r_close"
    )
    by_variant = (
        stats.filter(pl.col("outcome") == close)
        .group_by("variant")
        .agg(pl.col("rank_ic").mean(), pl.col("rank_ic_t_nw").mean(), pl.len().alias("seeds"))
    )
    ic = {row["variant"]: row for row in by_variant.iter_rows(named=True)}
    lines, failures = [], []
    for model in models:
        mine, probe = ic[model], ic[probes[model]]
        lines.append(
            f"{model:<10} rank IC {mine['rank_ic']:+.3f} (NW t {mine['rank_ic_t_nw']:+.1f}, {mine['seeds']} seeds)"
            f"   {probes[model]:<9} {probe['rank_ic']:+.3f} (t {probe['rank_ic_t_nw']:+.1f})"
        )
        if not (mine["rank_ic"] >= 0.5 * probe["rank_ic"] and mine["rank_ic_t_nw"] >= 2.0):
            failures.append(model)
    print("\n".join(lines))
    assert not failures, "\n".join(lines)
