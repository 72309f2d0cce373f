"""Linear: nn.Linear's results and state dict, with oneDNN's packed weight at CPU inference."""

import copy
import pickle

import pytest
import torch

from transformer.accel import linear as linear_mod
from transformer.accel.linear import Linear, onednn_linear_available

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="torch build without oneDNN linear")


def _pair(bias=True, seed=0):
    torch.manual_seed(seed)
    layer = Linear(16, 24, bias=bias)
    ref = torch.nn.Linear(16, 24, bias=bias)
    ref.load_state_dict(layer.state_dict())
    return layer, ref


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_inference_on_several_rows_uses_the_packed_weight_and_equals_linear(bias):
    layer, ref = _pair(bias)
    x = torch.randn(3, 5, 16)
    for ctx in (torch.no_grad, torch.inference_mode):
        layer._packed = None
        with ctx():
            out = layer(x)
        assert layer._packed is not None  # the oneDNN path ran
        torch.testing.assert_close(out, ref(x).detach(), atol=1e-5, rtol=1e-5)
    assert list(layer.state_dict()) == list(ref.state_dict())  # the packed copy is not saved
    strided = torch.randn(4, 32)[:, ::2]  # a non-contiguous input
    with torch.no_grad():
        torch.testing.assert_close(layer(strided), ref(strided), atol=1e-5, rtol=1e-5)


def test_one_row_other_dtypes_and_autocast_keep_f_linear():
    layer, ref = _pair()
    with torch.no_grad():
        torch.testing.assert_close(layer(torch.ones(1, 16)), ref(torch.ones(1, 16)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(torch.randn(4, 16)).dtype == torch.bfloat16  # as nn.Linear under autocast
        layer.double()
        x = torch.randn(4, 16, dtype=torch.float64)
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert layer._packed is None
    layer.float()
    out = layer(torch.randn(1, 16, requires_grad=True))
    assert "OneDNN" not in type(out.grad_fn).__name__


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_training_gradients_equal_linear(bias, monkeypatch):
    monkeypatch.setattr(linear_mod, "MIN_TRAIN_ROWS", 2)  # the oneDNN path on a few rows
    layer, ref = _pair(bias)
    x = torch.randn(3, 7, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, out_ref = layer(x), ref(x_ref)
    assert "OneDNN" in type(out.grad_fn).__name__  # the oneDNN autograd function ran
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    weights = torch.randn(3, 7, 24)  # a non-uniform upstream gradient
    (out * weights).sum().backward()
    (out_ref * weights).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-5)
    if bias:
        torch.testing.assert_close(layer.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-5)
    frozen, _ = _pair(bias)
    frozen.requires_grad_(False)
    y = torch.randn(5, 16, requires_grad=True)
    frozen(y).sum().backward()  # input gradient only
    torch.testing.assert_close(y.grad, frozen.weight.sum(0).expand(5, 16), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_training_takes_onednn_only_from_min_train_rows():
    layer, ref = _pair()
    rows = linear_mod.MIN_TRAIN_ROWS
    for n, packed in ((rows - 1, False), (rows, True)):
        x = torch.randn(n, 16, requires_grad=True)
        out = layer(x)
        assert ("OneDNN" in type(out.grad_fn).__name__) is packed
        torch.testing.assert_close(out, ref(x), atol=1e-5, rtol=1e-5)
        out.sum().backward()
        torch.testing.assert_close(x.grad, ref.weight.sum(0).expand(n, 16), atol=1e-5, rtol=1e-5)
    frozen_input = torch.randn(rows // 2, 2, 16)  # rows are every leading dim together; the weight trains
    assert "OneDNN" in type(layer(frozen_input).grad_fn).__name__


def test_without_onednn_inference_falls_back(monkeypatch):
    monkeypatch.setattr(linear_mod, "_onednn_ok", False)
    layer, ref = _pair()
    x = torch.randn(6, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), ref(x))
    assert layer._packed is None


@needs_onednn
def test_the_packed_weight_follows_optimiser_steps_loads_and_edits():
    layer, _ = _pair()
    x = torch.randn(5, 16)
    with torch.no_grad():
        first = layer(x)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(x).sum().backward()
    opt.step()
    with torch.no_grad():
        after = layer(x)
        torch.testing.assert_close(after, x @ layer.weight.t() + layer.bias, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(after, first)
        layer.load_state_dict({"weight": torch.zeros(24, 16), "bias": torch.zeros(24)})
        assert layer(x).eq(0).all()
        layer.weight[3] = 1.0  # an in-place edit
        torch.testing.assert_close(layer(x)[:, 3], x.sum(-1), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_a_packed_layer_can_be_copied_and_pickled():
    # oneDNN's packed tensors cannot be copied; EMA callbacks deep-copy the model mid-training.
    layer, ref = _pair()
    x = torch.randn(4, 16)
    with torch.no_grad():
        layer(x)
    assert layer._packed is not None
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert clone._packed is None
        with torch.no_grad():
            torch.testing.assert_close(clone(x), ref(x), atol=1e-5, rtol=1e-5)
    assert layer._packed is not None  # the original keeps its copy
