"""Dynamic shapes in compiled graphs: what a new input signature's first call does (more in
test_compile.py's specialization tests)."""
import pytest
import torch
import torch_ember


def test_an_op_without_an_ember_kernel_fails_at_the_first_call_of_a_new_size(fresh_compile):
    """A signature's first call runs eagerly; when an op there takes the CPU fallback, the
    signature compiles at once, so an untranslatable op fails the compile at that call (as in a
    static graph), not one step later after a step that worked."""
    def f(x, lengths):
        return torch.segment_reduce(x, "sum", lengths=lengths, axis=0).sum() * 2

    lengths = torch.tensor([3, 3, 4], device="ember")
    g = torch.compile(f, backend="ember", dynamic=True)
    old = torch_ember.set_fallback_mode("silent")
    try:
        for _ in range(2):
            with pytest.raises(torch_ember.CompileError, match="aten.segment_reduce.default"):
                g(torch.randn(10, 3, device="ember"), lengths)
        # With the eager fallback option the graph runs, and matches the CPU.
        torch._dynamo.reset()
        h = torch.compile(f, backend="ember", dynamic=True, options={"fallback": "eager"})
        x = torch.randn(10, 3)
        for _ in range(2):
            torch.testing.assert_close(h(x.to("ember"), lengths).cpu(), f(x, lengths.cpu()))
    finally:
        torch_ember.set_fallback_mode(old)
