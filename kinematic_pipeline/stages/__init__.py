"""Stages as plain functions (no dagster): what each asset body calls."""
