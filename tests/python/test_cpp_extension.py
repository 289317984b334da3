"""An ahead-of-time C++ extension (examples/cpp_extension/scaled_add.cc) built against
<torch_ember/extension.h> with torch.utils.cpp_extension: its ember kernel is queued on the
current stream, splits its work over the device's threads, matches its CPU kernel, works under
autograd (a registered backward) and in a compiled graph, and a failure it returns is raised at
the next synchronizing call naming the kernel."""
from pathlib import Path

import pytest
import torch

import torch_ember

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scaled_add(tmp_path_factory):
    from torch.utils.cpp_extension import load

    load(name="ember_example_ext", sources=[str(ROOT / "examples" / "cpp_extension" / "scaled_add.cc")],
         extra_include_paths=[torch_ember.get_include()], extra_cflags=["-O2"],
         build_directory=str(tmp_path_factory.mktemp("ext")), verbose=False)
    return torch.ops.ember_example.scaled_add


def test_ember_kernel_matches_cpu_and_runs_in_stream_order(scaled_add):
    a, b = torch.randn(3, 70000), torch.randn(3, 70000)
    want = scaled_add(a, b, 0.5)
    torch.testing.assert_close(want, a + 0.5 * b)
    ae, b_dev = a.to("ember"), b.to("ember")  # copies from pageable memory may wait for the stream
    torch.ember._sleep(300)
    be = b_dev * 1  # queued after the sleep: the kernel must wait for it
    got = scaled_add(ae, be, 0.5)
    assert not torch.ember.current_stream().query(), "the extension kernel ran at the call"
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(scaled_add(ae.t(), be.t(), -2.0).cpu(), a.t() - 2.0 * b.t())


def test_a_kernel_failure_is_raised_at_the_next_sync_naming_it(scaled_add):
    x = torch.ones(8, device="ember")
    y = scaled_add(x, x, float("inf"))
    with pytest.raises(RuntimeError, match="ember_example::scaled_add: alpha must be finite"):
        y.cpu()
    torch.testing.assert_close(scaled_add(x, x, 1.0).cpu(), torch.full((8,), 2.0))


def test_argument_errors_are_raised_at_the_call(scaled_add):
    with pytest.raises(RuntimeError, match="scaled_add: shapes differ"):
        scaled_add(torch.ones(2, device="ember"), torch.ones(3, device="ember"), 1.0)


def test_autograd_and_compiled_graph(scaled_add):
    def backward(ctx, g):
        return g, g * ctx.alpha, None

    def setup(ctx, inputs, output):
        ctx.alpha = inputs[2]

    torch.library.register_autograd("ember_example::scaled_add", backward, setup_context=setup)
    torch.library.register_fake("ember_example::scaled_add")(lambda a, b, alpha: torch.empty_like(a))
    a = torch.randn(64, device="ember", requires_grad=True)
    b = torch.randn(64, device="ember", requires_grad=True)
    f = torch.compile(lambda a, b: (scaled_add(a, b, 3.0) * a).sum(), backend="ember", fullgraph=True)
    f(a, b).backward()
    ac, bc = a.detach().cpu().requires_grad_(), b.detach().cpu().requires_grad_()
    ((ac + 3.0 * bc) * ac).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ac.grad)
    torch.testing.assert_close(b.grad.cpu(), bc.grad)
