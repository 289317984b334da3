"""Recurrent layers: nn.LSTM / nn.GRU and their cells run on ember's fused cell kernels (the path
PyTorch takes on an accelerator), forward and backward, matching the CPU."""
import copy

import pytest
import torch
import torch.nn as nn

import torch_ember  # noqa: F401


def _check(module, *inputs, double_backward=False):
    torch.manual_seed(0)
    ref_mod = module
    dev_mod = copy.deepcopy(module).to("ember")
    def leaf(x, device):
        if isinstance(x, tuple):  # an LSTM's (h0, c0)
            return tuple(leaf(t, device) for t in x)
        return x.detach().to(device, copy=True).requires_grad_()
    xs, xe = [leaf(x, "cpu") for x in inputs], [leaf(x, "ember") for x in inputs]
    out_ref, out_dev = ref_mod(*xs), dev_mod(*xe)
    flat = lambda o: [t for t in (o if isinstance(o, (tuple, list)) else (o,)) for t in
                      (t if isinstance(t, (tuple, list)) else (t,))]
    for a, b in zip(flat(out_dev), flat(out_ref)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
    loss = lambda o: sum((t.float() * (i + 1)).square().sum() for i, t in enumerate(flat(o)))
    params_ref, params_dev = list(ref_mod.parameters()), list(dev_mod.parameters())
    if double_backward:
        g_ref = torch.autograd.grad(loss(out_ref), params_ref, create_graph=True)
        g_dev = torch.autograd.grad(loss(out_dev), params_dev, create_graph=True)
        sum(g.square().sum() for g in g_ref).backward()
        sum(g.square().sum() for g in g_dev).backward()
    else:
        loss(out_ref).backward()
        loss(out_dev).backward()
    for (name, p), q in zip(ref_mod.named_parameters(), params_dev):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for a, b in zip(flat(xe), flat(xs)):
        if b.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_layers_match_cpu(native_only, kind, bias, bidirectional):
    torch.manual_seed(0)
    m = kind(6, 5, num_layers=2, bias=bias, batch_first=True, bidirectional=bidirectional)
    _check(m, torch.randn(3, 7, 6))


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_initial_state_and_projection(native_only, kind):
    torch.manual_seed(0)
    if kind is nn.LSTM:
        m = nn.LSTM(4, 6, proj_size=3)
        _check(m, torch.randn(5, 2, 4), (torch.randn(1, 2, 3), torch.randn(1, 2, 6)))
    else:
        m = nn.GRU(4, 6)
        _check(m, torch.randn(5, 2, 4), torch.randn(1, 2, 6))


@pytest.mark.parametrize("kind", [nn.LSTMCell, nn.GRUCell])
def test_cells_and_double_backward(native_only, kind):
    torch.manual_seed(0)
    _check(kind(4, 5), torch.randn(3, 4))
    _check(kind(4, 5), torch.randn(3, 4), double_backward=True)


def test_packed_sequence():
    torch.manual_seed(0)
    m = nn.LSTM(4, 5, batch_first=True)
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([6, 4, 2])  # lengths stay on the host, as on CUDA
    pack = lambda t: nn.utils.rnn.pack_padded_sequence(t, lengths, batch_first=True)
    ref, _ = m(pack(x))
    got, _ = copy.deepcopy(m).to("ember")(pack(x.to("ember")))
    torch.testing.assert_close(got.data.cpu(), ref.data)


def test_wrong_state_shape_is_refused():
    m = nn.GRUCell(4, 5).to("ember")
    with pytest.raises(RuntimeError, match="hidden|size|shape"):
        m(torch.randn(3, 4, device="ember"), torch.randn(2, 5, device="ember"))
