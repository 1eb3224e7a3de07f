"""What several test modules share, importable by name (the fixtures stay in ``conftest.py``)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository


def benchmark(name: str):
    """The script ``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
