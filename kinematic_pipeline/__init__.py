"""kinematic_pipeline: Kinematic Tokenization (SplineGPT) as a staged Dagster asset pipeline.

The package root imports nothing heavy: pure modules (``config``, ``sources``, ``ingest``,
``tokenize``, ...) never import dagster. ``defs`` (the Dagster ``Definitions``) is resolved lazily
so that ``dagster ... -m kinematic_pipeline`` finds it while ``import kinematic_pipeline.tokenize``
stays free of Dagster.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "defs":
        from kinematic_pipeline.definitions import defs

        return defs
    raise AttributeError(f"module 'kinematic_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "defs"])
