"""Our logged torch models load and predict where mlflow and torch are installed but ``ema`` is not."""

import subprocess
import sys

import mlflow
import numpy as np
import pytest

from ema.inputs import to_model_inputs
from ema.tracking.registry import log_and_register
from ema.training.fit import fit, predict_proba
from ema.training.packaging import package_torch_model
from ema.training.spec import TrainSpec
from tests.without_ema import environment_without_ema

#: Loads the model at argv[1] by path, scores the images in argv[2], saves the probabilities to argv[3].
PREDICT = """
import sys
import numpy as np
import mlflow.pyfunc
try:
    import ema
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("ema was importable")
model = mlflow.pyfunc.load_model(sys.argv[1])
np.save(sys.argv[3], model.predict(np.load(sys.argv[2])))
assert not [name for name in sys.modules if name == "ema" or name.startswith("ema.")]
"""


@pytest.mark.parametrize("spec", [TrainSpec(arch="mlp", hidden=(32,), epochs=1), TrainSpec(arch="cnn", epochs=1)])
def test_model_predicts_the_same_in_a_process_that_cannot_import_ema(store, tmp_path, spec):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (30, 28, 28)).astype(np.uint8), rng.integers(0, 10, 30)
    model = fit(spec, to_model_inputs(x), y, progress=False)
    mlflow.set_experiment("self-contained")
    with mlflow.start_run(), package_torch_model(model, x) as package:
        version = log_and_register(package, name="portable", alias="now", tags={})
    local = mlflow.artifacts.download_artifacts(version.uri, dst_path=str(tmp_path / "model"))
    np.save(tmp_path / "x.npy", x)
    subprocess.run(
        [sys.executable, "-c", PREDICT, local, str(tmp_path / "x.npy"), str(tmp_path / "p.npy")],
        env=environment_without_ema(tmp_path / "site"),
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), predict_proba(model, to_model_inputs(x)))
    np.testing.assert_array_equal(mlflow.pyfunc.load_model(version.uri).predict(x), np.load(tmp_path / "p.npy"))


def test_the_refusing_environment_really_refuses_ema(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "import ema"], env=environment_without_ema(tmp_path), capture_output=True, text=True
    )
    assert result.returncode != 0 and "refused: this environment has no ema" in result.stderr
