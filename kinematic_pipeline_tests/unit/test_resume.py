"""What a resumed ``materialize`` skips: a unit (a run's assets at its partition) only when every asset of it was
materialized there, a side-by-side chain's finished folds only, and the rest in the plan's order."""

from __future__ import annotations

from kinematic_pipeline.orchestration.partitions import PARTITION_TAG, range_tags
from kinematic_pipeline.orchestration.resume import Resume, unit
from kinematic_pipeline.orchestration.side_by_side import Chain


def test_a_unit_is_finished_only_when_every_asset_of_it_was_materialized_at_its_partition():
    point = Resume(
        "1", frozenset({("a", "2019@1"), ("b", "2019@1"), ("a", "2020@1"), ("raw", "2021-01-04..2021-12-31")})
    )
    assert point.finished(["a", "b"], {PARTITION_TAG: "2019@1"})
    assert not point.finished(["a", "b"], {PARTITION_TAG: "2020@1"})  # b not made at 2020: the run failed before it
    assert not point.finished(["a"], {PARTITION_TAG: "2021@1"})
    assert point.finished(["raw"], range_tags("2021-01-04", "2021-12-31"))
    assert not point.finished(["raw"], range_tags("2021-01-04", "2022-12-30"))  # another range: not the same run
    assert not point.finished(["c"], {})
    assert unit(["b", "a"], {}) == (frozenset({"a", "b"}), "")


def test_a_resume_drops_finished_runs_and_the_finished_folds_of_a_chain_keeping_the_order(capsys):
    done = {("m_foundation", p) for p in ("2019@1", "2020@1", "2019@2")} | {("n_foundation", "2019@1")}
    point = Resume("1", frozenset(done))
    chains = [
        Chain("m", ("m_foundation",), ("2019@1", "2020@1", "2021@1")),
        Chain("m", ("m_foundation",), ("2019@2",)),
        Chain("n", ("n_foundation",), ("2019@1", "2020@1")),
    ]
    runs, left = point.left(["m_foundation", "n_foundation"], [{PARTITION_TAG: "x"}], chains)
    assert left == [Chain("m", ("m_foundation",), ("2021@1",)), Chain("n", ("n_foundation",), ("2020@1",))]
    assert runs  # the group still runs (through its chains)
    assert "resumed: 4 of 6 runs finished before, skipped" in capsys.readouterr().out

    runs, left = point.left(["m_foundation"], [{PARTITION_TAG: "2019@1"}, {PARTITION_TAG: "2021@1"}], None)
    assert (runs, left) == ([{PARTITION_TAG: "2021@1"}], None)

    everything = Resume("1", frozenset(done | {("m_foundation", "2021@1"), ("n_foundation", "2020@1")}))
    assert everything.left(["m_foundation", "n_foundation"], [{PARTITION_TAG: "x"}], chains) == ([], [])
