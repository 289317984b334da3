"""Dynamic shapes in compiled graphs: what a new input signature's first call does (more in
test_compile.py's specialization tests)."""
import pytest
import torch
import torch_ember


def test_an_op_without_an_ember_kernel_fails_at_the_first_call_of_a_new_size(fresh_compile):
    """A signature's first call runs eagerly; when an op there takes the CPU fallback, the
    signature compiles at once, so an untranslatable op fails the compile at that call (as in a
    static graph), not one step later after a step that worked."""
    def f(x, target):  # multilabel_margin_loss has no ember kernel
        return torch.nn.functional.multilabel_margin_loss(x, target) * 2

    target = torch.tensor([[3, 0, -1, 1]] * 10, device="ember")
    g = torch.compile(f, backend="ember", dynamic=True)
    old = torch_ember.set_fallback_mode("silent")
    try:
        for _ in range(2):
            with pytest.raises(torch_ember.CompileError, match="aten.multilabel_margin_loss_forward"):
                g(torch.randn(10, 4, device="ember"), target)
        # With the eager fallback option the graph runs, and matches the CPU.
        torch._dynamo.reset()
        h = torch.compile(f, backend="ember", dynamic=True, options={"fallback": "eager"})
        x = torch.randn(10, 4)
        for _ in range(2):
            torch.testing.assert_close(h(x.to("ember"), target).cpu(), f(x, target.cpu()))
    finally:
        torch_ember.set_fallback_mode(old)
