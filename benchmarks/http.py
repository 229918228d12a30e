"""``http``: scoring our MLP through a real ``mlflow models serve``, before and after raw-image inputs and Parquet.

Both models are the same untrained MLP (the cost does not depend on its weights), logged
with the same model code into a temporary sqlite store and served by ``mlflow models serve
--env-manager local`` on 127.0.0.1, one uvicorn worker, on the machine the client runs on:

- baseline (how every audit over HTTP ran before issue 17): the model declares float32 pixels
  (n, 1, 28, 28), and ``HttpOracle`` sends each 4,096-image batch as JSON floats, one request
  at a time;
- ours: the model declares uint8 images (n, 28, 28) and scales them itself; each case names
  the request format (``--http-format``: JSON integers 0-255, or Parquet), its batch size,
  ``--http-concurrency`` and the server's ``--workers``.

Where a JSON request's time goes (profiled in-process, 4,096 images): MLflow's scoring server
deep-copies the parsed JSON lists before casting them (``_cast_schema_type``, about 1.2 s of
1.7 s) and parses the JSON twice (0.7 s); the client's encoding takes 0.3 s for integers
and 0.8 s for floats. The copy costs per value, integer or float, which bounds what
smaller JSON alone can gain with one worker. A Parquet body carries each batch's uint8 values
in one column that the server reshapes to the signature's tensor as a whole, so nothing is
parsed or copied per value.

Every case's probabilities are compared with the in-process model's on the same images.
"""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from benchmarks._common import Config, interleaved, progress, row, spread, temporary_store

NAME = "http"
#: Images per timed scoring (full run, --quick).
N_IMAGES = (8_192, 4_096)
#: (request format, batch size, requests in flight, server workers) of the raw-image cases.
CASES = (
    ("json", 4096, 1, 1),
    ("json", 1024, 2, 2),
    ("parquet", 4096, 1, 1),
    ("parquet", 1024, 1, 1),
    ("parquet", 1024, 2, 2),
)
GOAL = 3.0


def measure(config: Config) -> list[dict]:
    """Images/s of each raw-image case against the float-pixel baseline, timed in interleaved rounds."""
    import mlflow
    import torch

    from benchmarks._serve import serve
    from ema.data.embedded import load_mnist_embedded
    from ema.inputs import InputSpec, to_model_inputs
    from ema.oracle import HttpOracle, PyfuncOracle
    from ema.tracking.registry import log_and_register
    from ema.training.architectures import ProbabilityModel
    from ema.training.packaging import package_torch_model
    from ema.training.spec import TrainSpec

    n_images = N_IMAGES[1] if config.quick else N_IMAGES[0]
    images = np.resize(load_mnist_embedded().x, (n_images, 28, 28))
    torch.manual_seed(0)
    model = ProbabilityModel(TrainSpec(arch="mlp")).eval()
    with temporary_store():
        with mlflow.start_run(run_name="bench http"), package_torch_model(model, images) as package:
            raw = log_and_register(package, name="bench-http-images", alias="bench", tags={})
            floats = log_and_register(
                dataclasses.replace(package, input_example=to_model_inputs(package.input_example)),
                name="bench-http-pixels",
                alias="bench",
                tags={},
            )
        expected = PyfuncOracle(raw.uri).predict_proba(images)
        progress(f"http: serving {floats.uri}, and {raw.uri} with 1 and 2 workers")
        with (
            serve(floats.uri, threads=config.threads) as (float_url, _),
            serve(raw.uri, threads=config.threads) as (one_worker_url, _),
            serve(raw.uri, threads=config.threads, workers=2) as (two_workers_url, _),
        ):
            urls = {1: one_worker_url, 2: two_workers_url}
            oracles = {"baseline": HttpOracle(f"{float_url}/invocations", batch_size=4096)}
            for case in CASES:
                request_format, batch, concurrency, workers = case
                oracles[case] = HttpOracle(
                    f"{urls[workers]}/invocations",
                    batch_size=batch,
                    concurrency=concurrency,
                    request_format=request_format,
                    input_spec=InputSpec((-1, 28, 28), "uint8"),
                )
            differences = {name: np.abs(o.predict_proba(images) - expected).max() for name, o in oracles.items()}
            repeats = 3
            progress(f"http: {len(oracles)} clients x {repeats} interleaved rounds of {n_images} images")
            times = interleaved({name: (lambda o=o: o.predict_proba(images)) for name, o in oracles.items()}, repeats)
    baseline_rate = n_images / statistics.median(times["baseline"])
    rows = []
    for case in CASES:
        request_format, batch, concurrency, workers = case
        rate = n_images / statistics.median(times[case])
        rows.append(
            row(
                NAME,
                f"mlp: uint8 images as {request_format}, batch {batch}, {concurrency} in flight, "
                f"server with {workers} worker(s)",
                ours=rate,
                baseline=baseline_rate,
                unit="images/s",
                baseline_label="float32 pixels as JSON, batch 4096, one request at a time, 1 worker (before)",
                ratio=rate / baseline_rate,
                ratio_label="ours / before",
                goal=f">= {GOAL:g}x",
                met=rate / baseline_rate >= GOAL,
                repeats=repeats,
                note=(
                    f"{n_images} images; ours {spread(times[case])}, before {spread(times['baseline'])}; max |diff| "
                    f"from in-process: ours {differences[case]:.1e}, before {differences['baseline']:.1e}; client "
                    "and servers share the machine's two cores"
                ),
            )
        )
    return rows
