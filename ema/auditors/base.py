"""What every auditor has in common: the :class:`Auditor` protocol and the one "is it calibrated?" check.

An auditor is a plain value (house rule 5, after scikit-learn's estimators): ``__init__``
stores configuration; ``calibrate(...)`` validates its arrays, sets the fitted attributes
(names ending in ``_``) and returns ``self``; ``audit(proba, labels)`` refuses with
:class:`~ema.errors.NotCalibratedError` until then and returns an
:class:`~ema.auditors.result.AuditResult`; ``to_dict()`` exports the calibration as
JSON-ready data (``thresholds.json``). :func:`ema.auditors.check_auditor` tests all of it.
"""

from __future__ import annotations

from typing import Protocol, Self, runtime_checkable

import numpy as np

from ema.auditors.result import AuditResult
from ema.errors import NotCalibratedError


@runtime_checkable
class Auditor(Protocol):
    """An audit method over probability matrices.

    Calibration inputs differ by method, because each method learns from different
    evidence; they are always probability matrices of shape (n, n_classes) and label
    vectors of shape (n,), passed positionally:

    ======================  ===================================================================
    auditor                 ``calibrate(...)``
    ======================  ===================================================================
    ``EMAAuditor``          a calibration model's member proba, labels, non-member proba, labels
    ``ReferenceAuditor``    the target's member-reference proba, labels, non-member proba, labels
    ``CalibratedAuditor``   the target's reference proba, labels, then the calibration model's
                            member proba, labels, non-member proba, labels
    ``KSRatioAuditor``      the query model's and the calibration model's proba on the query set
    ======================  ===================================================================

    So the protocol fixes what ``calibrate`` returns (the auditor itself), not its
    parameters; a caller that handles every method (a workflow, :func:`check_auditor`)
    passes each method's calibration arrays as it gets them.

    Attributes
    ----------
    method : str
        The method's name, carried by every :class:`AuditResult` it returns.

    Notes
    -----
    The fitted state is the attributes whose names end in ``_``; :func:`is_calibrated`
    reads it, so an auditor needs no flag of its own.
    """

    method: str

    def calibrate(self, *arrays: np.ndarray) -> Self:
        """Validate the calibration arrays, set the fitted attributes, return ``self``."""

    def audit(self, proba: np.ndarray, labels: np.ndarray, /) -> AuditResult:
        """Decide on a query set from the target's probabilities (n_query, n_classes) and labels (n_query,)."""

    def to_dict(self) -> dict:
        """The calibration as JSON-ready data; refuses before ``calibrate``."""


def is_calibrated(auditor: object) -> bool:
    """Whether ``calibrate`` (or a rebuild such as ``EMAAuditor.from_dict``) set fitted attributes (``name_``).

    >>> from ema.auditors import EMAAuditor
    >>> is_calibrated(EMAAuditor())
    False
    """
    return any(name.endswith("_") and not name.startswith("__") for name in vars(auditor))


def check_calibrated(auditor: object) -> None:
    """Refuse an auditor that was not calibrated, naming its class and the fix.

    Raises
    ------
    NotCalibratedError
        If :func:`is_calibrated` is false.
    """
    if not is_calibrated(auditor):
        raise NotCalibratedError(f"this {type(auditor).__name__} is not calibrated yet: call calibrate() first")
