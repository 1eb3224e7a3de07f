"""The report's table and figure titles in one home: every table's name -> its title (``all_titles``), under 100
characters so the report reads at a glance, and its caption (``table_headings``); what captions would repeat (the
argmax rules and the Buy threshold the run's class weights imply, the portfolio Sharpe, the skill intervals' block)
is stated once in the report's Conventions (``convention_notes``) and referred to. No dagster here.
"""

from __future__ import annotations

from kinematic_pipeline.backtest.decisions import buy_threshold
from kinematic_pipeline.backtest.oracle import least_buying_drift
from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import run_class_weights
from kinematic_pipeline.stages.oracle_control import RULE_LABELS
from kinematic_pipeline.stages.task_evidence import task_titles

VERDICT_TITLE = "Verdict: each question answered by a test that survives multiple testing"

TABLE_TITLES = {
    "absolute_performance": "Absolute performance: total return and max drawdown (paper Table absolute_perf)",
    "risk_adjusted": "Risk-adjusted efficiency: Sharpe and Sortino with 95% CIs (paper Table risk_adjusted)",
    "liquidation_equilibrium": "Who never holds a position, under each rule (paper Table liquidation_equilibrium)",
    "tau_sweep": "Behaviour under the tau sensitivity sweep (paper Table sensitivity_sweep)",
    "cost_sensitivity": "Sensitivity to transaction costs, with annualized turnover (paper Table sensitivity)",
    "calibration": "Calibration of every policy: accuracy, Brier score and ECE (not in the paper)",
    "per_seed": "Every seed on its own: what the mean +- std cells summarize (not in the paper)",
    "paper_comparison": "This run next to the paper's published numbers (paper Tables absolute_perf and risk_adjusted)",
}

# Tables built from the predictions and the training labels as well (stages/evidence.py), not the metrics alone.
EVIDENCE_TITLES = {
    "signal": "The signal on the universe: rank IC of s = p(Buy) - p(Sell) (not in the paper)",
    "label_artefact": "What the trained-on label knows at decision time (not in the paper)",
    "information": "Do the tokens carry information? Skill of the calibrated probabilities (not in the paper)",
    "information_uncalibrated": "Appendix: the same skill before calibration (not in the paper)",
    "time_series_ic": "Time-series rank IC of the score against the next day's return, per ticker (not in the paper)",
    "decisions": "Why each policy trades or liquidates under the calibrated argmax (not in the paper)",
    "decision_rules": "The three decision rules side by side: paper, calibrated argmax, margin (not in the paper)",
    "data_seen": "Which dates each variant's fit, validation and normalization saw (not in the paper)",
}

# tables only some runs have: the per-fold table (walk-forward runs), the uncalibrated skill (runs whose
# predictions kept their raw probabilities), the scaling curves (once scaling_curves is materialized), the oracle
# through the rules (synthetic runs), learnability (runs whose adapters validated their prior at step 0), the budget
# test and learnability on test days (once benchmarks/bench_budget.py, bench_learnability.py have run on the warehouse)
OPTIONAL_TABLES = (
    "per_fold",
    "information_uncalibrated",
    "scaling_curves",
    "oracle_rules",
    "learnability",
    "budget_test",
    "learnability_test",
)

ALL_TITLES = {
    "verdict": VERDICT_TITLE,
    **TABLE_TITLES,
    "oracle_rules": "What each rule can do with perfect information: the synthetic oracle (not in the paper)",
    "per_fold": "Every walk-forward fold on its own, at the report's tau and cost (not in the paper)",
    **EVIDENCE_TITLES,
    # written by the scaling_curves asset (stages/scaling.py), not by paper_tables
    "scaling_curves": "Would more data help? Test skill and rank IC against the windows seen (not in the paper)",
    "training": "How far each transformer trained: step budget, steps run, best step (not in the paper)",
    "learnability": "Learnability at matched compute: validation skill by budget spent (not in the paper)",
    "budget_test": "Is the step budget the answer? Best validation loss at the budget and twice it (not in the paper)",
    "learnability_test": "Learnability at matched compute, on test days (not in the paper)",
}

# what a caption refers to instead of repeating it: each is stated once, in the report's Conventions
SEE_RULES = "The Rule column: the two argmax rules (Conventions: decision rules)."
SEE_FIGURES = "Under the calibrated argmax only (Conventions: figures)."
PORTFOLIO_SHARPE = "the portfolio Sharpe (Conventions)"

# what the paper's figures show: the calibrated argmax, not the paper's rule (the argmax of the network's own softmax;
# the paper's tables give both)
CALIBRATED_RULE = (
    "the argmax of the calibrated class-weighted probabilities, not the paper's rule, the argmax of the network's own "
    "softmax: the paper's tables give both"
)

# name -> the explanation printed under the table's title (``ALL_TITLES``)
TABLE_CAPTIONS = {
    "verdict": "SPA, StepM, MCS, deflated Sharpe and Holm, computed, not written by hand; the Answers at the top give "
    "each question's answer in a line.",
    "absolute_performance": "Cumulative total return and maximum drawdown over the test period for each model and Buy & "
    "Hold (Mkt). A policy in the Liquidation Equilibrium never holds a position: 0.0% return and drawdown.",
    "risk_adjusted": "Sharpe and Sortino ratios, with the Sharpe's 95% block-bootstrap interval; they are undefined "
    "(N/A) for a policy in the Liquidation Equilibrium, whose equity never moves.",
    "liquidation_equilibrium": "'The Liquidation Equilibrium of Discrete Tokens': action distribution, action rate "
    "and performance of each model under the paper's argmax and the calibrated argmax: a model that only ever sells "
    "stays in cash (100% action rate, 0% exposure, N/A Sharpe). Whether that is the tokens' or the rule's is for the "
    "oracle's table to say: where the rule does not trade the oracle either, no tokenization can make it trade.",
    "tau_sweep": "Action rate and Sharpe of each model as the volatility threshold tau varies, with the test period "
    "of each tau: a model that learns a policy acts less as tau grows; one in the Liquidation Equilibrium stays at "
    "100% (Sell).",
    "cost_sensitivity": "Sharpe ratio at each execution cost (bps per trade side) and the annualized turnover (at the "
    "lowest cost): how much of the edge survives friction.",
    "calibration": "Accuracy of each model's actions, and multi-class Brier score and top-label expected calibration "
    "error of its de-weighted Buy/Sell/Hold probabilities (Conventions), not of the class-weighted softmax q, on "
    "labelled test days.",
    "per_seed": f"Its Sharpe is {PORTFOLIO_SHARPE}, bounded, where the paper's tables above print N/A below the "
    "minimum days in the market.",
    "oracle_rules": "The synthetic source's oracle knows the law of every next close-to-close return; it goes through "
    f"the same rules and backtests at the report's tau and cost, {PORTFOLIO_SHARPE}. Synthetic runs only.",
    "per_fold": f"Each fold's {PORTFOLIO_SHARPE.removeprefix('the ')}, its days in the market (mean per ticker) and "
    "the total return averaged over tickers and seeds; the other tables pool the folds' test days into one record "
    "per policy.",
    "signal": "Daily cross-sectional rank IC of the score (weights undone) against the next day's return, ICIR, "
    "Newey-West t, share of positive days, Pearson IC and the direction AUC, for every model, rule and probe at the "
    "report's tau: mean over seeds ± std. The trailing-volatility reference (Conventions) has p(Buy) = p(Sell), a "
    "score of 0 and no IC.",
    "label_artefact": "Direction AUC and rank IC on the trained-on labels next to the close-to-close return the "
    "backtest trades.",
    "information": "The de-weighted probabilities (Conventions) on every scored ticker-day of the test period (the "
    "universe, see the signal table), on the trained-on labels and on close-to-close labels (what the backtest "
    "trades): mean over seeds [95% interval of the seed mean (Conventions: skill intervals)] ± std over seeds; beside "
    "them the trailing-volatility reference (Conventions) and each model's log-loss skill beyond it on the same "
    "ticker-days.",
    "information_uncalibrated": "The probabilities as the models and probes output them; every table above reads them "
    "calibrated (Conventions: de-weighted probabilities).",
    "time_series_ic": "Against the next day's close-to-close return, per backtested ticker.",
    "decisions": "The calibrated argmax (Conventions: decision rules) is the predictions' action; not the paper's "
    "rule.",
    "decision_rules": "The paper's rule and the calibrated argmax (Conventions: decision rules) and the margin rule "
    "(weights undone, m chosen on validation days), for models, rules and probes: each rule's "
    f"{PORTFOLIO_SHARPE.removeprefix('the ')} with its days in the market.",
    "scaling_curves": "SplineGPT and RawGPT-FD fine-tuned from their foundations on n training windows (one fold and "
    "seed, the report's tau), their tokens' logistic-regression probe fitted on n rows (lr_matched) and on every row "
    "(lr_all), and the trailing-volatility reference (trailing_vol20, Conventions) on the ticker-days every learner "
    "scored. Rank IC against r_close and log-loss skill on close-to-close labels on the universe's test days, "
    "calibrated, and each learner's log-loss skill beyond trailing_vol20 (logloss_skill_beyond_vol20: paired on "
    "exactly the ticker-days that learner scored, beyond_vol20_rows of them; ci_block_days: the block), with 95% "
    "intervals (Conventions: skill intervals).",
    "training": "Every foundation's and every adapter's step budget (rounded up to whole validation intervals), the "
    "steps it ran, its best step (the state kept: 0 is the initial state) and best validation loss (pretraining: the "
    "family's own objective; fine-tuning: the loss it stops on, the de-weighted log loss at the report's tau, QLIKE "
    "on the volatility task; Task: the adapter's, each the report reads); the learning rate's fraction left at the "
    "stop (0: annealed); "
    "'best at the last step' marks a model the budget stopped while it was still improving (whether twice the "
    "budget helps: benchmarks/bench_budget.py).",
    "learnability": "Each family fine-tuned under the same step budget, schedule and labels; its validation skill over "
    "the head's prior (1 - the best de-weighted validation log loss so far / the prior's, the step-0 state) after a "
    "quarter, a half and all of the budget, and the training windows it had seen by then, the mean over folds and "
    "seeds (pretraining losses are each family's own objective and not comparable).",
    "budget_test": "Each family's best validation loss at its budget and at twice it (the schedule stretched to the "
    "longer run, both annealed to 0) on one fold over seeds, measured by benchmarks/bench_budget.py at the commit "
    "shown; a family passes when twice the budget moves the seeds' mean by no more than their spread, either way; a "
    "foundation is also judged by its adapter (the same fine-tuning from the 1x and the 2x foundation). Adapters: the "
    "same fine-tuning from a random backbone, "
    "and how much lower the loss from the foundation is (does pretraining help?).",
    "learnability_test": "Each family fine-tuned once under the same step budget, schedule and labels on one fold, and "
    "every state it validated scored on the fold's test days over the universe (the test days chose nothing: the "
    "state kept is the best validation one); its validation skill over the prior beside the test rank IC and "
    "log-loss skill, and its tokens' logistic-regression probe on the same days, measured by "
    "benchmarks/bench_learnability.py at the commit shown.",
}

# a volatility task's table's name (after ``task_<key>_``) -> its caption
VOLATILITY_CAPTIONS = {
    "forecasters": "Every forecaster on the same test ticker-days: QLIKE with its block-bootstrap interval "
    "(qlike_low, qlike_high), MSE of the variance, R^2 of ln RV, rank IC with its t, the Diebold-Mariano t and p "
    "against HAR (dm_t, dm_p) and the model confidence set's p (mcs_p; in_mcs: in the set at 5%).",
    "references": "Each model's paired daily QLIKE minus HAR's and GARCH's, per seed, with a two-level interval "
    "(seeds, then day blocks); 'yes' only when at least 3 seeds agree in sign.",
    "tokenizations": "Spline tokens against finite differences and raw values on one backbone, QLIKE and rank IC, per "
    "seed with a two-level interval; 'yes' only when at least 3 seeds agree in sign.",
    "targeting": "Each forecast's weights w = min(1, sigma_train / sigma_hat) through the backtest (costs and taxes), "
    "against Buy & Hold on the same ticker-days: Sharpe, max drawdown, total return, mean weight and turnover, the "
    "mean over tickers.",
}


# figure name (its file's stem) -> (heading, the explanation printed under the figure)
FIGURE_HEADINGS = {
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
        f"{SEE_FIGURES} Left: equity curves of SplineGPT (thick) and the baselines (thin) per ticker. Right: Buy & "
        "Hold for the same assets.",
    ),
    "diagnostics": (
        "Behavioral Divergence and Calibration",
        f"{SEE_FIGURES} (A) Action distribution of each model; (B) SplineGPT confusion matrix, true label x action on "
        "labelled days; (C) reliability of the de-weighted Buy probability (Conventions) against the empirical Buy "
        "rate.",
    ),
    "sweeps": (
        "Parameter Sensitivity Analysis",
        f"{SEE_FIGURES} (A) Action rate against the volatility threshold tau; (B) Sharpe against the execution cost.",
    ),
    "decision_rules": (
        "The calibrated argmax next to the margin rule",
        "The calibrated argmax (Conventions: figures) and the margin rule (weights undone, m chosen on validation "
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
        f"{SEE_FIGURES} (A) Close with the model's Buy (green) and Sell (red) actions; (B) velocity c1 and (C) "
        "acceleration c2 of the price spline over the same days.",
    ),
    "volatility_forecasts": (
        "Volatility task: forecast against realized, focus ticker",
        "The realized log variance of the next h sessions (black) and the log-variance forecasts of HAR, GARCH and "
        "each model variant's first seed over the focus ticker's last test days (evaluate.figure_days; our addition "
        "to the paper).",
    ),
    "volatility_qlike": (
        "Volatility task: QLIKE by forecaster",
        "Each forecaster's QLIKE (lower is better) with its block-bootstrap interval, on the same ticker-days; a "
        "filled marker is in the model confidence set at 5% (our addition to the paper).",
    ),
    "volatility_targeting": (
        "Volatility task: volatility-targeting equity curves, focus ticker",
        "The focus ticker's equity under w = min(1, sigma_train / sigma_hat) with HAR's, GARCH's and each model "
        "variant's first seed's forecast, and Buy & Hold, through the backtest (costs and taxes; our addition to "
        "the paper).",
    ),
}


# the paper's tables, each built under the paper's rule and the calibrated argmax (a Rule column first)
RULE_TABLES = (
    "absolute_performance",
    "risk_adjusted",
    "liquidation_equilibrium",
    "tau_sweep",
    "cost_sensitivity",
    "calibration",
    "per_seed",
)


def rule_caption(settings: Settings) -> str:
    """What the Rule column of the paper's tables means, with the Buy threshold the run's class weights imply."""
    w, tau = run_class_weights(settings), settings.evaluate.report_tau
    drifts = ", ".join(f"{least_buying_drift(tau, sd, w):.2f} sd at sd {100 * sd:g}%" for sd in (0.01, 0.02, 0.03))
    return (
        f"Rule '{RULE_LABELS['paper']}' is the paper's (its top class, never calibrated); rule "
        f"'{RULE_LABELS['calibrated']}' takes the argmax of the same softmax after calibration on validation days. "
        f"With w = {tuple(w)} either argmax buys only where {buy_threshold(w)} in the probabilities p the softmax "
        f"q ∝ w ⊙ p stands for; for an exactly calibrated normal forecast at tau = {tau:g} that is a one-day "
        f"expected return of at least {drifts}."
    )


def convention_notes(settings: Settings) -> dict[str, str]:
    """The conventions the captions refer to, each stated once in the report's Conventions: name -> its text, with
    the run's Buy threshold (``rule_caption``) and skill intervals' block (``evaluate.skill_bootstrap_block_days``)."""
    block = settings.evaluate.skill_bootstrap_block_days
    return {
        "decision rules": f"{rule_caption(settings)} The paper's tables give both rules, in a Rule column.",
        "figures": "The paper's figures show the calibrated argmax only: the argmax of the calibrated class-weighted "
        "probabilities, not the paper's rule, the argmax of the network's own softmax.",
        "de-weighted probabilities": "p = (q/w)/Σ(q/w), the class weights w undone from the class-weighted softmax q "
        "(miscalibrated by construction); the tables read them calibrated: a temperature and class biases fitted by "
        "log loss on each fold's validation days, never on a test day.",
        "portfolio Sharpe": "the Sharpe of the equal-weight portfolio of the test tickers, cash credited with the "
        "risk-free rate, seeds averaged.",
        "trailing-volatility reference": "trailing_vol20: p of each class from N(0, vol20²) at tau, vol20 the std of "
        "the 20 daily returns up to the day, nothing fitted.",
        "skill intervals": f"95% intervals of the seed mean from a bootstrap of {block}-trading-day blocks of test "
        "days (at most a quarter of the days), every ticker of a day together.",
    }


def all_titles(settings: Settings) -> dict[str, str]:
    """``ALL_TITLES`` and then the tables of the run's other tasks (``stages.task_evidence.task_titles``)."""
    return {**ALL_TITLES, **task_titles(settings)}


def optional_tables(settings: Settings) -> tuple[str, ...]:
    """``OPTIONAL_TABLES`` and the tables of the run's other tasks (written once their predictions are)."""
    return (*OPTIONAL_TABLES, *task_titles(settings))


def _volatility_captions(settings: Settings) -> dict[str, str]:
    """The volatility tasks' tables -> their captions: the reported horizon's ``VOLATILITY_CAPTIONS``, each swept
    horizon's a pointer to the reported one's table of the same kind (said once, not once per horizon)."""
    tasks = [t for t in settings.tasks if t.kind == "vol"]
    shown = next((t for t in tasks if t.reported(settings)), None)
    out = {}
    for task in tasks:
        for name, caption in VOLATILITY_CAPTIONS.items():
            if task is not shown and shown is not None:
                caption = f"As the next-{shown.horizon}-session {name} table's caption says, at h = {task.horizon}."
            out[f"task_{task.key}_{name}"] = caption
    return out


def table_headings(settings: Settings) -> dict[str, tuple[str, str]]:
    """Every table's name -> (its title, ``all_titles``; its caption): ``TABLE_CAPTIONS``' (a paper table's with the
    Rule column's pointer ``SEE_RULES``) or a volatility task's table's (``_volatility_captions``), "" for none. What
    the report prints above each table."""
    captions = {**_volatility_captions(settings), **TABLE_CAPTIONS}
    captions |= {name: f"{TABLE_CAPTIONS[name]} {SEE_RULES}" for name in RULE_TABLES}
    return {name: (title, captions.get(name, "")) for name, title in all_titles(settings).items()}
