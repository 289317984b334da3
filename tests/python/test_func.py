"""torch.func transforms and torch.export on ember models, natively, against the CPU."""
import copy

import pytest
import torch
from torch.func import functional_call, grad, hessian, jacrev, vmap

import torch_ember  # noqa: F401


@pytest.fixture
def models():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return m, copy.deepcopy(m).to("ember"), torch.randn(5, 4)


def _loss(params, model, x):
    return functional_call(model, params, (x,)).square().sum()


TRANSFORMS = {
    "grad": lambda mod, x: grad(_loss)(dict(mod.named_parameters()), mod, x),
    "vmap_grad": lambda mod, x: vmap(grad(lambda xi: mod(xi).sum()))(x),
    "jacrev": lambda mod, x: jacrev(lambda xi: mod(xi))(x[0]),
    "hessian": lambda mod, x: hessian(lambda xi: mod(xi).sum())(x[0]),
    "per_sample_grads": lambda mod, x: vmap(grad(_loss), in_dims=(None, None, 0))(dict(mod.named_parameters()),
                                                                                   mod, x[:, None]),
}


def _flat(t):
    return torch.cat([v.flatten().cpu() for v in (t.values() if isinstance(t, dict) else [t])])


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_func_transform_matches_cpu(name, models, native_only):
    m, me, x = models
    torch.testing.assert_close(_flat(TRANSFORMS[name](me, x.to("ember"))), _flat(TRANSFORMS[name](m, x)),
                               rtol=1e-5, atol=1e-5)


def test_export_runs_on_ember(models):
    m, me, x = models
    ep = torch.export.export(me, (x.to("ember"),))
    torch.testing.assert_close(ep.module()(x.to("ember")).cpu(), m(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "grad", "vmap_compiled"])
def test_attention_under_func_transforms(transform, native_only):
    # Ensembles and per-sample gradients of attention models: the fused attention op has no
    # batching rule, so under torch.func the math path runs.
    import torch.nn.functional as F

    q = torch.randn(3, 2, 4, 5, 8, generator=torch.Generator().manual_seed(0))

    def attend(t):
        return F.scaled_dot_product_attention(t, t.flip(-1), t, is_causal=True)

    def loss(t):
        return attend(t).square().sum()

    fn = {"vmap": vmap(attend), "vmap_grad": vmap(grad(loss)), "grad": grad(loss),
          "vmap_compiled": torch.compile(vmap(attend), backend="ember")}[transform]
    x = q[0] if transform == "grad" else q
    torch.testing.assert_close(fn(x.to("ember")).cpu(), fn(x) if transform != "vmap_compiled" else vmap(attend)(x),
                               rtol=1e-4, atol=1e-5)


def test_attention_vmapped_over_the_mask_alone(native_only):
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 2, 4, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    masks = torch.randn(3, 4, 5, generator=g)

    def attend(q, k, m):
        return vmap(lambda mm: F.scaled_dot_product_attention(q, k, k, attn_mask=mm))(m)

    torch.testing.assert_close(attend(q.to("ember"), k.to("ember"), masks.to("ember")).cpu(), attend(q, k, masks),
                               rtol=1e-4, atol=1e-5)
