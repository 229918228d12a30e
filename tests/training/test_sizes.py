"""Recipe size estimates: the fixed architectures' counts, a rule for every allow-listed classifier, the refusal."""

from __future__ import annotations

import pytest

from ema.errors import InputError
from ema.limits import Limits
from ema.training.allow_list import sklearn_classifiers
from ema.training.sizes import FIXED_ARCHITECTURES, SKLEARN_RULES, check_size, sklearn_size, torch_size
from ema.training.spec import TrainSpec


@pytest.mark.parametrize("arch", sorted(FIXED_ARCHITECTURES))
def test_fixed_architecture_counts_match_the_built_network(arch):
    import torch

    from ema.training.networks import build_network

    network, outputs = build_network(arch), []
    for module in network.modules():
        if not list(module.children()):
            module.register_forward_hook(lambda m, i, o: outputs.append(o.numel()))
    network(torch.zeros(1, 1, 28, 28))
    assert FIXED_ARCHITECTURES[arch] == (sum(p.numel() for p in network.parameters()), sum(outputs))


@pytest.mark.parametrize("arch", sorted(FIXED_ARCHITECTURES))
@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 64, 64)])
def test_image_network_estimates_follow_the_input_shape(arch, shape):
    """Parameters exactly; activations of the cnn exactly, of ResNet-18 within 15% above."""
    import torch

    from ema.training.networks import build_network

    network, outputs = build_network(arch, input_shape=shape), []
    for module in network.modules():
        if not list(module.children()):
            module.register_forward_hook(lambda m, i, o: outputs.append(o.numel()))
    with torch.no_grad():
        network(torch.zeros(1, *shape))
    estimate = torch_size(TrainSpec(arch=arch, batch_size=1), 1, shape)
    assert estimate.parameters == sum(p.numel() for p in network.parameters())
    per_image = (estimate.memory_bytes - estimate.parameters * 3 * 4) // (2 * 4)  # SGD: weight, gradient, momentum
    assert sum(outputs) <= per_image <= 1.15 * sum(outputs)


def test_torch_size_counts_the_mlp_parameters():
    from ema.training.networks import build_network

    spec = TrainSpec(hidden=(64, 32))
    assert torch_size(spec, 100).parameters == sum(p.numel() for p in build_network("mlp", spec.hidden).parameters())


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_every_allow_listed_classifier_with_predict_proba_has_a_size_rule():
    buildable = set()
    for cls in set(sklearn_classifiers().values()):
        try:
            estimator = cls()
        except TypeError:
            continue  # needs an estimator object, which a recipe cannot give
        if hasattr(estimator, "predict_proba"):
            buildable.add(cls.__name__)
            sklearn_size(estimator, 100, 784, 10)
    assert buildable <= set(SKLEARN_RULES), buildable - set(SKLEARN_RULES)


def test_sklearn_size_refuses_an_estimator_without_a_rule():
    class Unsized:
        def get_params(self, deep=False):
            return {}

    with pytest.raises(InputError, match="expected a scikit-learn classifier whose size can be estimated"):
        sklearn_size(Unsized(), 100, 784, 10)


def test_check_size_names_the_batch_when_activations_dominate():
    estimate = torch_size(TrainSpec(hidden=(65536,), batch_size=60_000), 60_000)
    with pytest.raises(InputError, match=r"training holds at most 8\.0 GB .* got batch_size 60000 with hidden"):
        check_size(estimate, Limits())
    check_size(estimate, Limits(max_params=10**10))


def test_tree_size_follows_depth_and_samples():
    from sklearn.ensemble import RandomForestClassifier

    shallow = sklearn_size(RandomForestClassifier(n_estimators=10, max_depth=2), 1000, 784, 10)
    deep = sklearn_size(RandomForestClassifier(n_estimators=10), 1000, 784, 10)
    assert shallow.parameters == 10 * 7 * 18 and deep.parameters == 10 * 1999 * 18
