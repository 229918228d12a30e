"""An MLflow pyfunc model loaded in-process, as an oracle."""

from __future__ import annotations

import numpy as np

from ema.errors import EMAError
from ema.oracle.base import Oracle


class PyfuncOracle(Oracle):
    """An MLflow pyfunc model loaded in-process (``models:/NAME@ALIAS``, ``runs:/...``, a path).

    Loading a pyfunc model runs that model's code: load only models you trust, and audit
    others over HTTP against a sandboxed server.
    """

    def __init__(self, model_uri: str, **options) -> None:
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        try:
            self._model = mlflow.pyfunc.load_model(model_uri)
        except (MlflowException, OSError) as exc:
            raise EMAError(f"could not load model {model_uri!r}: {str(exc).splitlines()[0]}") from exc
        self.model_uri = model_uri
        self.source = f"model {model_uri!r}"
        schema = self._model.metadata.get_input_schema()
        declared = tuple(schema.inputs[0].shape) if schema is not None and schema.is_tensor_spec() else None
        super().__init__(**{"input_shape": declared, **options})

    def _predict_batch(self, inputs: np.ndarray) -> object:
        from mlflow.exceptions import MlflowException

        try:
            return self._model.predict(inputs)
        except MlflowException as exc:
            raise EMAError(f"model {self.model_uri!r} refused the query: {_first_line(exc)}") from exc
        except Exception as exc:  # the model's own code: whatever it raises is the model's failure, not ours
            raise EMAError(
                f"model {self.model_uri!r} failed on a batch of {len(inputs)} images of shape {inputs.shape[1:]}: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            ) from exc


def pyfunc_spark_udf(spark: object, model_uri: str, *, result_type: str = "array<float>") -> object:
    """``mlflow.pyfunc.spark_udf`` of ``model_uri``, run in the executors' own Python (``env_manager="local"``).

    The Spark engine scores a query table with it. ``spark`` is a ``SparkSession``; this
    module never imports pyspark. The executors need the model's dependencies installed
    (docs/SCALE.md says how on a cluster); mlflow ships the model's files to them.

    Raises
    ------
    EMAError
        If the model cannot be loaded or turned into a UDF, as one line.
    """
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.pyfunc.spark_udf(spark, model_uri, result_type=result_type, env_manager="local")
    except (MlflowException, OSError) as exc:
        raise EMAError(f"could not make a Spark UDF of model {model_uri!r}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__
