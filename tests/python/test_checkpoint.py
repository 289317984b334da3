"""torch.utils.checkpoint and torch.random.fork_rng restore ember's RNG, so a recomputed forward
draws the dropout masks of the original one and gradients match the plain backward."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def test_device_module_reports_initialized():
    # PyTorch saves the device RNG state only when the device module says it is initialized.
    assert torch.ember._initialized is True
    assert torch.ember.is_initialized()
    assert torch._utils._get_device_module("ember") is torch.ember


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.b(F.dropout(F.gelu(self.a(x)), 0.5, training=True))


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpointed_dropout_gradients_match_plain_backward(use_reentrant):
    torch.manual_seed(0)
    block = Block().to("ember")
    x = torch.randn(4, 16, 32, device="ember", requires_grad=True)

    torch.ember.manual_seed(7)
    block(x).square().sum().backward()
    plain = [x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()]
    x.grad = None
    block.zero_grad()

    torch.ember.manual_seed(7)
    checkpoint(block, x, use_reentrant=use_reentrant).square().sum().backward()
    ckpt = [x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()]
    for a, b in zip(ckpt, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_checkpoint_sequential_with_dropout():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(*[Block() for _ in range(4)]).to("ember")
    x = torch.randn(2, 8, 32, device="ember", requires_grad=True)
    torch.ember.manual_seed(3)
    seq(x).sum().backward()
    plain = x.grad.cpu()
    x.grad = None
    torch.ember.manual_seed(3)
    torch.utils.checkpoint.checkpoint_sequential(seq, 2, x, use_reentrant=False).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), plain, rtol=1e-5, atol=1e-6)


def test_fork_rng_forks_ember_by_default():
    torch.ember.manual_seed(1)
    with torch.random.fork_rng():
        inside = torch.rand(8, device="ember").cpu()
    after = torch.rand(8, device="ember").cpu()
    torch.testing.assert_close(inside, after)


def test_compiled_checkpoint_with_dropout_recomputes_the_same_mask():
    # AOTAutograd saves the RNG state around a checkpointed random op and restores it for the
    # recomputation (run_and_save_rng_state / run_with_rng_state), which knew no ember device.
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8).to("ember")
    p = 0.3

    def f(x):
        return checkpoint(lambda t: F.dropout(lin(t), p), x, use_reentrant=False)

    x = torch.randn(64, 8, device="ember", requires_grad=True)
    y = torch.compile(f, backend="ember")(x)
    y.sum().backward()
    kept = (y != 0).float() / (1 - p)  # the mask the forward drew (lin's outputs are never 0 here)
    assert 0.5 < kept.count_nonzero().item() / kept.numel() < 0.9
    torch.testing.assert_close(x.grad, kept @ lin.weight, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_checkpoint_with_dropout_over_several_shapes(dynamic):
    # A recompile with symbolic shapes leaves the RNG-state wrappers in the graph as
    # higher-order ops: they run as library steps (their ember implementations), not a refusal.
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8).to("ember")
    p = 0.3

    def f(x):
        return checkpoint(lambda t: F.dropout(lin(t), p), x, use_reentrant=False)

    step = torch.compile(f, backend="ember", dynamic=dynamic)
    for n in (16, 24, 40):
        lin.zero_grad()
        x = torch.randn(n, 8, device="ember", requires_grad=True)
        y = step(x)
        y.sum().backward()
        kept = (y != 0).float() / (1 - p)
        torch.testing.assert_close(x.grad, kept @ lin.weight, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_checkpointed_batchnorm_in_training_mode(compiled):
    # The region updates running statistics in place; the compiled forward must not leave that
    # update for after the backward saved the buffers (autograd then refuses to run). Eager
    # recomputation updates the statistics a second time and a compiled region does not (as with
    # every PyTorch backend), so the compiled reference is the CPU's own compiled run.
    def run(device, backend):
        torch.manual_seed(0)
        block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh()).to(device)
        fn = lambda x: checkpoint(block, x, use_reentrant=False)  # noqa: E731
        step = torch.compile(fn, backend=backend) if compiled else fn
        x = torch.linspace(-2, 3, 32).reshape(8, 4).to(device).requires_grad_()
        for _ in range(2):
            step(x).pow(2).sum().backward()
        return [t.detach().cpu() for t in (x.grad, block[0].weight.grad, block[1].weight.grad,
                                            block[1].running_mean, block[1].running_var)]

    for got, want in zip(run("ember", "ember"), run("cpu", "aot_eager")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
