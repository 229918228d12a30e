"""Errors the workbench reports to a user as one line, without a traceback."""


class EMAError(Exception):
    """A problem with the user's input or environment that the user can fix."""


class InputError(EMAError, ValueError):
    """An argument or data array does not have the expected form."""


class NotCalibratedError(InputError):
    """An auditor was asked to audit or export before ``calibrate()``: calibrate it first."""
