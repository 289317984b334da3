"""One rank of a test_distributed.py case: `python _dist_worker.py CASE RANK WORLD STORE_PATH`, or
`python _dist_worker.py CASE env` under torchrun (test_distributed_hosts.py).

Each case is a function below; it asserts and exits 0, or raises (non-zero exit, traceback on
stderr). Kept out of pytest's collection (no test_ prefix) so it runs only in child processes.
"""
import datetime
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch_ember  # noqa: F401 - registers the ember device and the "ember" c10d backend

warnings.filterwarnings("ignore")
TIMEOUT = datetime.timedelta(seconds=30)
RANK = WORLD = 0
STORE = ""


def init(backend="ember", suffix="", **kw):
    if STORE == "env":  # started by torchrun: its rendezvous gives the rank, size and address
        dist.init_process_group(backend, timeout=kw.pop("timeout", TIMEOUT), **kw)
        return
    store = dist.FileStore(STORE + suffix, WORLD)
    dist.init_process_group(backend, store=store, rank=RANK, world_size=WORLD,
                            timeout=kw.pop("timeout", TIMEOUT), **kw)


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) + 2).to(dtype)


def same(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert torch.equal(got, want), f"{what}: rank {RANK}\n got {got}\nwant {want}"


# ---------------------------------------------------------------------------------------------
def case_collectives():
    """Every collective on ember tensors against Gloo on CPU tensors, float32 and bfloat16."""
    init()
    ref = dist.new_group(backend="gloo")
    W, R = WORLD, RANK
    E = "ember"
    for dtype in (torch.float32, torch.bfloat16):
        tag = str(dtype).split(".")[-1]
        x = rand((5, 3), dtype, 100 + R)

        # all_reduce, every op; AVG and PREMUL_SUM (Gloo has neither) against SUM then scale.
        for name in ("SUM", "MIN", "MAX", "PRODUCT"):
            op = getattr(dist.ReduceOp, name)
            e, c = x.to(E), x.clone()
            dist.all_reduce(e, op=op)
            dist.all_reduce(c, op=op, group=ref)
            same(e, c, f"all_reduce {name} {tag}")
        e, c = x.to(E), x.clone()
        dist.all_reduce(e, op=dist.ReduceOp.AVG)
        dist.all_reduce(c, group=ref)
        same(e, c / W, f"all_reduce AVG {tag}")
        e, c = x.to(E), x.clone() * 0.25
        dist.all_reduce(e, op=dist._make_nccl_premul_sum(0.25))
        dist.all_reduce(c, group=ref)
        same(e, c, f"all_reduce PREMUL_SUM {tag}")

        # async work: wait() and get_future() both deliver the reduced tensor.
        e = x.to(E)
        work = dist.all_reduce(e, async_op=True)
        fut_value = work.get_future().wait()  # orders the stream, as NCCL's future does
        work.wait()
        c = x.clone()
        dist.all_reduce(c, group=ref)
        same(e, c, f"all_reduce async {tag}")
        same(fut_value[0], c, f"all_reduce future value {tag}")
        assert work.is_completed()  # the results were read back: the transport had finished

        # a strided (transposed) ember tensor is reduced in place.
        base = x.to(E).t()
        c = x.clone().t()
        dist.all_reduce(base)
        dist.all_reduce(c, group=ref)
        same(base, c, f"all_reduce strided {tag}")

        # inputs still being computed on a side stream when the collective is called.
        s = torch.ember.Stream()
        with torch.ember.stream(s):
            a = x.to(E)
            e = (a @ a.t()) * 3 + 1
            dist.all_reduce(e)
        # as with NCCL, work on one stream reaches another only through a stream wait
        torch.ember.current_stream().wait_stream(s)
        cpu = x.clone()
        c = (cpu @ cpu.t()) * 3 + 1
        dist.all_reduce(c, group=ref)
        assert torch.allclose(e.cpu().float(), c.float(), rtol=2e-2 if dtype != torch.float32 else 1e-5)

        # broadcast
        e, c = x.to(E), x.clone()
        dist.broadcast(e, src=1)
        dist.broadcast(c, src=1, group=ref)
        same(e, c, f"broadcast {tag}")

        # all_gather (list) and all_gather_into_tensor
        outs_e = [torch.empty_like(x, device=E) for _ in range(W)]
        outs_c = [torch.empty_like(x) for _ in range(W)]
        dist.all_gather(outs_e, x.to(E))
        dist.all_gather(outs_c, x, group=ref)
        for i in range(W):
            same(outs_e[i], outs_c[i], f"all_gather {tag} [{i}]")
        oe = torch.empty((W * 5, 3), dtype=dtype, device=E)
        oc = torch.empty((W * 5, 3), dtype=dtype)
        dist.all_gather_into_tensor(oe, x.to(E))
        dist.all_gather_into_tensor(oc, x, group=ref)
        same(oe, oc, f"all_gather_into_tensor {tag}")
        # coalesced form (what functional collectives and FSDP use for several tensors)
        y = rand((2, 4), dtype, 300 + R)
        o1, o2 = torch.empty((W * 5, 3), dtype=dtype, device=E), torch.empty((W * 2, 4), dtype=dtype, device=E)
        dist.group.WORLD.allgather_into_tensor_coalesced([o1, o2], [x.to(E), y.to(E)]).wait()
        same(o1, oc, f"allgather_into_tensor_coalesced {tag} [0]")
        yc = torch.empty((W * 2, 4), dtype=dtype)
        dist.all_gather_into_tensor(yc, y, group=ref)
        same(o2, yc, f"allgather_into_tensor_coalesced {tag} [1]")

        # reduce_scatter (list) and reduce_scatter_tensor (SUM, AVG)
        ins = [rand((4,), dtype, 400 + 10 * R + i) for i in range(W)]
        oe, oc = torch.empty(4, dtype=dtype, device=E), torch.empty(4, dtype=dtype)
        dist.reduce_scatter(oe, [t.to(E) for t in ins])
        dist.reduce_scatter(oc, [t.clone() for t in ins], group=ref)
        same(oe, oc, f"reduce_scatter {tag}")
        big = rand((W * 6,), dtype, 500 + R)
        oe, oc = torch.empty(6, dtype=dtype, device=E), torch.empty(6, dtype=dtype)
        dist.reduce_scatter_tensor(oe, big.to(E))
        dist.reduce_scatter_tensor(oc, big.clone(), group=ref)
        same(oe, oc, f"reduce_scatter_tensor SUM {tag}")
        oe = torch.empty(6, dtype=dtype, device=E)
        dist.reduce_scatter_tensor(oe, big.to(E), op=dist.ReduceOp.AVG)
        same(oe, oc / W, f"reduce_scatter_tensor AVG {tag}")
        oe = torch.empty(6, dtype=dtype, device=E)
        big_e = big.to(E)
        dist.reduce_scatter_tensor(oe, big_e, op=dist._make_nccl_premul_sum(0.5))
        same(big_e, big, f"reduce_scatter_tensor PREMUL_SUM leaves its input {tag}")
        oc2 = torch.empty(6, dtype=dtype)
        dist.reduce_scatter_tensor(oc2, big * 0.5, group=ref)
        same(oe, oc2, f"reduce_scatter_tensor PREMUL_SUM {tag}")

        # all_to_all_single with uneven splits, and all_to_all (lists)
        in_splits = [1 + R, 2]  # rank r sends 1+r rows to rank 0, 2 rows to rank 1
        out_splits = [1 + i if R == 0 else 2 for i in range(W)]
        src = rand((sum(in_splits), 3), dtype, 600 + R)
        oe = torch.empty((sum(out_splits), 3), dtype=dtype, device=E)
        oc = torch.empty((sum(out_splits), 3), dtype=dtype)
        dist.all_to_all_single(oe, src.to(E), out_splits, in_splits)
        dist.all_to_all_single(oc, src.clone(), out_splits, in_splits, group=ref)
        same(oe, oc, f"all_to_all_single {tag}")
        ins = [rand((2 + i,), dtype, 700 + 10 * R + i) for i in range(W)]
        outs_e = [torch.empty(2 + R, dtype=dtype, device=E) for _ in range(W)]
        dist.all_to_all(outs_e, [t.to(E) for t in ins])
        for i in range(W):  # rank i sent us its ins[R]
            same(outs_e[i], rand((2 + R,), dtype, 700 + 10 * i + R), f"all_to_all {tag} [{i}]")

        # reduce (root 1), gather (root 0), scatter (root 1)
        for name in ("SUM", "MAX", "AVG"):
            e, c = x.to(E), x.clone()
            dist.reduce(e, dst=1, op=getattr(dist.ReduceOp, name))
            dist.reduce(c, dst=1, op=dist.ReduceOp.MAX if name == "MAX" else dist.ReduceOp.SUM, group=ref)
            if R == 1:
                same(e, c / W if name == "AVG" else c, f"reduce {name} {tag}")
            else:
                same(e, x, f"reduce {name} leaves non-root {tag}")
        ge = [torch.empty_like(x, device=E) for _ in range(W)] if R == 0 else None
        gc = [torch.empty_like(x) for _ in range(W)] if R == 0 else None
        dist.gather(x.to(E), ge, dst=0)
        dist.gather(x, gc, dst=0, group=ref)
        if R == 0:
            for i in range(W):
                same(ge[i], gc[i], f"gather {tag} [{i}]")
        chunks = [rand((3,), dtype, 800 + i) for i in range(W)]
        se, sc = torch.empty(3, dtype=dtype, device=E), torch.empty(3, dtype=dtype)
        dist.scatter(se, [t.to(E) for t in chunks] if R == 1 else None, src=1)
        dist.scatter(sc, chunks if R == 1 else None, src=1, group=ref)
        same(se, sc, f"scatter {tag}")

        # point-to-point: both ranks post their send first (must not deadlock), then batched.
        peer = 1 - R
        mine = rand((7,), dtype, 900 + R)
        got = torch.zeros(7, dtype=dtype, device=E)
        sw = dist.isend(mine.to(E), peer)
        rw = dist.irecv(got, peer)
        sw.wait()
        rw.wait()
        same(got, rand((7,), dtype, 900 + peer), f"isend/irecv {tag}")
        got = torch.zeros(7, dtype=dtype, device=E)
        ops = [dist.P2POp(dist.isend, mine.to(E), peer), dist.P2POp(dist.irecv, got, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(got, rand((7,), dtype, 900 + peer), f"batch_isend_irecv {tag}")
        got = torch.zeros(7, dtype=dtype, device=E)
        if R == 0:
            dist.send(mine.to(E), 1)
        else:
            dist.recv(got, 0)
            same(got, rand((7,), dtype, 900), f"send/recv {tag}")
        got = torch.zeros(7, dtype=dtype, device=E)
        fut = dist.irecv(got, peer).get_future() if R == 1 else None
        if R == 0:
            dist.send(mine.to(E), 1)
        else:
            fut.wait()
            same(got, rand((7,), dtype, 900), f"irecv future {tag}")
        if R == 1:
            assert dist.recv(got) == 0  # from any source
            same(got, rand((7,), dtype, 900), f"recv any source {tag}")
        else:
            dist.send(mine.to(E), 1)

    # barrier and object collectives (they run on CPU tensors of the same group)
    dist.barrier()
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK})
    assert objs == [{"rank": i} for i in range(WORLD)], objs
    lst = [RANK * 10]
    dist.broadcast_object_list(lst, src=1)
    assert lst == [10], lst
    # functional collectives (DTensor and FSDP's path), including the AVG string op
    import torch.distributed._functional_collectives as fc
    e = fc.all_reduce(torch.full((3,), float(RANK + 1), device=E), "avg", dist.group.WORLD)
    same(e, torch.full((3,), 1.5), "functional all_reduce avg")
    e = fc.all_gather_tensor(torch.full((2,), float(RANK), device=E), 0, dist.group.WORLD)
    same(e, torch.tensor([0.0, 0.0, 1.0, 1.0]), "functional all_gather_tensor")
    # torch.distributed's coalescing manager, with and without a device
    from torch.distributed.distributed_c10d import _coalescing_manager
    for device in (None, torch.device(E)):
        a, b = torch.full((2,), float(RANK + 1), device=E), torch.full((3,), float(RANK + 1), device=E)
        with _coalescing_manager(dist.group.WORLD, device=device, async_ops=True) as cm:
            dist.all_reduce(a, op=dist.ReduceOp.AVG)
            dist.all_reduce(b, op=dist.ReduceOp.AVG)
        cm.wait()
        same(a, torch.full((2,), 1.5), f"coalesced all_reduce [0] device={device}")
        same(b, torch.full((3,), 1.5), f"coalesced all_reduce [1] device={device}")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
def case_init():
    """Every way of asking for the ember backend."""
    from torch.distributed import Backend
    from torch.distributed.device_mesh import init_device_mesh

    assert dist.is_backend_available("ember")
    assert Backend.default_device_backend_map["ember"] == "ember"
    assert Backend.default_device_backend_map["cpu"] == "gloo"
    variants = [("ember", {}), ("cpu:gloo,ember:ember", {}), (None, {"device_id": torch.device("ember:0")})]
    for i, (backend, kw) in enumerate(variants):
        if backend is None:
            store = dist.FileStore(STORE + f".{i}", WORLD)
            dist.init_process_group(store=store, rank=RANK, world_size=WORLD, timeout=TIMEOUT, **kw)
        else:
            init(backend, suffix=f".{i}", **kw)
        assert "ember" in str(dist.get_backend()), (backend, dist.get_backend())
        assert dist.group.WORLD.name() == "ember"
        t = torch.full((4,), float(RANK + 1), device="ember")
        dist.all_reduce(t)
        same(t, torch.full((4,), 3.0), f"all_reduce after init({backend}, {kw})")
        c = torch.full((2,), float(RANK))  # CPU tensors work in the same group
        dist.all_reduce(c)
        same(c, torch.full((2,), 1.0), f"cpu all_reduce after init({backend})")
        if i == 0:
            mesh = init_device_mesh("ember", (WORLD,))
            assert mesh.device_type == "ember"
            t = torch.ones(2, device="ember")
            dist.all_reduce(t, group=mesh.get_group())
            same(t, torch.full((2,), 2.0), "all_reduce on the mesh's group")
            sub = dist.new_group([0, 1])  # a second ember group in the same world
            t = torch.ones(2, device="ember")
            dist.all_reduce(t, group=sub)
            same(t, torch.full((2,), 2.0), "all_reduce on a new_group")
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _batch(seed, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randn(n, 3, generator=g)


def _grads(model):
    return [p.grad.detach().cpu().clone() for p in model.parameters()]


def _local(x):
    n = x.shape[0] // WORLD
    return x[RANK * n:(RANK + 1) * n]


def _close(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-6), f"{what}: param {i} max diff {(g - w).abs().max()}"


def case_ddp():
    """DDP on ember: gradients equal a single-process run on the full batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    init()
    E = "ember"
    loss_fn = torch.nn.functional.mse_loss

    # reference: one process, the whole batch
    ref = _mlp().to(E)
    (x1, y1), (x2, y2) = _batch(1), _batch(2)
    loss_fn(ref(x1.to(E)), y1.to(E)).backward()
    want_one = _grads(ref)
    ref.zero_grad()
    loss_fn(ref(x1.to(E)), y1.to(E)).backward()
    loss_fn(ref(x2.to(E)), y2.to(E)).backward()
    want_two = _grads(ref)

    # bucketing: a tiny bucket cap puts the parameters in several buckets
    ddp = DDP(_mlp().to(E), bucket_cap_mb=0.001)
    loss_fn(ddp(_local(x1).to(E)), _local(y1).to(E)).backward()
    _close(_grads(ddp.module), want_one, "DDP grads")

    # no_sync: the first micro-batch accumulates locally, the second all-reduces the sum
    ddp.zero_grad()
    with ddp.no_sync():
        loss_fn(ddp(_local(x1).to(E)), _local(y1).to(E)).backward()
    local = _grads(ddp.module)
    peers = [torch.empty_like(local[0]) for _ in range(WORLD)]
    dist.all_gather(peers, local[0])
    assert not torch.equal(peers[0], peers[1]), "no_sync gradients were synchronized"
    loss_fn(ddp(_local(x2).to(E)), _local(y2).to(E)).backward()
    _close(_grads(ddp.module), want_two, "DDP no_sync grads")

    # communication hooks: PyTorch's allreduce hook, and one of ours through get_future().then
    calls = []

    def hook(state, bucket):
        calls.append(bucket.index())
        buf = bucket.buffer().div_(WORLD)
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    for h, name in ((default_hooks.allreduce_hook, "allreduce_hook"), (hook, "custom hook")):
        ddp = DDP(_mlp().to(E), bucket_cap_mb=0.001)
        ddp.register_comm_hook(None, h)
        # DDP puts every parameter in one bucket for the first backward, then rebuilds them
        loss_fn(ddp(_local(x2).to(E)), _local(y2).to(E)).backward()
        ddp.zero_grad()
        calls.clear()
        loss_fn(ddp(_local(x1).to(E)), _local(y1).to(E)).backward()
        _close(_grads(ddp.module), want_one, f"DDP grads with {name}")
    assert len(calls) > 1, f"expected several gradient buckets, the hook saw {calls}"

    # a few optimizer steps keep the replicas identical
    ddp = DDP(_mlp().to(E))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        x, y = _batch(10 + step)
        opt.zero_grad()
        loss_fn(ddp(_local(x).to(E)), _local(y).to(E)).backward()
        opt.step()
    w = ddp.module[0].weight.detach()
    peers = [torch.empty_like(w) for _ in range(WORLD)]
    dist.all_gather(peers, w)
    assert torch.equal(peers[0].cpu(), peers[1].cpu()), "replicas diverged"
    dist.destroy_process_group()


def case_ddp_compiled():
    """torch.compile of a DDP model on ember: every step's gradients equal a single-process run."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    init()
    E = "ember"
    ref = _mlp().to(E)
    ddp = DDP(_mlp().to(E))
    run = torch.compile(ddp, backend="ember")
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        x, y = _batch(20 + step)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.to(E)), y.to(E)).backward()
        opt.zero_grad()
        torch.nn.functional.mse_loss(run(_local(x).to(E)), _local(y).to(E)).backward()
        _close(_grads(ddp.module), _grads(ref), f"compiled DDP grads, step {step}")
        ref_opt.step()
        opt.step()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
def case_errors():
    """Clear errors naming the op; a missing peer ends in a timeout error, not a hang."""
    from torch_ember.distributed.staging import DistributedError

    init()
    E = "ember"

    def raises(fn, *fragments):
        try:
            fn()
        except DistributedError as e:
            for f in fragments:
                assert f in str(e), f"{f!r} not in {e}"
            return str(e)
        raise AssertionError(f"no error; expected {fragments}")

    raises(lambda: dist.all_gather([torch.empty(2) for _ in range(WORLD)], torch.ones(2, device=E)),
           "ember all_gather", "same device", "ember:0", "cpu")
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64, device=E), op=dist.ReduceOp.AVG),
           "ember all_reduce", "AVG", "floating-point")
    raises(lambda: dist.all_gather_into_tensor(torch.empty(3, device=E), torch.ones(2, device=E)),
           "ember all_gather_into_tensor", "expected 2 x 2")
    # the group still works after refused calls
    t = torch.ones(2, device=E)
    dist.all_reduce(t)
    same(t, torch.full((2,), 2.0), "all_reduce after errors")

    # rank 0 reduces alone in a group with a 2 s timeout: it gets an error naming the op
    short = dist.new_group(backend="ember", timeout=datetime.timedelta(seconds=2))
    store = dist.FileStore(STORE + ".side", WORLD)
    if RANK == 0:
        # Collectives on ember tensors fail asynchronously, as with NCCL: wait() raises once the
        # job has failed; a stream that waits for it gets the error at its next synchronizing call.
        t = torch.ones(2, device=E)
        work = dist.all_reduce(t, group=short, async_op=True)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=30)
        while not work.is_completed() and datetime.datetime.now() < deadline:
            work.get_future().wait()  # orders the stream only, as NCCL's future does
            time.sleep(0.05)
        assert work.is_completed() and not work.is_success()
        msg = raises(work.wait, "ember all_reduce failed on rank 0 of 2")
        print("timeout error:", msg[:200])
        t = torch.ones(2, device=E)
        dist.all_reduce(t, group=short)
        try:
            t.cpu()
        except RuntimeError as e:
            assert "ember all_reduce failed on rank 0 of 2" in str(e), e
        else:
            raise AssertionError("a stream waiting for a failed all_reduce synchronized cleanly")
        store.set("done", "1")
    else:
        store.wait(["done"], datetime.timedelta(seconds=30))
    sys.stdout.flush()
    os._exit(0)  # the timed-out group's peers are out of step; skip its teardown


def case_peer_dies():
    """Rank 1 exits mid-job: rank 0's next collective fails at once with the op named."""
    from torch_ember.distributed.staging import DistributedError

    init(timeout=datetime.timedelta(seconds=10))
    t = torch.ones(2, device="ember")
    dist.all_reduce(t)
    t.cpu()  # both ranks are past init and one collective before rank 1 goes (it is asynchronous)
    if RANK == 1:
        os._exit(3)
    try:
        dist.all_reduce(t)
        t.cpu()  # the failure is asynchronous: raised at the next synchronizing call
    except RuntimeError as e:
        assert "ember all_reduce failed on rank 0" in str(e), e
        print("peer error:", str(e)[:200])
    else:
        raise AssertionError("all_reduce with a dead peer did not fail")
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
def case_fsdp_dtensor():
    """FSDP2 fully_shard trains like one process on the full batch; DTensor round trips."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    init()
    E = "ember"
    mesh = init_device_mesh(E, (WORLD,))

    full = torch.arange(24.0).reshape(6, 4)
    d = distribute_tensor(full.to(E), mesh, [Shard(0)])
    same(d.to_local(), full[RANK * 3:(RANK + 1) * 3], "DTensor Shard(0) local part")
    same(d.full_tensor(), full, "DTensor full_tensor")
    same(d.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor redistribute to Replicate")
    d1 = distribute_tensor(full.to(E), mesh, [Shard(1)])
    same((d1 * 2).full_tensor(), full * 2, "DTensor Shard(1) elementwise")

    loss_fn = torch.nn.functional.mse_loss
    ref = _mlp().to(E)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2)
    model = _mlp().to(E)
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for step in range(3):
        x, y = _batch(20 + step)
        ref_opt.zero_grad()
        want = loss_fn(ref(x.to(E)), y.to(E))
        want.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = loss_fn(model(_local(x).to(E)), _local(y).to(E))
        loss.backward()
        opt.step()
        got = loss.detach().clone()
        dist.all_reduce(got, op=dist.ReduceOp.AVG)
        assert torch.allclose(got.cpu(), want.detach().cpu(), rtol=1e-5, atol=1e-6), (step, got, want)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.full_tensor().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)

    # bf16 compute with fp32 gradient reduction: close to the fp32 single-process loss
    from torch.distributed.fsdp import MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = _mlp().to(E)
    fully_shard(model[2], mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    x, y = _batch(20)
    loss = loss_fn(model(_local(x).to(E)).float(), _local(y).to(E))
    loss.backward()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    want = loss_fn(_mlp()(x), y)
    assert torch.allclose(loss.detach().cpu(), want.detach(), rtol=3e-2), (loss, want)

    # a gradient divide factor makes FSDP2 reduce with PREMUL_SUM (TorchTitan sets 1.0: a sum)
    lin = torch.nn.Linear(8, 4).to(E)
    fully_shard(lin, mesh=mesh)
    lin.set_gradient_divide_factor(1.0)
    lin(torch.ones(2, 8, device=E)).sum().backward()
    same(lin.weight.grad.full_tensor(), torch.full((4, 8), 2.0 * WORLD), "FSDP2 PREMUL_SUM weight grad")
    same(lin.bias.grad.full_tensor(), torch.full((4,), 2.0 * WORLD), "FSDP2 PREMUL_SUM bias grad")

    # tensor parallelism: a column-wise then row-wise pair of linears equals the plain pair
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(1)
    pair = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 8))
    x = torch.randn(2, 8)
    want = pair(x).detach()
    pair = parallelize_module(pair.to(E), mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    assert torch.allclose(pair(x.to(E)).cpu(), want, rtol=1e-5, atol=1e-6)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
def case_compile_funcol():
    """Functional collectives inside torch.compile(backend="ember"): library steps, equal to eager."""
    import torch.distributed._functional_collectives as fc
    from torch_ember.compile.stats import compile_stats, reset_compile_stats

    init()
    E = "ember"
    group = dist.group.WORLD
    torch._dynamo.reset()
    reset_compile_stats()

    def f(x):
        y = torch.sin(x) * 2 + 1
        s = fc.all_reduce(y, "sum", group)
        a = fc.all_reduce(y * 3, "avg", group)
        g = fc.all_gather_tensor(y[:2], 0, group)
        r = fc.reduce_scatter_tensor(y, "sum", 0, group)
        return s.relu() + a, g * 2, r + 1

    x = rand((4, 3), torch.float32, 40 + RANK).to(E)
    want = f(x)
    got = torch.compile(f, backend="ember", fullgraph=True)(x)
    for i, (g_, w_) in enumerate(zip(got, want)):
        assert torch.allclose(g_.cpu(), w_.cpu(), rtol=1e-6, atol=1e-6), f"compiled funcol output {i}"
    recs = compile_stats()
    steps = [op for r in recs for op, _ in r["library_ops"]]
    assert any("all_reduce" in op for op in steps) and any("wait_tensor" in op for op in steps), steps
    assert not any(r["eager_ops"] for r in recs), [r["eager_ops"] for r in recs]
    print("library steps:", sorted(set(steps)))

    # a tensor-parallel pair of linears (DTensor) compiled: forward and gradients equal eager
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh(E, (WORLD,))

    def tp_pair():
        torch.manual_seed(1)
        pair = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).to(E)
        return parallelize_module(pair, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    xs = torch.randn(4, 8, generator=torch.Generator().manual_seed(7)).to(E)
    eager_pair, compiled_pair = tp_pair(), tp_pair()
    step = torch.compile(compiled_pair, backend="ember")
    for p in (eager_pair, step):
        out = p(xs)
        out.square().sum().backward()
        if p is eager_pair:
            want_out = out.detach().cpu()
        else:
            got_out = out.detach().cpu()
    assert torch.allclose(got_out, want_out, rtol=1e-5, atol=1e-6), (got_out - want_out).abs().max()
    for (n, a), b in zip(eager_pair.named_parameters(), compiled_pair.parameters()):
        ga, gb = a.grad.full_tensor().cpu(), b.grad.full_tensor().cpu()
        assert torch.allclose(gb, ga, rtol=1e-5, atol=1e-6), f"TP grad {n}: {(ga - gb).abs().max()}"
    recs = compile_stats()
    assert not any(r["eager_ops"] for r in recs), [r["eager_ops"] for r in recs]
    print("TP graphs:", [(r["name"], r["kind"], len(r["library_ops"])) for r in recs])
    dist.destroy_process_group()


def case_stream_order():
    """Collectives on ember tensors run in stream order on a communication stream, as NCCL's do:
    the call returns while its inputs are still being computed, work queued after it runs
    meanwhile, wait() orders the current stream without blocking the host, and host-side
    collectives keep the group's order behind pending ones."""
    import torch_ember.profiler as ember_profiler

    init()
    E = "ember"
    x = torch.full((1024,), float(RANK + 1), device=E)
    torch.ember._sleep(1000)  # the producer is still busy when the collective is called
    y = x * 2
    work = dist.all_reduce(y, async_op=True)
    assert not work.is_completed(), "all_reduce blocked the host until it finished"
    z = x + 1  # queued after the call, while the collective waits for its input
    work.wait()
    assert not work.is_completed(), "wait() blocked the host instead of ordering the stream"
    same(y * 1, torch.full((1024,), 6.0), "all_reduce read after wait()")  # (1 + 2) * 2
    same(z, torch.full((1024,), float(RANK + 2)), "work queued after the call")
    assert work.is_completed()

    w = torch.full((4,), float(RANK), device=E)
    dist.all_reduce(w)  # synchronous form, then a read on the same stream
    same(w, torch.full((4,), 1.0), "all_reduce then read")

    # an object collective (CPU tensors, host-synchronous) behind a pending ember one
    a = torch.full((3,), float(RANK), device=E)
    torch.ember._sleep(100)
    a = a + 0
    dist.all_reduce(a)
    objs = [None] * WORLD
    dist.all_gather_object(objs, RANK * 10)
    assert objs == [0, 10], objs
    same(a, torch.full((3,), 1.0), "ember all_reduce before an object collective")

    # a callback that waits on another collective's future (PowerSGD's hook does)
    p, q = torch.ones(4, device=E), torch.ones(4, device=E)

    def callback(fut):
        return dist.all_reduce(q, async_op=True).get_future().wait()[0] + fut.value()[0]
    out = dist.all_reduce(p, async_op=True).get_future().then(callback).wait()
    same(out, torch.full((4,), 2.0 * WORLD), "a callback waiting on another collective")

    # a barrier does not wait for another group's pending collective
    sub = dist.new_group(list(range(WORLD)))
    s = torch.ones(3, device=E)
    if RANK == 0:
        w = dist.all_reduce(s, group=sub, async_op=True)
        dist.barrier()
    else:
        dist.barrier()
        w = dist.all_reduce(s, group=sub, async_op=True)
    w.wait()
    same(s, torch.full((3,), float(WORLD)), "a barrier beside another group's pending collective")

    # the profiler shows the collective as a span on its own stream, beside the compute
    with ember_profiler.profile() as prof:
        m = torch.randn(256, 256, device=E)
        g = torch.ones(1 << 16, device=E)
        work = dist.all_reduce(g, async_op=True)
        for _ in range(4):
            m = (m @ m) * 1e-2
        work.wait()
        torch.ember.synchronize()
    kernels = [r for r in prof.records if r["kind"] == "kernel"]
    comm = [r for r in kernels if r["name"] == "ember all_reduce"]
    compute = [r for r in kernels if r["name"] not in ("ember all_reduce", "event_wait", "sleep")]
    assert comm, sorted({r["name"] for r in kernels})
    assert {r["stream"] for r in comm}.isdisjoint({r["stream"] for r in compute}), \
        [(r["name"], r["stream"]) for r in kernels]
    same(g, torch.full((1 << 16,), float(WORLD)), "all_reduce under the profiler")
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[2:] == ["env"]:  # `_dist_worker.py CASE env` under torchrun
        case, STORE = sys.argv[1], "env"
        RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        case, RANK, WORLD, STORE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    globals()[f"case_{case}"]()
