"""What several test modules share, importable by name (the fixtures stay in ``conftest.py``)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
