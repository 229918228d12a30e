"""The click parameter types of the shared options (:mod:`ema_cli.options`): numbers in an open range, margins."""

from __future__ import annotations

import click

from ema.workflows.options import AUTO_MARGIN


class OpenRangeType(click.types.FloatParamType):
    """A number strictly between ``low`` and ``high``: refused alike out of range (``2``) and where it is no number
    in range (``nan``, which click's ``FloatRange`` lets through, as every comparison with it is false). A float
    type, as MLproject declares it."""

    name = "float"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not self.low < number < self.high:
            self.fail(f"expected a number strictly between {self.low:g} and {self.high:g}, got {value!r}", param, ctx)
        return number


class MarginType(click.ParamType):
    """A retained share in (0, 1), or ``auto``."""

    name = "margin"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or value == AUTO_MARGIN:
            return value
        try:
            share = float(value)
        except ValueError:
            share = float("nan")
        if not 0 < share < 1:
            self.fail(f"expected a retained share in (0, 1) or {AUTO_MARGIN!r}, got {value!r}", param, ctx)
        return share


class ChoiceOrEmpty(click.Choice):
    """One of ``choices``, or ``""``, which an MLproject parameter left at its empty default passes for "not given"
    (returned as it is, for the command to read); help and errors list the real choices alone."""

    def convert(self, value, param, ctx):
        return value if value == "" else super().convert(value, param, ctx)
