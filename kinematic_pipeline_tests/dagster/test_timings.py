"""``python -m kinematic_pipeline timings``: each step's wall time of a finished run, read back from the Dagster
event log, and the shares of data preparation, training, evaluation and bookkeeping summing to 100%."""

from __future__ import annotations

import re
import time

import dagster as dg
import pytest

from kinematic_pipeline.cli import main
from kinematic_pipeline.orchestration.runs import owner_tags
from kinematic_pipeline.orchestration.timings import (
    BOOKKEEPING,
    DATA,
    EVALUATION,
    TRAINING,
    StepTime,
    category,
    category_seconds,
    percentages,
)


@pytest.mark.parametrize(
    "step, expected",
    [
        ("raw_ohlcv", DATA),
        ("tokenize_windows", DATA),
        ("labels", DATA),
        ("window_stores", DATA),
        ("corpus_stats", DATA),
        ("spline_features", DATA),
        ("splinegpt_foundation", TRAINING),
        ("rawgpt_fd_adapter", TRAINING),
        ("lightgbm_spline_probe", TRAINING),
        ("scaling_curves", TRAINING),
        ("patchtst_predictions", EVALUATION),
        ("momentum_1d_backtesting", EVALUATION),
        ("pooled_backtests", EVALUATION),
        ("verdict", EVALUATION),
        ("report", BOOKKEEPING),
        ("paper_tables", BOOKKEEPING),
        ("something_new", BOOKKEEPING),
    ],
)
def test_every_step_of_the_dag_has_its_category(step, expected):
    assert category(step) == expected


def test_concurrent_steps_split_their_time_and_gaps_are_bookkeeping():
    steps = [
        StepTime("r", None, "raw_ohlcv", 0.0, 4.0, "SUCCESS"),
        StepTime("r", None, "splinegpt_foundation", 2.0, 6.0, "SUCCESS"),  # overlaps the ingest for 2 s
        StepTime("r", None, "verdict", 8.0, 9.0, "SUCCESS"),
    ]
    seconds = category_seconds(steps, 0.0, 10.0)
    assert seconds == {DATA: 3.0, TRAINING: 3.0, EVALUATION: 1.0, BOOKKEEPING: 3.0}
    assert percentages({"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 33.4, "b": 33.3, "c": 33.3}  # printed: 100.0%


def _assets():
    def asset(name: str, seconds: float):
        @dg.asset(name=name)
        def _body() -> None:
            time.sleep(seconds)

        return _body

    return [
        asset("raw_ohlcv", 0.3),
        asset("splinegpt_foundation", 0.6),
        asset("splinegpt_predictions", 0.2),
        asset("report", 0.1),
    ]


def _table(text: str) -> tuple[list[tuple[str, float, str]], dict[str, float]]:
    steps = [
        (m[1], float(m[2]), m[3])
        for m in re.finditer(
            r"^(\w+)\s+-\s+([\d.]+)\s+(data preparation|training|evaluation|bookkeeping)\s+SUCCESS$", text, re.M
        )
    ]
    shares = {
        m[1]: float(m[3])
        for m in re.finditer(
            r"^(data preparation|training|evaluation|bookkeeping|total)\s+([\d.]+)\s+([\d.]+)%$", text, re.M
        )
    }
    return steps, shares


def test_the_cli_prints_each_step_by_time_and_shares_summing_to_100(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("")
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(_assets(), instance=instance, tags=owner_tags())
        assert result.success
        again = dg.materialize(_assets()[:1], instance=instance, tags=owner_tags())  # a second run of one command

    assert main(["timings"]) == 0  # the latest run: the second one
    steps, shares = _table(capsys.readouterr().out)
    assert [s[0] for s in steps] == ["raw_ohlcv"] and shares["data preparation"] > 0  # not a share: the run's own
    assert shares["training"] == shares["evaluation"] == 0  # overhead (bookkeeping) grows on a loaded machine

    assert main(["timings", "--run-id", result.run_id]) == 0
    out = capsys.readouterr().out
    steps, shares = _table(out)
    assert out.startswith(f"run {result.run_id}: SUCCESS")
    # each step once, in its category, longest first; no order of the steps' times is asserted (a busy machine adds
    # its own delays to a step's sleep), only that each took at least its sleep
    by_name = {name: (seconds, cat) for name, seconds, cat in steps}
    assert len(steps) == len(by_name) == 4
    assert {name: cat for name, (_, cat) in by_name.items()} == {
        "splinegpt_foundation": TRAINING,
        "raw_ohlcv": DATA,
        "splinegpt_predictions": EVALUATION,
        "report": BOOKKEEPING,
    }
    assert [s[1] for s in steps] == sorted((s[1] for s in steps), reverse=True)
    assert by_name["splinegpt_foundation"][0] >= 0.6 and by_name["raw_ohlcv"][0] >= 0.3
    assert sum(v for k, v in shares.items() if k != "total") == pytest.approx(100.0) and shares["total"] == 100.0
    assert min(shares[c] for c in (TRAINING, DATA, EVALUATION, BOOKKEEPING)) > 0

    assert main(["timings", "--run-id", again.run_id, "--invocation"]) == 0
    out = capsys.readouterr().out
    steps, shares = _table(out)
    assert out.startswith("run 2 runs") and len(steps) == 5 and shares["total"] == 100.0

    assert main(["timings", "--run-id", "no-such-run"]) == 1
    assert "no run no-such-run" in capsys.readouterr().err
