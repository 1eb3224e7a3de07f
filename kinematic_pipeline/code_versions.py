"""The code versions: each stage's, declared by its Dagster assets (``code_version=``) and recorded in every
provenance (``lineage.provenance_frame``), with the package's version and its git commit. A leaf: the assets
read a version without importing the lineage.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from kinematic_pipeline import __version__

CODE_VERSIONS = {  # each stage's code version: a new one marks its assets (and everything after) stale
    "ingest": "ingest-1",
    "tokenize": "tokenize-1",
    "window_store": "window-store-2",  # 2: per-block sha256 of tokens.npy in the manifest (issue 40)
    # 3: a foundation records and is checked against its own backbone's config alone (issue 52); 4: a capped validation
    # sample is the fold's, the same windows for every seed (issue 54)
    "models": "models-4",
    # 2: the token and raw days each features file was built from, checked on read; 3: its sha256 beside it (issue 55)
    "features": "features-3",
    # 2: saved as data (coefficients, LightGBM's text model), not a pickle (issue 30); 3: a task's regression probes
    # (the volatility task's: Gamma GLM by Newton-Cholesky, LightGBM's gamma objective; issue 53)
    "probes": "probes-3",
    # 4: the predictions store the de-weighted calibrated p (float64), not the class-weighted q (issue 52)
    "evaluate": "evaluate-4",
    # 4: the training table (each model's budget, steps run, best step; issue 39); 5: the answers' first screen, short
    # titles, the volatility task's verdict rows and figures, the timing rows' HAC test (issue 53); 6: a planted run's
    # oracle row, a pair with no scored day as a row, a probe's row said as one fit; 7: the verdict writes the tasks'
    # tables it computes and paper_tables reads them (computed once), a seed with no scored day answers as a reason
    "report": "report-7",
    "scaling": "scaling-2",  # n distinct windows under one step cap, and a 2x-steps row
}


@functools.lru_cache(maxsize=1)
def code_revision() -> str:
    """The git commit of the package's checkout (plus "+dirty" for local changes), or "unknown"."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def code_versions(run_id: str) -> dict[str, str]:
    """The code rows of a provenance: the package, its git commit, each stage's version and the Dagster run."""
    return {"kinematic_pipeline": __version__, "git": code_revision(), **CODE_VERSIONS, "dagster_run_id": run_id}
