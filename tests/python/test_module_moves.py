"""Moving modules between CPU and ember keeps their Parameter objects, as CUDA does, so an
optimizer built before the move (accelerate's documented order) trains the moved model."""
import pytest
import torch


def _model():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 8)
    head = torch.nn.Linear(8, 10, bias=False)
    head.weight = emb.weight  # tied, as in a language model
    model = torch.nn.ModuleDict({"emb": emb, "norm": torch.nn.LayerNorm(8), "head": head,
                                 "bn": torch.nn.BatchNorm1d(8)})
    return model


def _step(model, device, opt):
    x = torch.tensor([[1, 2, 3], [4, 5, 6]], device=device)
    h = model["bn"](model["emb"](x).reshape(-1, 8)).reshape(2, 3, 8)
    h = model["norm"](h)
    loss = model["head"](h).logsumexp(-1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach().cpu()


def test_parameters_keep_identity_across_moves():
    model = _model()
    before = {name: p for name, p in model.named_parameters()}
    model.to("ember")
    for name, p in model.named_parameters():
        assert p is before[name], name
        assert p.device.type == "ember"
    assert model["head"].weight is model["emb"].weight
    model.cpu()
    for name, p in model.named_parameters():
        assert p is before[name] and p.device.type == "cpu"


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_optimizer_built_before_move_trains_the_moved_model(opt_name):
    ref = _model()
    ref_opt = getattr(torch.optim, opt_name)(ref.parameters(), lr=0.1)
    model = _model()
    opt = getattr(torch.optim, opt_name)(model.parameters(), lr=0.1)
    model.to("ember")  # after the optimizer exists
    for _ in range(3):
        ref_loss = _step(ref, "cpu", ref_opt)
        loss = _step(model, "ember", opt)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5, msg=name)
    for b, rb in zip(model.buffers(), ref.buffers()):
        assert b.device.type == "ember"
        torch.testing.assert_close(b.cpu(), rb)


def test_gradients_move_with_their_parameters():
    lin = torch.nn.Linear(4, 3)
    lin(torch.randn(2, 4)).sum().backward()
    grad = lin.weight.grad.clone()
    lin.to("ember")
    assert lin.weight.grad.device.type == "ember"
    torch.testing.assert_close(lin.weight.grad.cpu(), grad)


def test_data_assignment_between_cpu_and_ember():
    p = torch.nn.Parameter(torch.randn(3))
    p.data = torch.ones(3, device="ember")
    assert p.device.type == "ember" and p.requires_grad
    torch.testing.assert_close(p.detach().cpu(), torch.ones(3))
    assert torch._has_compatible_shallow_copy_type(torch.ones(1), torch.ones(1, device="ember"))


def test_overwrite_on_conversion_future_flag_is_respected():
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        lin = torch.nn.Linear(2, 2)
        w = lin.weight
        lin.to("ember")
        assert lin.weight is not w  # the flag asks for new Parameter objects
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)


def test_swap_on_conversion_future_flag_is_respected():
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        lin = torch.nn.Linear(2, 2)
        w = lin.weight
        ref = w.detach().clone()
        lin.to("ember")
        assert lin.weight is w and w.device.type == "ember"
        torch.testing.assert_close(w.detach().cpu(), ref)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
