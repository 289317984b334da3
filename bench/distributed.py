"""The "ember" c10d backend against plain Gloo, on this machine. Prints one JSON object.

  allreduce   bus bandwidth of all_reduce (SUM, float32) on ember tensors through the ember
              backend, and on CPU tensors of the same sizes through a Gloo group of the same
              processes; ratio = ember / gloo (1.0 = no cost over Gloo itself)
  ddp         median DDP training-step time (forward, backward with gradient all-reduce,
              SGD step) of an MLP on ember, 1 process against 2, at the same per-process batch;
              overlap = the fraction of the all-reduce time (its spans on the communication
              stream, from a profiler trace of one step) during which compute kernels ran
  fsdp2       median FSDP2 (fully_shard per layer) training-step time of a small transformer
              with AdamW, on ember through the ember backend against the same on CPU tensors
              through Gloo, in the same number of processes; ratio = gloo time / ember time
  cpu         the CPU model (lscpu) and the cores this process may use

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
Ranks are processes on this one machine over loopback, sharing its cores.
Collectives on ember tensors run on a communication stream, so DDP's bucket all-reduces can
overlap the rest of the backward pass.
Usage: python bench/distributed.py [--world 2] [--sizes 4096,262144,4194304] [--iters 10]"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _init(rank: int, world: int, store_path: str):
    import torch.distributed as dist

    store = dist.FileStore(store_path, world)
    dist.init_process_group("ember", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    return dist.new_group(backend="gloo")


def _time_allreduce(t, group, iters: int) -> float:
    import torch.distributed as dist

    for _ in range(2):
        dist.all_reduce(t, group=group)
    if t.device.type == "ember":
        import torch
        torch.ember.synchronize()
    dist.barrier()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        if t.device.type == "ember":
            import torch
            torch.ember.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker_allreduce(rank: int, world: int, store_path: str, sizes, iters: int) -> dict:
    import torch
    import torch_ember  # noqa: F401

    gloo = _init(rank, world, store_path)
    rows = []
    for n in sizes:
        nbytes = n * 4
        t_ember = _time_allreduce(torch.ones(n, device="ember"), None, iters)
        t_gloo = _time_allreduce(torch.ones(n), gloo, iters)
        factor = 2 * (world - 1) / world
        bus_e, bus_g = nbytes / t_ember * factor / 1e9, nbytes / t_gloo * factor / 1e9
        rows.append({"bytes": nbytes, "ember_ms": round(t_ember * 1e3, 3), "gloo_ms": round(t_gloo * 1e3, 3),
                     "ember_busbw_GBs": round(bus_e, 4), "gloo_busbw_GBs": round(bus_g, 4),
                     "ratio": round(bus_e / bus_g, 3)})
    import torch.distributed as dist
    dist.destroy_process_group()
    return {"allreduce": rows}


def worker_ddp(rank: int, world: int, store_path: str, steps: int) -> dict:
    import torch
    import torch_ember  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel as DDP

    _init(rank, world, store_path)
    torch.manual_seed(0)
    dev = torch.device("ember", 0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256, device=dev), torch.randn(64, 256, device=dev)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        torch.ember.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    import torch_ember.profiler as ember_profiler

    with ember_profiler.profile() as prof:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        torch.ember.synchronize()
    import torch.distributed as dist
    dist.destroy_process_group()
    params = sum(p.numel() for p in model.parameters())
    return {"step_ms": round(statistics.median(times) * 1e3, 2), "params": params,
            "overlap": _overlap_fraction(prof.records)}


def _overlap_fraction(records) -> float:
    """Of the time collectives held the communication stream ("ember <op>" spans), the
    fraction during which some compute kernel ran on another stream."""
    kernels = [r for r in records if r["kind"] == "kernel"]
    comm = [(r["ts_ns"], r["ts_ns"] + r["dur_ns"]) for r in kernels if r["name"].startswith("ember ")]
    busy = sorted((r["ts_ns"], r["ts_ns"] + r["dur_ns"]) for r in kernels
                  if not r["name"].startswith("ember ") and r["name"] != "event_wait")
    merged = []
    for lo, hi in busy:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    total = sum(hi - lo for lo, hi in comm)
    covered = sum(max(0, min(hi, b) - max(lo, a)) for lo, hi in comm for a, b in merged)
    return round(covered / total, 3) if total else 0.0


def worker_fsdp(rank: int, world: int, store_path: str, steps: int, device: str) -> dict:
    import torch
    import torch.distributed as dist
    import torch_ember  # noqa: F401
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    store = dist.FileStore(store_path, world)
    dist.init_process_group("ember" if device == "ember" else "gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    dev = torch.device("ember", 0) if device == "ember" else torch.device("cpu")
    layers = [torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True) for _ in range(4)]
    model = torch.nn.Sequential(*layers).to(dev)
    mesh = init_device_mesh(dev.type, (world,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 64, 256, device=dev)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if device == "ember":
            torch.ember.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    dist.destroy_process_group()
    return {"step_ms": round(statistics.median(times) * 1e3, 2)}


def _launch(kind: str, world: int, extra: list) -> dict:
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", kind, str(r), str(world), store, *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for r in range(world)]
        outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{kind} worker failed ({p.returncode}):\n{err[-3000:]}")
    return json.loads(outs[0][0].strip().splitlines()[-1])


def _cpu_info() -> dict:
    info = {"cores_available": len(os.sched_getaffinity(0))}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Architecture"):
                info[key.strip().lower().replace(" ", "_").replace("(s)", "s")] = value.strip()
    except (OSError, subprocess.SubprocessError) as e:
        info["lscpu_error"] = str(e)
    return info


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, rank, world, store = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        if kind == "allreduce":
            res = worker_allreduce(rank, world, store, [int(s) for s in sys.argv[6].split(",")], int(sys.argv[7]))
        elif kind == "fsdp2":
            res = worker_fsdp(rank, world, store, int(sys.argv[6]), sys.argv[7])
        else:
            res = worker_ddp(rank, world, store, int(sys.argv[6]))
        print(json.dumps(res))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--sizes", default="4096,262144,4194304", help="float32 element counts")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--steps", type=int, default=10, help="timed DDP steps")
    args = ap.parse_args()
    result = {"world": args.world, "cpu": _cpu_info()}
    result.update(_launch("allreduce", args.world, [args.sizes, str(args.iters)]))
    one = _launch("ddp", 1, [str(args.steps)])
    many = _launch("ddp", args.world, [str(args.steps)])
    result["ddp"] = {"params": one["params"], "batch_per_process": 64, "step_ms_1proc": one["step_ms"],
                     f"step_ms_{args.world}proc": many["step_ms"],
                     "slowdown": round(many["step_ms"] / one["step_ms"], 3), "overlap": many["overlap"]}
    ember = _launch("fsdp2", args.world, [str(args.steps), "ember"])
    gloo = _launch("fsdp2", args.world, [str(args.steps), "cpu"])
    result["fsdp2"] = {"layers": 4, "d_model": 256, "batch_per_process": "8 x 64 tokens",
                       "ember_step_ms": ember["step_ms"], "gloo_cpu_step_ms": gloo["step_ms"],
                       "ratio": round(gloo["step_ms"] / ember["step_ms"], 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
