"""One Markdown report: the run's context, the tables and figures with caption-like explanations, and
the backtest conventions (always included, so every number can be read against its definition)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import polars as pl

from kinematic_pipeline.report.markdown import markdown_table

# what the paper's figures show: the calibrated argmax, not the paper's rule (the argmax of the network's own softmax;
# the paper's tables give both)
CALIBRATED_RULE = (
    "the argmax of the calibrated class-weighted probabilities, not the paper's rule, the argmax of the network's own "
    "softmax: the paper's tables give both"
)

# key (the name of the function that builds it) -> (heading, one-line explanation after the paper's caption)
TABLE_CAPTIONS = {
    "absolute_performance": (
        "Absolute Performance Metrics",
        "Cumulative total return and maximum drawdown over the test period for each model and Buy & Hold "
        "(Mkt). A policy in the Liquidation Equilibrium never holds a position: 0.0% return and drawdown.",
    ),
    "risk_adjusted": (
        "Risk-Adjusted Efficiency",
        "Sharpe and Sortino ratios, with the Sharpe's 95% block-bootstrap interval; they are undefined (N/A) "
        "for a policy in the Liquidation Equilibrium, whose equity never moves.",
    ),
    "liquidation_equilibrium": (
        "The Liquidation Equilibrium: who never holds a position, under each rule",
        "Action distribution, action rate and performance of each model under the paper's argmax and the calibrated "
        "argmax: a model that only ever sells stays in cash (100% action rate, 0% exposure, N/A Sharpe). Whether that "
        "is the tokens' or the rule's is for the oracle's table to say: where the rule does not trade the oracle "
        "either, no tokenization can make it trade.",
    ),
    "tau_sweep": (
        "Behavioral Divergence Under Sensitivity Sweep",
        "Action rate and Sharpe of each model as the volatility threshold tau varies: a model that learns "
        "a policy acts less as tau grows; one in the Liquidation Equilibrium stays at 100% (Sell).",
    ),
    "cost_sensitivity": (
        "Sensitivity to Transaction Costs",
        "Sharpe ratio at each execution cost (bps per trade side) and the annualized turnover (at the "
        "lowest cost): how much of the edge survives friction.",
    ),
    "calibration_summary": (
        "Calibration of the Action Probabilities",
        "Accuracy of each model's actions, and multi-class Brier score and top-label expected calibration error "
        "of its de-weighted Buy/Sell/Hold probabilities p = (q/w)/Σ(q/w) (the class-weighted softmax q is "
        "miscalibrated by construction), on labelled test days (our addition to the paper).",
    ),
}
FIGURE_CAPTIONS = {
    "training_curves": (
        "How each model trained",
        "Validation loss against optimizer steps of every foundation (A: its own self-supervised objective) and "
        "every adapter at the report's tau (B: the log loss of its de-weighted probabilities, which the run "
        "stops on); one line per fold and seed, a dot at the step whose state was saved (training runs to the "
        "best validation loss within its step budget; our addition to the paper).",
    ),
    "scaling_curves": (
        "Would more data help?",
        "Test-period rank IC (A) and log-loss skill (B) on the universe against the training windows a fine-tuning "
        "saw (log scale), one fold and seed at the report's tau: each transformer (solid), its tokens' "
        "logistic-regression probe fitted on as many rows (dashed) and on every training row (dotted line); a curve "
        "still rising at its right end says more data or compute would help (our addition to the paper).",
    ),
    "learnability_test": (
        "Learnability at matched compute, on test days",
        "Each family's one fine-tuning under the shared budget and schedule, at every state it validated: (A) its "
        "validation skill over the prior, (B) the test-period rank IC and (C) the log-loss skill that state scores "
        "on the universe; a large dot marks the state kept (the best validation loss: the test days chose nothing), "
        "a dashed line its tokens' logistic-regression probe on the same days (benchmarks/bench_learnability.py; our "
        "addition to the paper).",
    ),
    "equity_curves": (
        "Cross-Sector Performance Validation",
        f"Under the calibrated argmax only ({CALIBRATED_RULE}). Left: equity curves of SplineGPT (thick) and the "
        "baselines (thin) per ticker. Right: Buy & Hold for the same assets.",
    ),
    "diagnostics": (
        "Behavioral Divergence and Calibration",
        f"Under the calibrated argmax only ({CALIBRATED_RULE}). (A) Action distribution of each model; (B) "
        "SplineGPT confusion matrix, true label x action on "
        "labelled days; (C) reliability of the de-weighted Buy probability p = (q/w)/Σ(q/w) against the "
        "empirical Buy rate.",
    ),
    "sweeps": (
        "Parameter Sensitivity Analysis",
        f"Under the calibrated argmax only ({CALIBRATED_RULE}). (A) Action rate against the volatility threshold "
        "tau; (B) Sharpe against the execution cost.",
    ),
    "decision_rules": (
        "The calibrated argmax next to the margin rule",
        f"The calibrated argmax ({CALIBRATED_RULE}) and the margin rule (weights undone, m chosen on validation "
        "days): (A) mean Sharpe over tickers and seeds, (B) mean action rate of each model, rule and probe (our "
        "addition to the paper; the paper's rule is in the decision rules table).",
    ),
    "kinematic_manifold": (
        "The 9-Dimensional Kinematic Manifold vs. Ground Truth",
        "Top: OHLC candles and volume. Below: the spline state at the end of each day's causal window, "
        "price c0-c3 (position, velocity, acceleration, jerk) and the quartic log-volume profile v0-v4.",
    ),
    "responsiveness": (
        "Kinematic Responsiveness",
        f"Under the calibrated argmax only ({CALIBRATED_RULE}). (A) Close with the model's Buy (green) and Sell "
        "(red) actions; (B) velocity c1 and (C) "
        "acceleration c2 of the price spline over the same days.",
    ),
}


def _describe(key: str, captions: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """Heading and explanation of ``key``; a key that extends a known one ("tau_sweep_NVDA") shares its
    caption and shows the rest in the heading; an unknown key is its own heading."""
    base = max((k for k in captions if key == k or key.startswith(k)), key=len, default=None)
    if base is None:
        return key, ""
    heading, caption = captions[base]
    suffix = key[len(base) :].strip("_:/- ")
    return (f"{heading} ({suffix})" if suffix else heading), caption


def _link(path: Path, relative_to: Path | None) -> str:
    target = Path(os.path.relpath(path, relative_to)) if relative_to is not None else Path(path)
    return quote(target.as_posix())


def render_report(
    title: str,
    context: dict[str, str],
    tables: dict[str, pl.DataFrame],
    figures: dict[str, Path],
    conventions: str,
    relative_to: Path | None = None,
    lead: tuple[str, ...] = (),
) -> str:
    """The Markdown report. ``context`` is shown as a list (profile, test period, tickers, tau, cost, run
    id...); tables and figures keep their order, each under a heading with its explanation; figure links
    are relative to ``relative_to``, the folder the report is written to (None: paths as given);
    ``conventions`` (``backtest.metrics.CONVENTIONS``) closes the document; the ``lead`` tables (the verdict)
    come first, under "Verdict", before the other tables."""
    lines = [f"# {title}", ""]
    lines += [f"- **{name}**: {value}" for name, value in context.items()]
    for key in (k for k in lead if k in tables):
        lines += ["", "## Verdict", "", f"_{key}_", "", markdown_table(tables[key])]
    tables = {k: v for k, v in tables.items() if k not in lead}
    if tables:
        lines += ["", "## Tables"]
    for key, frame in tables.items():
        heading, caption = _describe(key, TABLE_CAPTIONS)
        lines += ["", f"### {heading}", ""] + ([caption, ""] if caption else []) + [markdown_table(frame)]
    if figures:
        lines += ["", "## Figures"]
    for key, path in figures.items():
        heading, caption = _describe(key, FIGURE_CAPTIONS)
        lines += ["", f"### {heading}", "", f"![{heading}]({_link(path, relative_to)})"]
        lines += ["", caption] if caption else []
    lines += ["", "## Conventions", "", conventions, ""]
    return "\n".join(lines)
