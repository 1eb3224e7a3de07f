"""Report stage: the pooled records, the verdict, the paper's tables, its figures, and one Markdown report, as files
and as asset metadata.

The stage module imports the report (matplotlib) inside its functions: loading the definitions stays light.
"""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.assets_baselines import baseline_inputs
from kinematic_pipeline.orchestration.assets_evaluate import evaluation_asset
from kinematic_pipeline.orchestration.assets_scaling import report_waits_for_scaling
from kinematic_pipeline.orchestration.metadata import dagster_metadata
from kinematic_pipeline.stages import report_summaries
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.variants import TRIVIAL_PROBE
from kinematic_pipeline.warehouse import BACKTESTS, LABELS, MARGIN_BACKTESTS, PREDICTIONS, RAW_OHLCV
from kinematic_pipeline.warehouse.layout import POOLED_ASSET, VERDICT_ASSET

REPORT_CODE_VERSION = CODE_VERSIONS["report"]


def across_variants(settings: Settings, *assets: str) -> list[dg.AssetDep]:
    """Every partition of each variant's evaluation ``assets``: what a report-group asset reads across variants."""
    every = dg.AllPartitionMapping()
    return [
        dg.AssetDep(evaluation_asset(v, a), partition_mapping=every)
        for v in settings.evaluated_variants
        for a in assets
    ]


def pooled_backtests_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=POOLED_ASSET,
        group_name="report",
        code_version=REPORT_CODE_VERSION,
        deps=across_variants(settings, BACKTESTS, MARGIN_BACKTESTS, PREDICTIONS),
        kinds={"parquet"},
        description="One pooled out-of-sample record per policy and decision rule (the paper's argmax of the model's "
        "own softmax, the calibrated argmax, the margin rule): every walk-forward fold's test days of a policy "
        "backtested as one record (one equity curve, one tax ledger, one bootstrap), each fold's margin-rule actions "
        "at the m chosen on its own validation days. $KP_WAREHOUSE/reports/pooled/, pinned to "
        "the predictions and margin backtests it was pooled from (read back only while they are unchanged).",
    )
    def pooled_backtests() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=dagster_metadata(report_summaries.pooled_backtests(settings).metadata()))

    return pooled_backtests


def verdict_asset(settings: Settings) -> dg.AssetsDefinition:
    trivial = [dg.AssetDep(baseline_inputs(TRIVIAL_PROBE))] if TRIVIAL_PROBE in settings.evaluate.baselines else []
    # a task whose verdict rows fit reference forecasters on the bars (the volatility task's HAR and GARCH)
    bars = [dg.AssetDep(RAW_OHLCV, partition_mapping=dg.AllPartitionMapping())] * any(
        t.evidence_reads_bars for t in settings.tasks
    )

    @dg.asset(
        name=VERDICT_ASSET,
        group_name="report",
        code_version=REPORT_CODE_VERSION,
        # the pooled records of both rules, the universe's predictions and the trivial features (the partial IC)
        deps=[dg.AssetDep(POOLED_ASSET), *across_variants(settings, PREDICTIONS), *trivial, *bars],
        kinds={"parquet"},
        description="The report's questions, each answered by exactly the statistic it names, with what the run "
        "could have detected: SPA and StepM against Buy & Hold, the deflated Sharpe above the average trial (the "
        "effective N as information), the (partial) rank IC on the universe, whether each argmax rule can tell "
        "tokenizations apart (the oracle beside it on synthetic runs), spline vs finite differences as three Holm "
        "families (more information, better calibrated, better timed); the run's other tasks' questions (next-week "
        "volatility: a learned forecaster against HAR and GARCH, spline tokens against the others, seeds as "
        "replicates). "
        "$KP_WAREHOUSE/reports/tables/verdict.parquet.",
    )
    def verdict() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=dagster_metadata(report_summaries.verdict(settings).metadata()))

    return verdict


def paper_tables_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name="paper_tables",
        group_name="report",
        code_version=REPORT_CODE_VERSION,
        # the metrics, the margin rule's, the predictions (skill, decisions), the labels (base rates, close-to-close
        # outcomes) and, on synthetic data, the bars the informed ceiling acts on
        deps=[
            dg.AssetDep(POOLED_ASSET),
            dg.AssetDep(VERDICT_ASSET),
            *across_variants(settings, BACKTESTS, MARGIN_BACKTESTS, PREDICTIONS),
            dg.AssetDep(LABELS, partition_mapping=dg.AllPartitionMapping()),
            dg.AssetDep(RAW_OHLCV, partition_mapping=dg.AllPartitionMapping()),
        ],
        kinds={"markdown", "parquet"},
        description="The paper's tables regenerated from every backtests partition, each under the paper's rule "
        "(argmax of the model's own softmax) and the calibrated argmax: absolute performance, risk-adjusted "
        "efficiency (with bootstrap CIs), the Liquidation Equilibrium, the tau sweep, cost sensitivity with turnover, "
        "calibration; the oracle through the rules (synthetic runs) and the evidence tables (skill, decisions, "
        "decision rules). "
        "Files under $KP_WAREHOUSE/reports/tables/.",
    )
    def paper_tables() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=dagster_metadata(report_summaries.paper_tables(settings).metadata()))

    return paper_tables


def figures_asset(settings: Settings) -> dg.AssetsDefinition:
    every = dg.AllPartitionMapping()

    @dg.asset(
        name="figures",
        group_name="report",
        code_version=REPORT_CODE_VERSION,
        deps=[
            dg.AssetDep(POOLED_ASSET),
            *across_variants(settings, BACKTESTS, MARGIN_BACKTESTS, PREDICTIONS),
            dg.AssetDep(SPLINE.tokens_asset, partition_mapping=every),  # the kinematic manifold, responsiveness
            dg.AssetDep(RAW_OHLCV, partition_mapping=every),
        ],
        kinds={"matplotlib"},
        description="The paper's figures: equity curves vs Buy & Hold, behavioural diagnostics (action "
        "distribution, confusion matrix, calibration), the tau and cost sweeps, the 9-panel kinematic manifold "
        "and the responsiveness figure. PNGs under $KP_WAREHOUSE/reports/figures/.",
    )
    def figures() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=dagster_metadata(report_summaries.figures(settings).metadata()))

    return figures


def report_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name="report",
        group_name="report",
        code_version=REPORT_CODE_VERSION,
        deps=[dg.AssetDep("paper_tables"), dg.AssetDep("figures"), *report_waits_for_scaling(settings)],
        kinds={"markdown"},
        description="One Markdown report: context, every table, every figure, and the backtest conventions. "
        "$KP_WAREHOUSE/reports/report.md; `python -m kinematic_pipeline report` prints its tables.",
    )
    def report(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        summary = report_summaries.report(settings, context.run_id)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return report


def build_report_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [
        pooled_backtests_asset(settings),
        verdict_asset(settings),
        paper_tables_asset(settings),
        figures_asset(settings),
        report_asset(settings),
    ]
