"""The code location for Kubernetes: the package's definitions, each step in its own pod.

    dagster api grpc -f deploy/k8s/code_location.py -a defs ...      (the Helm chart's user deployment)

Deployment configuration, not package code: it wraps ``kinematic_pipeline.defs`` with dagster-k8s's
``k8s_job_executor`` (dagster-k8s==0.29.27). Run config for it: deploy/k8s/run_config.yaml. Without this
file (plain ``-m kinematic_pipeline``) runs still get one pod each from the K8sRunLauncher and execute
their steps in subprocesses of that pod.
"""

import dagster as dg
from dagster_k8s import k8s_job_executor

import kinematic_pipeline

defs = dg.Definitions.merge(kinematic_pipeline.defs, dg.Definitions(executor=k8s_job_executor))
