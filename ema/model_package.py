"""A trained model as plain values, for tracking to log: no torch, no scikit-learn needed to read it.

It sits at the base, below both rooms that use it: ``training/`` builds packages and
``tracking/`` logs them, and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: How a package is logged: as a pyfunc "model from code", or with MLflow's scikit-learn flavor.
FLAVOR_PYFUNC_CODE = "pyfunc-code"
FLAVOR_SKLEARN = "sklearn"
#: A calibration model cloned from a torch target: MLflow's pytorch flavor (``pt2``), its estimator the module.
FLAVOR_PYTORCH = "pytorch"


@dataclass(frozen=True)
class ModelPackage:
    """One of our trained models as plain values that tracking can log without knowing the framework.

    ``input_example`` (an array, or a DataFrame for a model that takes named columns) and
    ``output_example`` (the model's probabilities on it) give the signature. A pyfunc-code
    package names the code file, its artifact files and config; a scikit-learn package carries
    the fitted estimator, whose pyfunc returns ``predict_proba``, saved with skops
    (``skops_trusted_types``: the types in it that skops does not trust by itself); a pytorch
    package carries the module and ``extra_files`` stored beside it.
    """

    flavor: str
    input_example: object
    output_example: np.ndarray
    pip_requirements: tuple[str, ...]
    python_model: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)
    model_config: dict | None = None
    estimator: object = None
    skops_trusted_types: tuple[str, ...] = ()
    extra_files: tuple[str, ...] = ()
