"""The resolved settings as text (what ``info`` prints) and their fingerprint: what a resumed ``materialize`` and a
resumed benchmark compare before they reuse what an earlier command made (``orchestration/resume.py``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.warehouse import Warehouse


def settings_tree(settings) -> str:
    """The resolved settings as an indented tree: one ``name: value`` line per field, a section per group
    (``data``, ``model``, ``train``, ...), tuples as comma lists (``seeds: 1234, 1235``)."""

    def value(v) -> str:
        if isinstance(v, Warehouse):
            return str(v.root)
        if isinstance(v, (tuple, list)):
            return ", ".join(value(x) for x in v) if v else "(none)"
        return "(none)" if v is None else str(v)

    def lines(obj, depth: int) -> list[str]:
        out = []
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v) and not isinstance(v, (type, Warehouse)):
                out += ["  " * depth + f"{f.name}:", *lines(v, depth + 1)]
            else:
                out.append("  " * depth + f"{f.name}: {value(v)}")
        return out

    return "\n".join(["settings:", *lines(settings, 1)])


def fingerprint(settings) -> str:
    """What must not change between a stopped command and its resume: the resolved settings (every field, as
    ``info`` prints them) and each stage's code version."""
    text = settings_tree(settings) + "\n" + json.dumps(CODE_VERSIONS, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
