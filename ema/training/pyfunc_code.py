"""What MLflow runs to load one of our torch models (MLflow "models from code"): it names the model class."""

from mlflow.models import set_model

from ema.training.packaging import TorchStateDictModel

set_model(TorchStateDictModel())
