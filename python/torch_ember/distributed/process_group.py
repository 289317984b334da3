"""EmberProcessGroup: the c10d process group behind `init_process_group("ember")`.

Each op checks its arguments at the call (a clear DistributedError naming the op), then runs
the same op on an inner ProcessGroupGloo over host views of the tensors (staging.py). On CPU
tensors it runs to completion at the call, as Gloo does; on ember tensors it runs in stream order
on the device's communication stream and thread, and returns at once (comm.py: NCCL's
semantics). Reductions Gloo lacks (AVG, PREMUL_SUM) are emulated around a Gloo SUM
(reduce_ops.py). Gloo's timeout (the group's) bounds every transport wait, so a missing peer ends
in an error naming the op and the rank, not a hang.

The inner Gloo backend is also registered for the "cpu" and "ember" devices of the group, so
PyTorch code that looks a backend up by device (barrier, object collectives, eager connect)
finds one; every op itself is served by the Python methods below, which PyTorch reaches both
from Python (torch.distributed.*) and from C++ (DDP's reducer) through its ProcessGroup
trampoline. The method names are PyTorch 2.13's, with the older names as aliases.
"""
from datetime import timedelta
from typing import Callable, List, Sequence

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroupGloo

from . import reduce_ops
from .comm import CommEngine
from .staging import (DistributedError, check_devices, copy_back, flat, host_buffer, host_view,
                      host_views, to_host)
from .work import PendingWork, completed, untraced


@untraced
class EmberProcessGroup(dist.ProcessGroup):
    def __init__(self, store: "dist.Store", rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        self._comm = CommEngine(f"rank {rank} of {size}")
        for device in ("cpu", "ember"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.GLOO,
                                   self._gloo)

    # ---- identity ----
    def getBackendName(self) -> str:
        return "ember"

    def __repr__(self) -> str:
        return f"EmberProcessGroup(rank={self._rank}, size={self._size})"

    # ---- helpers ----
    def _gloo_call(self, op: str, issue: Callable[[], "dist.Work"]) -> None:
        """Run one Gloo op to completion; its errors re-raised naming the ember op."""
        try:
            issue().wait()
        except DistributedError:
            raise
        except Exception as e:  # noqa: BLE001
            raise DistributedError(
                f"ember {op} failed on rank {self._rank} of {self._size}: {e}") from e

    def _launch(self, op: str, dev: torch.device, result: List[torch.Tensor],
                job: Callable[[], None], keep: Sequence = ()) -> "dist.Work":
        """Run `job` (which works on host views) in the group's order: for CPU tensors to
        completion, as Gloo does; for ember tensors in stream order, returning at once (comm.py)."""
        if dev.type != "ember":
            self._comm.call(op, job)
            return completed(result)
        return self._comm.launch(op, dev, result, [result, list(keep)], job, self._timeout)

    def _plan(self, op: str, reduce_op, tensors: Sequence[torch.Tensor]) -> reduce_ops.Plan:
        return reduce_ops.plan(op, reduce_op, self._size, tensors[0].dtype)

    @staticmethod
    def _reduce_opts(cls, opts, plan: reduce_ops.Plan):
        o = cls()
        o.reduceOp = plan.gloo_op
        o.timeout = opts.timeout
        return o

    def _root_ok(self, op: str, root: int) -> None:
        if not 0 <= root < self._size:
            raise DistributedError(f"ember {op}: root rank {root} is outside the group of {self._size}")

    def _coalesced(self, works: list, result: List[torch.Tensor]) -> "dist.Work":
        # Jobs finish in call order, so the last one's Work stands for them all.
        return works[-1] if works else completed(result)

    # ---- all-reduce ----
    def allreduce(self, tensors: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.AllreduceOptions()
        op = "all_reduce"
        dev = check_devices(op, tensors)
        plan = self._plan(op, opts.reduceOp, tensors)
        gloo_opts = self._reduce_opts(c10d.AllreduceOptions, opts, plan)
        views = host_views(tensors)

        def job():
            hosts = [to_host(t) for t in views]
            for h in hosts:
                plan.before(h)
            self._gloo_call(op, lambda: self._gloo.allreduce(hosts, gloo_opts))
            for h in hosts:
                plan.after(h)
            copy_back(views, hosts)
        return self._launch(op, dev, list(tensors), job)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.AllreduceCoalescedOptions()
        check_devices("all_reduce_coalesced", tensors)
        one = c10d.AllreduceOptions()
        one.reduceOp = opts.reduceOp
        one.timeout = opts.timeout
        return self._coalesced([self.allreduce([t], one) for t in tensors], list(tensors))

    # ---- broadcast ----
    def broadcast(self, tensors: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.BroadcastOptions()
        op = "broadcast"
        dev = check_devices(op, tensors)
        self._root_ok(op, opts.rootRank)
        views = host_views(tensors)

        def job():
            hosts = [to_host(t) for t in views]
            self._gloo_call(op, lambda: self._gloo.broadcast(hosts, opts))
            copy_back(views, hosts)
        return self._launch(op, dev, list(tensors), job)

    # ---- all-gather ----
    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
                  opts=None):
        opts = opts if opts is not None else c10d.AllgatherOptions()
        op = "all_gather"
        dev = check_devices(op, flat(output_tensors) + list(input_tensors))
        views_out, views_in = host_views(output_tensors), host_views(input_tensors)

        def job():
            hosts_in = [to_host(t) for t in views_in]
            hosts_out = [[host_buffer(t) for t in group] for group in views_out]
            self._gloo_call(op, lambda: self._gloo.allgather(hosts_out, hosts_in, opts))
            copy_back(flat(views_out), flat(hosts_out))
        return self._launch(op, dev, flat(output_tensors), job, keep=input_tensors)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        opts = opts if opts is not None else c10d.AllgatherOptions()
        op = "all_gather_into_tensor"
        dev = check_devices(op, [output, input])
        if output.numel() != input.numel() * self._size:
            raise DistributedError(
                f"ember {op}: output has {output.numel()} elements, expected "
                f"{self._size} x {input.numel()}")
        view_out, view_in = host_view(output), host_view(input)

        def job():
            host_in, host_out = to_host(view_in), host_buffer(view_out)
            self._gloo_call(op, lambda: self._gloo._allgather_base(host_out, host_in, opts))
            copy_back([view_out], [host_out])
        return self._launch(op, dev, [output], job, keep=[input])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                    opts=None):
        opts = opts if opts is not None else c10d.AllgatherOptions()
        check_devices("all_gather_into_tensor_coalesced", list(outputs) + list(inputs))
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._coalesced(works, list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]],
                            input_tensors: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.AllgatherOptions()
        check_devices("all_gather_coalesced", flat(output_lists) + list(input_tensors))
        works = [self.allgather([[group[j] for group in output_lists]], [t], opts)
                 for j, t in enumerate(input_tensors)]
        return self._coalesced(works, flat(output_lists))

    # ---- reduce-scatter ----
    def reduce_scatter(self, output_tensors: List[torch.Tensor],
                       input_tensors: List[List[torch.Tensor]], opts=None):
        opts = opts if opts is not None else c10d.ReduceScatterOptions()
        op = "reduce_scatter"
        dev = check_devices(op, list(output_tensors) + flat(input_tensors))
        plan = self._plan(op, opts.reduceOp, output_tensors)
        gloo_opts = self._reduce_opts(c10d.ReduceScatterOptions, opts, plan)
        views_out, views_in = host_views(output_tensors), host_views(input_tensors)

        def job():
            hosts_in = [[to_host(t, copy=plan.needs_input_copy()) for t in group]
                        for group in views_in]
            for h in flat(hosts_in):
                plan.before(h)
            hosts_out = [host_buffer(t) for t in views_out]
            self._gloo_call(op, lambda: self._gloo.reduce_scatter(hosts_out, hosts_in, gloo_opts))
            for h in hosts_out:
                plan.after(h)
            copy_back(views_out, hosts_out)
        return self._launch(op, dev, list(output_tensors), job, keep=input_tensors)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        opts = opts if opts is not None else c10d.ReduceScatterOptions()
        op = "reduce_scatter_tensor"
        dev = check_devices(op, [output, input])
        if input.numel() != output.numel() * self._size:
            raise DistributedError(
                f"ember {op}: input has {input.numel()} elements, expected "
                f"{self._size} x {output.numel()}")
        plan = self._plan(op, opts.reduceOp, [output])
        gloo_opts = self._reduce_opts(c10d.ReduceScatterOptions, opts, plan)
        view_out, view_in = host_view(output), host_view(input)

        def job():
            host_in = to_host(view_in, copy=plan.needs_input_copy())
            plan.before(host_in)
            host_out = host_buffer(view_out)
            self._gloo_call(op, lambda: self._gloo._reduce_scatter_base(host_out, host_in, gloo_opts))
            plan.after(host_out)
            copy_back([view_out], [host_out])
        return self._launch(op, dev, [output], job, keep=[input])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.ReduceScatterOptions()
        check_devices("reduce_scatter_tensor_coalesced", list(outputs) + list(inputs))
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._coalesced(works, list(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- all-to-all ----
    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: List[int], input_split_sizes: List[int], opts=None):
        opts = opts if opts is not None else c10d.AllToAllOptions()
        op = "all_to_all_single"
        dev = check_devices(op, [output, input])
        view_out, view_in = host_view(output), host_view(input)
        out_splits, in_splits = list(output_split_sizes), list(input_split_sizes)

        def job():
            host_in, host_out = to_host(view_in), host_buffer(view_out)
            self._gloo_call(op, lambda: self._gloo.alltoall_base(
                host_out, host_in, out_splits, in_splits, opts))
            copy_back([view_out], [host_out])
        return self._launch(op, dev, [output], job, keep=[input])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor],
                 opts=None):
        opts = opts if opts is not None else c10d.AllToAllOptions()
        op = "all_to_all"
        dev = check_devices(op, list(output_tensors) + list(input_tensors))
        if len(output_tensors) != self._size or len(input_tensors) != self._size:
            raise DistributedError(f"ember {op}: expected {self._size} input and output tensors")
        dtypes = {t.dtype for t in list(output_tensors) + list(input_tensors)}
        if len(dtypes) != 1:
            raise DistributedError(f"ember {op}: all tensors must have one dtype, got {dtypes}")
        views_out, views_in = host_views(output_tensors), host_views(input_tensors)
        out_splits = [t.numel() for t in output_tensors]
        in_splits = [t.numel() for t in input_tensors]

        def job():
            host_in = torch.cat([to_host(t).reshape(-1) for t in views_in])
            host_out = torch.empty(sum(out_splits), dtype=host_in.dtype)
            self._gloo_call(op, lambda: self._gloo.alltoall_base(
                host_out, host_in, out_splits, in_splits, opts))
            pieces = [p.view(t.shape) for p, t in zip(host_out.split(out_splits), views_out)]
            copy_back(views_out, pieces)
        return self._launch(op, dev, list(output_tensors), job, keep=input_tensors)

    # ---- rooted collectives ----
    def reduce(self, tensors: List[torch.Tensor], opts=None):
        opts = opts if opts is not None else c10d.ReduceOptions()
        op = "reduce"
        dev = check_devices(op, tensors)
        self._root_ok(op, opts.rootRank)
        plan = self._plan(op, opts.reduceOp, tensors)
        is_root = self._rank == opts.rootRank
        gloo_opts = self._reduce_opts(c10d.ReduceOptions, opts, plan)
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        views = host_views(tensors)

        def job():
            # Gloo may use a non-root rank's buffer as scratch: only the root's tensor changes.
            hosts = [to_host(t, copy=not is_root) for t in views]
            for h in hosts:
                plan.before(h)
            self._gloo_call(op, lambda: self._gloo.reduce(hosts, gloo_opts))
            if is_root:
                for h in hosts:
                    plan.after(h)
                copy_back(views, hosts)
        return self._launch(op, dev, list(tensors), job)

    def gather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
               opts=None):
        opts = opts if opts is not None else c10d.GatherOptions()
        op = "gather"
        dev = check_devices(op, flat(output_tensors) + list(input_tensors))
        self._root_ok(op, opts.rootRank)
        views_out, views_in = host_views(output_tensors), host_views(input_tensors)

        def job():
            hosts_in = [to_host(t) for t in views_in]
            hosts_out = [[host_buffer(t) for t in group] for group in views_out]
            self._gloo_call(op, lambda: self._gloo.gather(hosts_out, hosts_in, opts))
            copy_back(flat(views_out), flat(hosts_out))
        return self._launch(op, dev, flat(output_tensors), job, keep=input_tensors)

    def scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                opts=None):
        opts = opts if opts is not None else c10d.ScatterOptions()
        op = "scatter"
        dev = check_devices(op, list(output_tensors) + flat(input_tensors))
        self._root_ok(op, opts.rootRank)
        views_out, views_in = host_views(output_tensors), host_views(input_tensors)

        def job():
            hosts_in = [[to_host(t) for t in group] for group in views_in]
            hosts_out = [host_buffer(t) for t in views_out]
            self._gloo_call(op, lambda: self._gloo.scatter(hosts_out, hosts_in, opts))
            copy_back(views_out, hosts_out)
        return self._launch(op, dev, list(output_tensors), job, keep=flat(input_tensors))

    # ---- point-to-point: posted now, finished in wait() ----
    def _post(self, op: str, issue: Callable[[], "dist.Work"]) -> "dist.Work":
        try:
            return issue()
        except Exception as e:  # noqa: BLE001
            raise DistributedError(
                f"ember {op} failed on rank {self._rank} of {self._size}: {e}") from e

    def _peer_ok(self, op: str, peer: int) -> None:
        if not 0 <= peer < self._size or peer == self._rank:
            raise DistributedError(
                f"ember {op}: peer rank {peer} is invalid for rank {self._rank} of {self._size}")

    # Point-to-point ops run on host views like collectives, but are posted to Gloo at the call
    # (after the current stream has produced or finished with the tensors) and finished in
    # wait(): a send queued behind a collective that waits for this rank's peer would deadlock.
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0):
        op = f"send to rank {dst}"
        dev = check_devices("send", tensors)
        self._peer_ok("send", dst)
        _current_stream_done(dev)
        hosts = [to_host(v) for v in host_views(tensors)]
        inner = self._post(op, lambda: self._gloo.send(hosts, dst, tag))
        return PendingWork(op, inner, lambda: hosts, list(tensors), self._timeout)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0):
        op = f"recv from rank {src}"
        dev = check_devices("recv", tensors)
        self._peer_ok("recv", src)
        _current_stream_done(dev)
        views = host_views(tensors)
        hosts = [host_buffer(v) for v in views]
        inner = self._post(op, lambda: self._gloo.recv(hosts, src, tag))
        return PendingWork(op, inner, lambda: copy_back(views, hosts), list(tensors),
                           self._timeout)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0):
        op = "recv from any rank"
        dev = check_devices("recv", tensors)
        _current_stream_done(dev)
        views = host_views(tensors)
        hosts = [host_buffer(v) for v in views]
        inner = self._post(op, lambda: self._gloo.recv_anysource(hosts, tag))
        work = _AnySourceWork(op, inner, lambda: copy_back(views, hosts), list(tensors),
                              self._timeout)
        return work

    # ---- coalescing: the fast path calls the *_coalesced methods above; the old style calls
    # each op as usual between these two, and waits on what _end_coalescing returns ----
    def _start_coalescing(self, device) -> None:
        pass

    def _end_coalescing(self, device):
        device = torch.device(device) if device is not None else None
        if device is None or device.type != "ember":
            return completed([])
        index = device.index if device.index is not None else torch.ember.current_device()
        last = self._comm.last.get(index)
        return last if last is not None else completed([])

    # ---- synchronization ----
    def barrier(self, opts=None):
        o = c10d.BarrierOptions()
        if opts is not None:
            o.timeout = opts.timeout
        # This thread's own queued work, not the device: another group's pending collective
        # may wait for a peer that is itself waiting in this barrier.
        _current_stream_done(torch.device("ember", torch.ember.current_device()))
        self._comm.call("barrier", lambda: self._gloo_call("barrier", lambda: self._gloo.barrier(o)))
        return completed([])

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        timeout = timeout if timeout is not None else self._timeout

        def job():
            try:
                self._gloo.monitored_barrier(timeout, wait_all_ranks)
            except Exception as e:  # noqa: BLE001
                raise DistributedError(
                    f"ember monitored_barrier failed on rank {self._rank}: {e}") from e
        self._comm.call("monitored_barrier", job)

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout
        self._gloo.set_timeout(timeout)

    def shutdown(self) -> None:
        self._comm.drain(self._timeout.total_seconds())
        self._comm.close("the process group was shut down")
        self._gloo.shutdown()

    def abort(self) -> None:
        self._comm.close("the process group was aborted")
        self._gloo.abort()


def _current_stream_done(device: torch.device) -> None:
    if device.type == "ember":
        torch.accelerator.current_stream(device.index).synchronize()


@untraced
class _AnySourceWork(PendingWork):
    """recv_anysource's Work: also says which rank the message came from."""

    _source = None

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        inner = self._inner
        done = super().wait(timeout)
        if self._source is None and inner is not None:
            self._source = inner._source_rank()
        return done

    def _source_rank(self) -> int:
        self.wait()
        return self._source
