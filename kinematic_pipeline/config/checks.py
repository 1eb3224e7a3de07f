"""The settings' checks of one field: a ValueError naming the field, the value and what it expects."""

from __future__ import annotations


def check_choice(field_name: str, value, choices: tuple) -> None:
    """A ValueError naming the field, the value and the choices when ``value`` is not one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{field_name}={value!r}: expected one of {', '.join(map(repr, choices))}")


def check_alpha(field_name: str, value: float | str) -> None:
    """alpha is a positive number or "mle" (the marginal-likelihood estimate of alpha_estimates)."""
    if value == "mle":
        return
    try:
        ok = float(value) > 0 and float(value) < float("inf")
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{field_name}={value!r}: expected a positive number or 'mle'")
