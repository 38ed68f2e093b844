"""Click parameter types shared by the ``aifabric`` commands."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and ±inf.

    click's range check compares, and every comparison with NaN is false, so ``nan`` passes any
    FloatRange; ``inf`` passes one without a maximum. Both then reach the controller as a
    statistics interval or a threshold that silently disables what it sets.
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv
