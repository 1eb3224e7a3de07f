"""The code location for Celery: the package's definitions, each step a Celery task.

    dagster dev -f deploy/celery/code_location.py                     (or a workspace.yaml entry)
    dagster-celery worker start -A dagster_celery.app -y deploy/celery/run_config.yaml   (each worker host)

Deployment configuration, not package code: it wraps ``kinematic_pipeline.defs`` with dagster-celery's
``celery_executor`` (dagster-celery==0.29.27; a broker such as RabbitMQ or Redis). Workers must share
the Dagster instance (Postgres, deploy/k8s/dagster.yaml's storage sections) and the warehouse path.
"""

import dagster as dg
from dagster_celery import celery_executor

import kinematic_pipeline

defs = dg.Definitions.merge(kinematic_pipeline.defs, dg.Definitions(executor=celery_executor))
