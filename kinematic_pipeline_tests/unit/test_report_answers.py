"""The report's first screen (``report.answers``): one line per verdict question, with its answer's first clause, the
number behind it and the seeds' agreement where the row states one, on a hand-made verdict."""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.report.answers import answer_lines, drop_long_asides, first_clause, seeds_agreement
from kinematic_pipeline.report.document import render_report

SPA = "Does any strategy beat Buy & Hold after costs (10 bps a side) and taxes (strategies pay on realised gains)?"
TIMED = "Do spline tokens make better-timed strategies than finite differences?"
VOL = "Do spline tokens beat finite differences on next-5-session variance (QLIKE)?"


def _row(question, test, statistic, answer, interval="-") -> dict:
    return {
        "Question": question,
        "Test": test,
        "Statistic": statistic,
        "Interval or p-value": interval,
        "Trials": "-",
        "Answer": answer,
        "Detectable at 80% power": "-",
    }


def _verdict() -> pl.DataFrame:
    return pl.DataFrame(
        [
            _row(
                SPA,
                "Hansen SPA vs Buy & Hold",
                "best lr_raw [margin]: Sharpe 8.51 vs Buy & Hold -2.81 (annualized, daily net excess returns, cash "
                "credited with the risk-free rate); 35 strategies",
                "yes: SPA rejects 'none beats Buy & Hold' (consistent p = <0.001); StepM names lr_raw, lr_fd",
            ),
            _row(
                TIMED,
                "SplineGPT - RawGPT (spline vs raw values), paper rule: stationary bootstrap",
                "+1.91 (annualized); seeds as replicates: +0.0012, -0.0003, +0.0040 (2 of 3 agree), two-level [..]",
                "no evidence at the 5% level (Holm p 0.667)",
            ),
            _row(
                TIMED,
                "LightGBM (Spline) - LightGBM (FD) (spline vs finite differences), calibrated rule: bootstrap",
                "+3.78 (annualized); days in the market: 75, 18 of 250",
                "yes: LightGBM (Spline) is better timed at 5% (Holm p <0.001)",
            ),
            _row(VOL, "paired daily QLIKE", "difference -0.0120, seeds agreeing in sign 67%", "no evidence: 1 seed"),
        ]
    )


def test_one_line_per_question_with_its_first_clause_and_the_number_behind_it():
    lines = answer_lines(_verdict())
    assert len(lines) == 3  # the two timing rows are one family: one line
    spa, timed, vol = lines
    assert spa.startswith("- **Does any strategy beat Buy & Hold after costs (10 bps a side) and taxes?**")
    assert "yes: SPA rejects 'none beats Buy & Hold' (consistent p = <0.001) — " in spa
    assert spa.endswith("best lr_raw [margin]: Sharpe 8.51 vs Buy & Hold -2.81")  # no StepM list, no aside
    assert "seeds" not in spa  # the row states no seeds' agreement
    assert "yes in 1 of 2 tests: LightGBM (Spline) is better timed at 5% (Holm p <0.001)" in timed
    assert timed.endswith("LightGBM (Spline) - LightGBM (FD), calibrated rule: +3.78 (annualized)")
    assert "(seeds:" not in timed  # the lead (the yes) row states none; the other row's agreement is not its
    assert vol.endswith("no evidence: 1 seed — difference -0.0120, seeds agreeing in sign 67%")  # said once
    assert all(len(line) < 250 for line in lines)


def test_the_seeds_agreement_is_shown_where_the_row_states_it():
    no_yes = _verdict().filter(pl.col("Answer").str.starts_with("no evidence at"))
    (line,) = answer_lines(no_yes)
    assert "no: none of its 1 tests says yes" not in line  # a single row is answered by itself
    assert line.endswith("— +1.91 (annualized) (seeds: 2 of 3 agree)")
    assert seeds_agreement(_verdict().row(3, named=True)) == "agree in sign 67%"
    assert seeds_agreement(_verdict().row(0, named=True)) is None


def test_a_family_without_a_yes_says_so_and_names_its_first_test():
    rows = _verdict().filter(pl.col("Question") == TIMED)
    family = pl.concat([rows.head(1), rows.head(1).with_columns(pl.lit("SplineGPT - RawGPT-FD: x").alias("Test"))])
    (line,) = answer_lines(family)
    assert (
        "no: none of its 2 tests says yes — first, SplineGPT - RawGPT (spline vs raw values), paper rule: +1.91" in line
    )
    assert line.endswith("(seeds: 2 of 3 agree)")


def test_a_table_without_the_verdicts_columns_gives_no_first_screen():
    assert answer_lines(pl.DataFrame({"x": [1]})) == []


def test_clauses_are_cut_outside_brackets_and_only_long_asides_dropped():
    assert first_clause("a (b; c) d; e") == "a (b; c) d"
    assert first_clause("no clause") == "no clause"
    assert drop_long_asides("x (short) y (a parenthetical far longer than the limit), z") == "x (short) y, z"


def test_the_answers_open_the_report_before_the_context_and_the_verdict_stays():
    verdict = _verdict()
    text = render_report(
        "R", {"profile": "ci"}, {"verdict": verdict}, {}, "conv", lead=("verdict",), answers=answer_lines(verdict)
    )
    head = text.splitlines()[:25]
    assert head[2] == "## Answers" and sum(line.startswith("- **Do") for line in head) == 3
    assert text.index("## Answers") < text.index("- **profile**: ci") < text.index("## Verdict")
    assert "| Question | Test |" in text  # the full verdict below
    assert "## Answers" not in render_report("R", {"profile": "ci"}, {"verdict": verdict}, {}, "conv")
