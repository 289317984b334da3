"""Seeding, RNG state and generators of the ember device.

Random ops fall back to the CPU with a generator derived from the ember generator's
(seed, offset) state, so seeding and state save/restore must behave as on CUDA."""
import struct

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _restore_rng():
    """Tests reseed the global generators; leave them as they were found."""
    states = torch.ember.get_rng_state_all()
    cpu_state = torch.get_rng_state()
    yield
    torch.ember.set_rng_state_all(states)
    torch.set_rng_state(cpu_state)


def _state(device="ember"):
    s = torch.ember.get_rng_state(device)
    seed, offset = struct.unpack("<QQ", bytes(s.tolist()))
    return seed, offset


DRAWS = {
    "randn": lambda g=None: torch.randn(64, device="ember", generator=g),
    "rand": lambda g=None: torch.rand(64, device="ember", generator=g),
    "randint": lambda g=None: torch.randint(0, 1000, (64,), device="ember", generator=g),
    "randperm": lambda g=None: torch.randperm(64, device="ember", generator=g),
    "normal_": lambda g=None: torch.empty(64, device="ember").normal_(2.0, 3.0, generator=g),
    "uniform_": lambda g=None: torch.empty(64, device="ember").uniform_(-1, 1, generator=g),
    "bernoulli": lambda g=None: torch.bernoulli(torch.full((64,), 0.5, device="ember"), generator=g),
    "multinomial": lambda g=None: torch.multinomial(torch.ones(64, device="ember"), 32,
                                                    generator=g),
}


def _dropout(g=None):
    return F.dropout(torch.ones(256, device="ember"), p=0.5, training=True)


# --- seeds ------------------------------------------------------------------------------------

def test_manual_seed_and_initial_seed():
    torch.ember.manual_seed(1234)
    assert torch.ember.initial_seed() == 1234
    assert _state() == (1234, 0)
    torch.ember.manual_seed(2**63 + 5)  # full uint64 range
    assert torch.ember.initial_seed() == 2**63 + 5


def test_manual_seed_only_seeds_current_device():
    torch.ember.manual_seed_all(1)
    torch.ember.manual_seed(99)
    assert _state(0) == (99, 0)
    assert _state(1) == (1, 0)
    with torch.ember.device(1):
        torch.ember.manual_seed(77)
        assert torch.ember.initial_seed() == 77
    assert _state(0) == (99, 0)
    assert _state(1) == (77, 0)


def test_manual_seed_all():
    torch.ember.manual_seed_all(4321)
    for i in range(torch.ember.device_count()):
        assert _state(i) == (4321, 0)
        assert _state(f"ember:{i}") == (4321, 0)


def test_seed_picks_a_new_random_seed():
    torch.ember.manual_seed(0)
    seeds = set()
    for _ in range(3):
        torch.ember.seed()
        seeds.add(torch.ember.initial_seed())
        assert _state()[1] == 0
    assert len(seeds) == 3 and 0 not in seeds


def test_seed_all_gives_every_device_the_same_seed():
    torch.ember.seed_all()
    seeds = {_state(i)[0] for i in range(torch.ember.device_count())}
    assert len(seeds) == 1


def test_torch_manual_seed_also_seeds_ember():
    torch.manual_seed(2024)
    for i in range(torch.ember.device_count()):
        assert _state(i) == (2024, 0)
    a = torch.randn(16, device="ember")
    torch.manual_seed(2024)
    torch.testing.assert_close(torch.randn(16, device="ember"), a, rtol=0, atol=0)


# --- state ------------------------------------------------------------------------------------

def test_get_rng_state_layout():
    torch.ember.manual_seed(0x0102030405060708)
    s = torch.ember.get_rng_state()
    assert s.dtype == torch.uint8 and s.device.type == "cpu" and s.shape == (16,)
    assert s.tolist() == [8, 7, 6, 5, 4, 3, 2, 1] + [0] * 8
    # The returned tensor is a copy: changing it does not change the generator.
    s.fill_(0)
    assert _state() == (0x0102030405060708, 0)


def test_offset_advances_after_random_op():
    torch.ember.manual_seed(3)
    _, off0 = _state()
    torch.randn(10, device="ember")
    seed, off1 = _state()
    assert seed == 3 and off1 > off0
    torch.rand(10, device="ember")
    assert _state()[1] > off1


def test_set_rng_state_restores_stream():
    torch.ember.manual_seed(17)
    torch.randn(5, device="ember")
    state = torch.ember.get_rng_state()
    a = torch.randn(100, device="ember")
    torch.randn(7, device="ember")
    torch.ember.set_rng_state(state)
    b = torch.randn(100, device="ember")
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_set_rng_state_arbitrary_state():
    state = torch.tensor(list(struct.pack("<QQ", 555, 4096)), dtype=torch.uint8)
    torch.ember.set_rng_state(state)
    assert _state() == (555, 4096)
    a = torch.rand(8, device="ember")
    torch.ember.set_rng_state(state)
    torch.testing.assert_close(torch.rand(8, device="ember"), a, rtol=0, atol=0)


def test_set_rng_state_per_device_and_all():
    torch.ember.manual_seed_all(8)
    states = torch.ember.get_rng_state_all()
    assert len(states) == torch.ember.device_count()
    a0 = torch.randn(4, device="ember:0")
    a1 = torch.randn(4, device="ember:1")
    torch.ember.set_rng_state_all(states)
    torch.testing.assert_close(torch.randn(4, device="ember:0"), a0, rtol=0, atol=0)
    torch.testing.assert_close(torch.randn(4, device="ember:1"), a1, rtol=0, atol=0)


def test_draw_on_one_device_advances_only_that_device():
    torch.ember.manual_seed_all(9)
    torch.randn(4, device="ember:1")
    assert _state(0) == (9, 0)
    assert _state(1)[1] > 0


@pytest.mark.parametrize("bad, err, match", [
    (torch.zeros(16, dtype=torch.float32), TypeError, "ByteTensor"),
    (torch.zeros(8, dtype=torch.uint8), RuntimeError, "16 bytes"),
])
def test_set_rng_state_rejects_bad_state(bad, err, match):
    with pytest.raises(err, match=match):
        torch.ember.set_rng_state(bad)


# --- reproducibility --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(DRAWS))
def test_same_seed_same_values(name):
    draw = DRAWS[name]
    torch.ember.manual_seed(42)
    a = draw()
    torch.ember.manual_seed(42)
    b = draw()
    assert a.device.type == "ember"
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["randn", "rand", "randint", "randperm"])
def test_different_seeds_differ(name):
    draw = DRAWS[name]
    torch.ember.manual_seed(1)
    a = draw().cpu()
    torch.ember.manual_seed(2)
    b = draw().cpu()
    assert not torch.equal(a, b)


@pytest.mark.parametrize("name", ["randn", "rand", "randint"])
def test_consecutive_draws_differ(name):
    draw = DRAWS[name]
    torch.ember.manual_seed(1)
    assert not torch.equal(draw().cpu(), draw().cpu())


def test_dropout_reproducible():
    # dropout on a device runs aten::native_dropout, which takes no generator argument: it must
    # still draw from the ember default generator, not from the CPU one.
    torch.ember.manual_seed(5)
    a = _dropout()
    torch.ember.manual_seed(5)
    b = _dropout()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    vals = set(a.cpu().unique().tolist())
    assert vals == {0.0, 2.0}
    torch.ember.manual_seed(6)
    assert not torch.equal(_dropout().cpu(), a.cpu())


def test_random_values_have_expected_distribution():
    torch.ember.manual_seed(0)
    n = torch.randn(20000, device="ember").cpu()
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1) < 0.05
    u = torch.rand(20000, device="ember").cpu()
    assert u.min().item() >= 0 and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.02
    p = torch.randperm(100, device="ember").cpu()
    assert sorted(p.tolist()) == list(range(100))
    r = torch.randint(3, 7, (1000,), device="ember").cpu()
    assert set(r.tolist()) == {3, 4, 5, 6}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_normal_draws_follow_the_normal_distribution(dtype):
    """Quantiles, moments and tails of 400K draws against the exact normal distribution (the
    float path pairs both Box-Muller outputs, computed in float as the CPU's kernel does)."""
    torch.ember.manual_seed(1)
    x = (torch.randn(400_000, device="ember", dtype=dtype) * 2 + 3).double().cpu()
    z = (x - 3) / 2
    normal = torch.distributions.Normal(0.0, 1.0)
    probs = torch.tensor([0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999], dtype=torch.float64)
    tol = 0.03 if dtype == torch.bfloat16 else 0.02  # bfloat16 rounds each value to 8 bits
    torch.testing.assert_close(torch.quantile(z[:100_000].float(), probs.float()).double(),
                               normal.icdf(probs), atol=tol, rtol=0.02)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(z.pow(3).mean()) < 0.03 and abs(z.pow(4).mean() - 3) < 0.05
    assert z.abs().max() > 4  # the tails are there


def test_normal_draws_depend_on_position_only_and_calls_are_independent():
    """A strided output gets the values a contiguous one gets; consecutive small draws share no
    random bits (each call reserves every draw it reads)."""
    torch.ember.manual_seed(2)
    dense = torch.empty(37, 5, device="ember").normal_().cpu()
    torch.ember.manual_seed(2)
    strided = torch.empty(5, 37, device="ember").t().normal_().cpu()
    assert torch.equal(dense, strided)
    torch.ember.manual_seed(3)
    draws = torch.stack([torch.randn(5, device="ember").cpu() for _ in range(4000)])
    pairs = torch.cat([draws[:-1], draws[1:]], 1).T
    corr = torch.corrcoef(pairs) - torch.eye(10)
    assert corr.abs().max() < 0.07  # 4.4 standard errors for 4000 samples


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_draws_stay_inside_their_range(dtype):
    # Rounding a float draw to bfloat16 reached 1.0 about once in 500: rand() gave 1.0,
    # bernoulli(p=1) gave 0 and exponential_ gave inf. The draws now have the dtype's own
    # resolution, as PyTorch's CPU kernels do.
    torch.ember.manual_seed(0)
    n = 200_000
    u = torch.rand(n, device="ember", dtype=dtype).cpu()
    assert u.max().item() < 1 and u.min().item() >= 0
    assert torch.bernoulli(torch.ones(n, device="ember", dtype=dtype)).cpu().eq(1).all()
    e = torch.empty(n, device="ember", dtype=dtype).exponential_().float().cpu()
    assert torch.isfinite(e).all() and e.min().item() >= 0
    assert e.max().item() > 8  # the tail goes on past 8 * ln 2, where 8-bit draws would stop
    assert abs(e.mean().item() - 1) < 0.02
    c = torch.compile(torch.rand_like, backend="ember")(torch.zeros(n, device="ember", dtype=dtype)).cpu()
    assert c.max().item() < 1


def test_cauchy_log_normal_and_geometric_fills_are_native(native_only):
    # They ran on the CPU, drawing from its generator instead of ember's.
    n = 100_000
    g = torch.Generator(device="ember").manual_seed(3)
    c = torch.empty(n, device="ember").cauchy_(1.0, 2.0, generator=g).cpu()
    q = torch.sort(c).values
    assert abs(q[n // 2].item() - 1.0) < 0.05 and abs((q[3 * n // 4] - q[n // 4]).item() / 2 - 2.0) < 0.1
    logs = torch.empty(n, device="ember").log_normal_(0.5, 0.3).cpu().log()
    assert abs(logs.mean().item() - 0.5) < 0.01 and abs(logs.std().item() - 0.3) < 0.01
    for dtype in (torch.float32, torch.int64):
        k = torch.empty(n, device="ember", dtype=dtype).geometric_(0.3).cpu()
        assert k.min().item() >= 1 and abs(k.float().mean().item() - 1 / 0.3) < 0.05
    g.manual_seed(3)
    torch.testing.assert_close(torch.empty(n, device="ember").cauchy_(1.0, 2.0, generator=g).cpu(), c)


def test_complex_normal_draws_half_the_variance_per_part(native_only):
    # As on the CPU: torch.randn(cfloat) has E|z|^2 = 1, each part variance 1/2.
    z = torch.randn(200_000, dtype=torch.cfloat, device="ember").cpu()
    for part in (z.real, z.imag):
        assert abs(part.mean().item()) < 0.01 and abs(part.var().item() - 0.5) < 0.01
    w = torch.empty(100_000, dtype=torch.cdouble, device="ember").normal_(2.0, 3.0).cpu()
    for part in (w.real, w.imag):
        assert abs(part.mean().item() - 2.0) < 0.03 and abs(part.var().item() - 4.5) < 0.1


def test_cauchy_and_geometric_keep_the_cpus_errors():
    with pytest.raises(RuntimeError, match="continuous probability distribution"):
        torch.empty(3, dtype=torch.int64, device="ember").cauchy_()
    with pytest.raises(RuntimeError, match=r"expects p to be in \(0, 1\)"):
        torch.empty(3, device="ember").geometric_(1.5)


def test_devices_with_same_seed_draw_same_values():
    torch.ember.manual_seed_all(12)
    a = torch.randn(8, device="ember:0")
    b = torch.randn(8, device="ember:1")
    assert b.device == torch.device("ember:1")
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


# --- explicit generators ----------------------------------------------------------------------

def test_generator_on_ember():
    g = torch.Generator(device="ember")
    assert g.device.type == "ember"
    g.manual_seed(3)
    assert g.initial_seed() == 3
    s = g.get_state()
    assert s.dtype == torch.uint8 and s.numel() == 16


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_generator_argument_reproducible_and_leaves_default_alone(name):
    draw = DRAWS[name]
    torch.ember.manual_seed(100)
    default_before = torch.ember.get_rng_state()
    g = torch.Generator(device="ember")
    g.manual_seed(7)
    a = draw(g)
    assert g.get_state()[8:].any(), "the explicit generator's offset must advance"
    g.manual_seed(7)
    b = draw(g)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.equal(torch.ember.get_rng_state(), default_before)


def test_generator_state_roundtrip_and_clone():
    g = torch.Generator(device="ember").manual_seed(11)
    torch.randn(3, device="ember", generator=g)
    state = g.get_state()
    a = torch.randn(10, device="ember", generator=g)
    g2 = torch.Generator(device="ember")
    g2.set_state(state)
    torch.testing.assert_close(torch.randn(10, device="ember", generator=g2), a, rtol=0, atol=0)
    g.set_state(state)
    g3 = g.clone_state()
    torch.testing.assert_close(torch.randn(10, device="ember", generator=g3), a, rtol=0, atol=0)


def test_generator_matches_default_with_same_seed():
    torch.ember.manual_seed(21)
    a = torch.randn(10, device="ember")
    g = torch.Generator(device="ember").manual_seed(21)
    torch.testing.assert_close(torch.randn(10, device="ember", generator=g), a, rtol=0, atol=0)


def test_cpu_generator_rejected_for_ember_tensor():
    # As on CUDA ("Expected a 'cuda' device type for generator but found 'cpu'"): a CPU
    # generator cannot drive a draw into an ember tensor.
    g = torch.Generator().manual_seed(0)
    with pytest.raises(RuntimeError, match=r"(?i)cpu.*generator|generator.*cpu"):
        torch.randn(4, device="ember", generator=g)


# --- fork_rng ---------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:EMBER reports that you have")
def test_fork_rng_restores_state():
    torch.ember.manual_seed(31)
    before = torch.ember.get_rng_state()
    with torch.random.fork_rng(device_type="ember"):
        torch.randn(10, device="ember")
        torch.ember.manual_seed(1)
        torch.randn(10, device="ember")
    assert torch.equal(torch.ember.get_rng_state(), before)
    a = torch.randn(10, device="ember")
    torch.ember.set_rng_state(before)
    torch.testing.assert_close(torch.randn(10, device="ember"), a, rtol=0, atol=0)


def test_fork_rng_restores_every_device():
    torch.ember.manual_seed_all(32)
    before = torch.ember.get_rng_state_all()
    with torch.random.fork_rng(devices=list(range(torch.ember.device_count())),
                               device_type="ember"):
        torch.randn(4, device="ember:0")
        torch.randn(4, device="ember:1")
    for b, a in zip(before, torch.ember.get_rng_state_all()):
        assert torch.equal(a, b)


# --- native kernels -------------------------------------------------------------------------------

def test_random_ops_run_natively_and_reproduce():
    import torch_ember

    torch_ember.reset_fallback_stats()
    torch.ember.manual_seed(123)
    state = torch.ember.get_rng_state()
    a = (torch.rand(1000, device="ember"), torch.randn(1000, device="ember"),
         torch.empty(1000, device="ember").bernoulli_(0.25),
         torch.nn.functional.dropout(torch.ones(1000, device="ember"), 0.4))
    torch.ember.set_rng_state(state)
    b = (torch.rand(1000, device="ember"), torch.randn(1000, device="ember"),
         torch.empty(1000, device="ember").bernoulli_(0.25),
         torch.nn.functional.dropout(torch.ones(1000, device="ember"), 0.4))
    for x, y in zip(a, b):
        assert torch.equal(x.cpu(), y.cpu())
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    drop = a[3].cpu()
    kept = drop[drop != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1.0 / 0.6))
    assert abs((drop == 0).float().mean().item() - 0.4) < 0.08


def test_dropout_backward_uses_the_same_mask():
    x = torch.randn(64, 32, device="ember", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5)
    y.sum().backward()
    kept = (y.detach() != 0).cpu()
    torch.testing.assert_close(x.grad.cpu(), kept.float() * 2.0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bfloat16])
def test_randint_and_randperm_run_natively(dtype):
    import torch_ember

    torch_ember.reset_fallback_stats()
    torch.ember.manual_seed(5)
    low, high = (0, 200) if dtype in (torch.uint8, torch.bfloat16) else (-1000, 1000)
    a = torch.randint(low, high, (4096,), device="ember", dtype=dtype)
    b = torch.empty(64, device="ember", dtype=dtype).random_(7)
    perm = torch.randperm(5000, device="ember")
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    a = a.cpu().double()
    assert a.min() >= low and a.max() < high and len(a.unique()) > 0.5 * min(high - low, 4096) ** 0.5
    assert set(b.cpu().long().tolist()) <= set(range(7))
    assert sorted(perm.cpu().tolist()) == list(range(5000))


def test_randint_wide_range_and_bad_bounds():
    r = torch.randint(-(2**62), 2**62, (1000,), device="ember").cpu()
    assert r.min() >= -(2**62) and r.max() < 2**62 and r.abs().max() > 2**40
    with pytest.raises(RuntimeError, match="from.*less than.*to"):
        torch.empty(3, device="ember", dtype=torch.int64).random_(5, 5)


def test_bernoulli_with_probability_tensor_and_exponential_run_natively(native_only):
    # Statistics, not values: ember's random stream is its own (as CUDA's is).
    torch.manual_seed(0)
    p = torch.linspace(0.05, 0.95, 10).repeat_interleave(4000)
    draws = torch.bernoulli(p.to("ember")).cpu()
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(draws.view(10, -1).mean(1), p.view(10, -1)[:, 0], atol=0.03, rtol=0)
    with pytest.raises(RuntimeError, match="p must be in"):
        torch.empty(3, device="ember").bernoulli_(torch.tensor([0.5, 1.5, 0.2], device="ember"))
        torch.ember.synchronize()
    torch.ember.synchronize()
    e = torch.empty(40000, device="ember").exponential_(2.0).cpu()
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.02 and abs(e.std().item() - 0.5) < 0.03
    hard = torch.nn.functional.gumbel_softmax(torch.randn(8, 5, device="ember"), tau=0.5, hard=True).cpu()
    assert torch.equal(hard.sum(-1), torch.ones(8)) and set(hard.unique().tolist()) == {0.0, 1.0}


def test_multinomial_draws_with_and_without_replacement(native_only):
    torch.manual_seed(0)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]])
    d = torch.multinomial(p.to("ember"), 20000, replacement=True).cpu()
    assert d.dtype == torch.int64 and d.shape == (2, 20000)
    freq = torch.stack([torch.bincount(r, minlength=4).float() / 20000 for r in d])
    torch.testing.assert_close(freq, p / p.sum(-1, keepdim=True), atol=0.02, rtol=0)
    w = torch.stack([torch.multinomial(p[0].to("ember"), 3) for _ in range(3000)]).cpu()
    assert all(len(set(r.tolist())) == 3 for r in w)  # without replacement
    second = torch.bincount(w[:, 1], minlength=4).float() / 3000
    expected = torch.tensor([sum(p[0, i] * p[0, j] / (1 - p[0, i]) for i in range(4) if i != j) for j in range(4)])
    torch.testing.assert_close(second, expected, atol=0.03, rtol=0)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p.to("ember"), 5)
    with pytest.raises(RuntimeError, match="element < 0"):
        torch.multinomial(torch.tensor([-1.0, 1.0], device="ember"), 1)
        torch.ember.synchronize()
    torch.ember.synchronize()


def test_random_and_uniform_bounds_are_checked_as_on_the_cpu():
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.zeros(10, dtype=torch.int8, device="ember").random_(0, 1000)
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.zeros(10, dtype=torch.bool, device="ember").random_(-42, 1)
    with pytest.raises(RuntimeError, match="to-from"):
        torch.zeros(10, dtype=torch.float64, device="ember").uniform_(-1.7e308, 1.7e308)
    r = torch.zeros(5000, dtype=torch.int8, device="ember").random_(-100, 120).cpu()
    assert r.min().item() >= -100 and r.max().item() < 120
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.rand(1, device="ember").expand(6).bernoulli_(0.3)


def test_gamma_samples_match_the_distribution(native_only):
    # Mean a and variance a of Gamma(a, 1), for alphas below 1 (the boosted branch), at 1 and large.
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        alpha = torch.tensor([0.05, 0.5, 1.0, 3.0, 250.0], dtype=dtype).repeat_interleave(40000).view(5, -1)
        x = torch._standard_gamma(alpha.to("ember")).cpu()
        assert x.dtype == dtype and (x > 0).all()
        a = alpha[:, 0]
        torch.testing.assert_close(x.mean(1), a, rtol=0.03, atol=0.002)
        torch.testing.assert_close(x.var(1), a, rtol=0.05, atol=0.002)
    # A strided alpha, and the same numbers again from the same seed.
    alpha = torch.rand(6, 8, device="ember").t() + 0.5
    torch.manual_seed(3)
    first = torch._standard_gamma(alpha)
    torch.manual_seed(3)
    assert torch.equal(first.cpu(), torch._standard_gamma(alpha).cpu())
    # The CPU's floor (0 and NaN concentrations give the smallest normal number) and inf.
    edge = torch._standard_gamma(torch.tensor([0.0, float("nan"), 1e-30, float("inf")], device="ember")).cpu()
    tiny = torch.finfo(torch.float32).tiny
    assert edge[:3].tolist() == [tiny] * 3 and edge[3].item() == float("inf")


def test_poisson_samples_match_the_distribution(native_only):
    # Mean and variance rate on both sides of the algorithm switch at 10 (product of uniforms below,
    # transformed rejection from there), integers only, a seed repeats them.
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        rate = torch.tensor([0.0, 0.3, 3.0, 9.9, 10.0, 57.0, 1e4], dtype=dtype).repeat_interleave(40000).view(7, -1)
        x = torch.poisson(rate.to("ember")).cpu()
        assert x.dtype == dtype and torch.equal(x, x.round()) and (x >= 0).all()
        r = rate[:, 0].double()
        torch.testing.assert_close(x.double().mean(1), r, rtol=0.01, atol=0.01)
        torch.testing.assert_close(x.double().var(1), r, rtol=0.05, atol=0.01)
    torch.manual_seed(3)
    first = torch.distributions.Poisson(torch.tensor([2.0, 20.0], device="ember")).sample((100,))
    torch.manual_seed(3)
    assert torch.equal(first.cpu(), torch.distributions.Poisson(torch.tensor([2.0, 20.0], device="ember")).sample((100,)).cpu())
    assert torch.poisson(torch.tensor([float("inf")], device="ember")).item() == float("inf")
    with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
        torch.poisson(torch.tensor([1.0, -1.0], device="ember")).cpu()
    torch.ember.synchronize()


def test_gamma_keeps_the_cpus_dtype_refusal():
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        torch._standard_gamma(torch.ones(3, dtype=torch.bfloat16, device="ember"))


def test_gamma_sample_gradient_is_the_exact_reparameterization(native_only):
    # d x / d a at a fixed CDF value, against a central difference of the float64 quantile
    # relation P(a, x) = u solved by Newton's method on the CPU.
    alpha = torch.tensor([0.05, 0.3, 0.9, 1.0, 2.5, 7.9, 30.0, 500.0], dtype=torch.float64).repeat_interleave(50)
    torch.manual_seed(1)
    x = torch._standard_gamma(alpha)
    got = torch._standard_gamma_grad(alpha.to("ember"), x.to("ember")).cpu()

    def quantile(a, u, x0):
        x = x0.clone()
        for _ in range(60):
            f = torch.special.gammainc(a, x) - u
            dens = torch.exp((a - 1) * torch.log(x) - x - torch.lgamma(a))
            x = (x - f / dens).clamp_min(x / 4)
        return x
    u = torch.special.gammainc(alpha, x)
    h = 1e-6 * alpha
    ref = (quantile(alpha + h, u, x) - quantile(alpha - h, u, x)) / (2 * h)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-12)
    # Gamma.rsample's backward runs on the device, in float32 too, close to the CPU's formula.
    conc = torch.tensor([0.4, 2.0, 9.0], requires_grad=True)
    ce = conc.detach().to("ember").requires_grad_()
    torch.manual_seed(2)
    s = torch.distributions.Gamma(ce, 1.0).rsample((4000,))
    s.sum().backward()
    cpu_grad = torch._standard_gamma_grad(conc.detach().expand(4000, 3), s.detach().cpu()).sum(0)
    torch.testing.assert_close(ce.grad.cpu(), cpu_grad, rtol=2e-3, atol=1e-3)


def test_dirichlet_and_beta_samples_run_natively(native_only):
    torch.manual_seed(0)
    conc = torch.tensor([[0.3, 1.0, 4.0], [1e-4, 1e-4, 1e-4]], dtype=torch.float32)
    d = torch._sample_dirichlet(conc.to("ember").repeat(5000, 1)).cpu().view(5000, 2, 3)
    assert d.dtype == torch.float32 and (d > 0).all() and (d < 1).all()
    torch.testing.assert_close(d.sum(-1), torch.ones(5000, 2), rtol=0, atol=1e-6)
    torch.testing.assert_close(d[:, 0].mean(0), conc[0] / conc[0].sum(), rtol=0.03, atol=0.005)
    b = torch.distributions.Beta(torch.tensor(2.0, device="ember"), torch.tensor(5.0, device="ember")).sample((20000,))
    assert b.device.type == "ember" and abs(b.mean().item() - 2 / 7) < 0.01
    w = torch.distributions.Dirichlet(torch.ones(4, device="ember", dtype=torch.float64)).sample((3,))
    assert w.dtype == torch.float64 and torch.allclose(w.sum(-1).cpu(), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("dtype,low,high", [
    (torch.bfloat16, 100, 101), (torch.bfloat16, 2, 3), (torch.float16, 2, 3), (torch.bfloat16, -3, -2),
    (torch.float32, 1e7, 1e7 + 1), (torch.float16, 1, 2)])
def test_uniform_stays_below_its_upper_bound_in_the_dtype(dtype, low, high):
    # Where the dtype's spacing is coarser than the random bits, rounding to nearest would
    # return `high` (a quarter of bfloat16 uniform_(100, 101)); the CPU never does, and draws
    # every value of the dtype in [low, high).
    got = torch.empty(200_000, dtype=dtype, device="ember").uniform_(low, high).cpu()
    cpu = torch.empty(200_000, dtype=dtype).uniform_(low, high)
    assert got.min() >= low and got.max() < high
    assert set(torch.unique(got).tolist()) == set(torch.unique(cpu).tolist())


def test_double_random_numbers_have_53_random_bits():
    x = torch.rand(1_000_000, dtype=torch.float64, device="ember").cpu()
    assert x.unique().numel() == x.numel()  # 24 bits would repeat about 30,000 values
    on_float_grid = (x * 2**24 == torch.floor(x * 2**24)).sum().item()
    assert on_float_grid < 10, on_float_grid  # about 1e6 / 2**29 by chance
    n = torch.randn(1_000_000, dtype=torch.float64, device="ember").cpu()
    assert n.unique().numel() == n.numel()
    assert abs(n.mean().item()) < 5e-3 and abs(n.std().item() - 1) < 5e-3


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_random_integers_of_storage_only_unsigned_dtypes_work_as_on_the_cpu(dtype):
    """uint16/32/64 have no ember kernels; their random draws take the CPU's, bounds checks included."""
    x = torch.randint(0, 100, (1000,), dtype=dtype, device="ember")
    assert x.dtype == dtype and x.device.type == "ember"
    values = x.cpu().long()
    assert values.min() >= 0 and values.max() < 100 and values.unique().numel() > 50
    y = torch.empty(1000, dtype=dtype, device="ember").random_(3, 10)
    assert y.cpu().long().min() >= 3 and y.cpu().long().max() < 10
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        torch.empty(4, dtype=dtype, device="ember").random_(0, -1)


def test_multinomial_refuses_more_than_2_to_the_24_categories_like_cpu():
    for device in ("cpu", "ember"):
        with pytest.raises(RuntimeError, match=r"number of categories cannot exceed 2\^24"):
            torch.multinomial(torch.ones(2**24 + 1, device=device), 2)
