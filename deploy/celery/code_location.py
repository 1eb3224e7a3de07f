"""The code location for Celery: the package's definitions, each step a Celery task on a worker.

Ran here (docs/deploy.md, kinematic_pipeline_tests/e2e/test_cluster.py): Redis as
broker and result backend and the Postgres instance of deploy/postgres/dagster.yaml, both from
`scripts/servers.sh start`, two workers on one host:

    eval "$(scripts/servers.sh url)"; export DAGSTER_HOME=<a folder holding deploy/postgres/dagster.yaml>
    dagster-celery worker start -A dagster_celery.app -y deploy/celery/run_config.yaml -n w1 -- --concurrency=1
    dagster asset materialize -f deploy/celery/code_location.py -c deploy/celery/run_config.yaml \\
        --select raw_ohlcv,spline_tokens,fd_tokens,raw_tokens --partition-range 2021-01-04...2021-06-25

Deployment configuration, not package code: it wraps ``kinematic_pipeline.defs`` with dagster-celery's
``celery_executor`` (dagster-celery==0.29.27, the ``cluster`` extra) behind a check that the broker
answers (``kinematic_pipeline.orchestration.cluster``). Workers must share the Dagster instance (Postgres)
and the warehouse path (and DAGSTER_HOME's storage/ folder, where the fs_io_manager writes).
"""

import dagster as dg

import kinematic_pipeline
from kinematic_pipeline.orchestration.cluster import celery_executor

defs = dg.Definitions.merge(kinematic_pipeline.defs, dg.Definitions(executor=celery_executor))
