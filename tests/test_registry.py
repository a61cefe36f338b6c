"""ModelRegistry: register / create / list_models / is_registered and its errors."""

from contextlib import contextmanager

import pytest
import torch
from torch import nn

from fundamentallm import ModelRegistry, Transformer, TransformerClassifier, TransformerConfig


@contextmanager
def restored_registry():
    """Restore the global registry on exit, after throwaway models were registered."""
    saved = dict(ModelRegistry._models)
    try:
        yield ModelRegistry
    finally:
        ModelRegistry._models.clear()
        ModelRegistry._models.update(saved)


@pytest.fixture
def clean_registry():
    with restored_registry() as registry:
        yield registry


def test_builtin_models_registered():
    assert ModelRegistry.is_registered("transformer") and ModelRegistry.is_registered("classifier")
    assert {"transformer", "classifier"} <= set(ModelRegistry.list_models())
    assert ModelRegistry.list_models() == sorted(ModelRegistry.list_models())
    assert ModelRegistry._models["transformer"] is Transformer
    assert not ModelRegistry.is_registered("gpt5")


def test_create_equals_direct_construction_under_same_seed():
    cfg = TransformerConfig(vocab_size=31, d_model=32, num_heads=4, num_layers=2, max_seq_len=8)
    torch.manual_seed(0)
    a = ModelRegistry.create("transformer", cfg).eval()
    torch.manual_seed(0)
    b = Transformer(cfg).eval()
    assert type(a) is Transformer
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    ids = torch.randint(0, 31, (2, 8))
    assert torch.equal(a(ids)[0], b(ids)[0])


def test_create_passes_extra_arguments():
    cfg = TransformerConfig(vocab_size=31, d_model=32, num_heads=4, num_layers=1, causal=False)
    clf = ModelRegistry.create("classifier", cfg, num_classes=5, pooling="mean")
    assert isinstance(clf, TransformerClassifier) and clf.num_classes == 5 and clf.pooling == "mean"


def test_unknown_name_lists_available():
    with pytest.raises(ValueError) as err:
        ModelRegistry.create("gpt5", TransformerConfig())
    msg = str(err.value)
    assert "'gpt5'" in msg and "transformer" in msg and "classifier" in msg


def test_register_decorator_and_duplicates(clean_registry):
    @ModelRegistry.register("toy")
    class Toy(nn.Module):
        def __init__(self, config, scale=1):
            super().__init__()
            self.config, self.scale = config, scale

    assert ModelRegistry.is_registered("toy") and "toy" in ModelRegistry.list_models()
    toy = ModelRegistry.create("toy", "cfg", scale=3)
    assert isinstance(toy, Toy) and toy.config == "cfg" and toy.scale == 3
    # re-registering the same class (e.g. a module reload) is harmless
    assert ModelRegistry.register("toy")(Toy) is Toy

    class Other(nn.Module):
        pass

    with pytest.raises(ValueError, match="already registered to Toy"):
        ModelRegistry.register("toy")(Other)
    with pytest.raises(ValueError, match="already registered to Transformer"):
        ModelRegistry.register("transformer")(Other)
    assert ModelRegistry._models["transformer"] is Transformer


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_names(name, clean_registry):
    with pytest.raises(ValueError, match="non-empty string"):
        ModelRegistry.register(name)


def test_restored_registry_undoes_registrations():
    """One test, not two that must run in a given order: register inside, check after."""
    before = ModelRegistry.list_models()
    with restored_registry():
        ModelRegistry.register("temporary")(nn.Identity)
        assert ModelRegistry.is_registered("temporary")
    assert not ModelRegistry.is_registered("temporary") and ModelRegistry.list_models() == before
