"""Dagster glue: one file per concept (partitions, resources, assets by stage, jobs). Thin by design:
asset bodies call one function of the pure library and turn its result into metadata."""
