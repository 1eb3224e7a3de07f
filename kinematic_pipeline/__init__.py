"""kinematic_pipeline: Kinematic Tokenization (SplineGPT) as a staged Dagster asset pipeline.

The package root imports nothing heavy: pure modules (``config``, ``sources``, ``stages``,
``tokenize``, ...) never import dagster. ``defs`` (the Dagster ``Definitions`` of the settings KP_* give)
is built on first use, so that ``dagster ... -m kinematic_pipeline`` finds it while
``import kinematic_pipeline.tokenize`` stays free of Dagster.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "defs":
        from kinematic_pipeline.config import load_settings
        from kinematic_pipeline.definitions import build_definitions

        globals()["defs"] = build_definitions(load_settings())  # once per process
        return globals()["defs"]
    raise AttributeError(f"module 'kinematic_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "defs"])
