"""The tokenizations (paper "Tokenization Ablations"): one module per tokenization on ``base.Tokenization``.

``TOKENIZATIONS`` holds them by name in the paper's order (spline, fd, raw); ``settings.tokenize.tokenizations``
chooses those a run computes (``chosen``). A new one is an object of a ``Tokenization`` class registered here
(``register``: a test registers its own). ``tokenization(name)`` looks one up, ``of_feature_set`` finds the
tokenization whose features file holds a probe's feature set.
"""

from __future__ import annotations

from kinematic_pipeline.tokenizations.base import Channel, Tokenization, Workspace
from kinematic_pipeline.tokenizations.differences import FD
from kinematic_pipeline.tokenizations.raw import RAW
from kinematic_pipeline.tokenizations.spline import SPLINE

TOKENIZATIONS: dict[str, Tokenization] = {t.name: t for t in (SPLINE, FD, RAW)}


def register(tok: Tokenization) -> Tokenization:
    """Add ``tok`` to the registry (a ValueError when its name is taken); returns it."""
    if tok.name in TOKENIZATIONS:
        raise ValueError(f"a tokenization named {tok.name!r} is registered already")
    TOKENIZATIONS[tok.name] = tok
    return tok


def tokenization(name: str) -> Tokenization:
    """The registered tokenization ``name``; a ValueError naming the choices otherwise."""
    try:
        return TOKENIZATIONS[name]
    except KeyError:
        raise ValueError(f"unknown tokenization {name!r}: expected one of {', '.join(TOKENIZATIONS)}") from None


def chosen(names: tuple[str, ...], readers: dict | None = None) -> tuple[Tokenization, ...]:
    """The tokenizations ``names`` (``tokenize.tokenizations``: those a run computes), in that order: a ValueError
    for an unknown name, a choice without spline (the labels read its end positions), or one of ``readers``
    (variant name -> the tokenization it reads) reading a tokenization not chosen, naming both."""
    toks = tuple(tokenization(n) for n in names)
    if SPLINE not in toks:
        raise ValueError(
            f"tokenize.tokenizations={names!r} must hold {SPLINE.name!r}: the labels read its end positions"
        )
    for reader, tok in (readers or {}).items():
        if tok not in toks:
            raise ValueError(
                f"variant {reader} reads the {tok.name} tokens, which tokenize.tokenizations={names!r} does not compute"
            )
    return toks


def of_feature_set(feature_set: str) -> Tokenization:
    """The tokenization whose features file holds ``feature_set`` (``trivial``: the raw tokens')."""
    for tok in TOKENIZATIONS.values():
        if feature_set in tok.feature_sets:
            return tok
    sets = [f for tok in TOKENIZATIONS.values() for f in tok.feature_sets]
    raise ValueError(f"unknown feature set {feature_set!r}: expected one of {', '.join(sets)}")


__all__ = [
    "FD",
    "RAW",
    "SPLINE",
    "TOKENIZATIONS",
    "Channel",
    "Tokenization",
    "Workspace",
    "chosen",
    "of_feature_set",
    "register",
    "tokenization",
]
