"""The transfer guard: may the calibration model's member behaviour stand in for the target's?

The target's members cannot be observed, so H0 "retained" and the retained-fraction
interval borrow the calibration model's member tail shares. The transfer assumption is the
weak point: a calibration model that overfits more than the target (e.g. trained on far
fewer samples) understates how often the target's members fall in the tail, so H0
"retained" is rejected for real members and the interval moves down. The accuracies below
reveal such a mismatch (the auditor's ``to_dict()["diagnostics"]`` records them); the
transfer is trusted only when the target's accuracy on the reference and the calibration
model's on its held-out half are within a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Largest |target reference accuracy - calibration non-member accuracy| at which member
#: behaviour is transferred from the calibration model; beyond it H0 "retained" is not tested
#: and the retained interval falls back to [target-only lower bound, 1].
DEFAULT_TRANSFER_TOLERANCE = 0.02


@dataclass(frozen=True)
class TransferCheck:
    """Accuracies that reveal a calibration model unlike the target, and whether transfer is trusted.

    Attributes
    ----------
    diagnostics : dict of str to float
        ``target_reference_accuracy``, ``calibration_member_accuracy`` and
        ``calibration_nonmember_accuracy``.
    gap : float
        Target reference accuracy minus calibration non-member accuracy.
    trusted : bool
        Whether ``|gap|`` is within the tolerance.
    """

    diagnostics: dict[str, float]
    gap: float
    trusted: bool


def check_transfer(
    reference: tuple[np.ndarray, np.ndarray],
    member: tuple[np.ndarray, np.ndarray],
    nonmember: tuple[np.ndarray, np.ndarray],
    *,
    tolerance: float,
) -> TransferCheck:
    """Compare the target's accuracy on the reference with the calibration model's on its two halves.

    Parameters
    ----------
    reference, member, nonmember : tuple of ndarray
        Validated (probabilities of shape (n, n_classes), labels of shape (n,)): the target on
        the reference, the calibration model on its training and held-out halves.
    tolerance : float
        Largest ``|gap|`` at which the transfer is trusted.

    Returns
    -------
    TransferCheck
    """
    diagnostics = {
        f"{name}_accuracy": float((proba.argmax(axis=1) == labels).mean())
        for name, (proba, labels) in (
            ("target_reference", reference),
            ("calibration_member", member),
            ("calibration_nonmember", nonmember),
        )
    }
    gap = diagnostics["target_reference_accuracy"] - diagnostics["calibration_nonmember_accuracy"]
    return TransferCheck(diagnostics=diagnostics, gap=gap, trusted=bool(abs(gap) <= tolerance))
