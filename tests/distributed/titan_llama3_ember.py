"""TorchTitan on ember: its llama3 debug model trained by TorchTitan unchanged, with a recipe of
ours (titan_llama3_ember.toml) and this module, which the recipe imports
(`experimental.custom_import`). From the repository root:

    PYTHONPATH=tests/distributed torchrun --nproc_per_node=2 -m torchtitan.train \
        --job.config_file tests/distributed/titan_llama3_ember.toml

What this module adds, all through TorchTitan's own extension points:
  - `import torch_ember` (also autoloaded by `import torch`): "ember" becomes the device that
    TorchTitan finds (`torch._utils._get_available_device_type`) and the "ember" c10d backend
    the default for it;
  - a TrainSpec "llama3_ember": TorchTitan's llama3 spec (model, parallelize, optimizer, loss)
    with a dataloader of locally generated tokens instead of the c4_test files (they live in
    TorchTitan's source tree, not in its wheel), no tokenizer (the data are token ids), and
    initial weights drawn on the CPU (Llama3CpuInit) so that every device starts alike.

tests/distributed/titan_cpu_reference.py runs the same recipe on CPU tensors over Gloo.
"""
import dataclasses

import torch
import torch_ember  # noqa: F401
from torch.utils.data import IterableDataset

from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.models.llama3 import get_train_spec, Transformer
from torchtitan.protocols.train_spec import register_train_spec

SPEC_NAME = "llama3_ember"


class ArithmeticTokens(IterableDataset):
    """Endless sequences a language model can learn: each counts from a random start by a random
    small stride, modulo `span` (64 of the vocabulary's ids), so the loss falls visibly within a
    few steps. Deterministic per dp rank, so a run on ember and one on CPU see the same batches."""

    def __init__(self, seq_len: int, vocab: int, dp_rank: int, seed: int = 0, span: int = 64):
        self.seq_len, self.vocab, self.dp_rank, self.seed = seq_len, min(vocab, span), dp_rank, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 1000 + self.dp_rank)
        n = self.seq_len
        while True:
            start = int(torch.randint(0, self.vocab, (1,), generator=g))
            stride = int(torch.randint(1, 4, (1,), generator=g))
            ids = (start + stride * torch.arange(n + 1)) % self.vocab
            yield {"input": ids[:-1].clone()}, ids[1:].clone()


def build_local_dataloader(dp_world_size: int, dp_rank: int, tokenizer, job_config, infinite: bool = True):
    """TorchTitan's stateful, data-parallel-aware dataloader over ArithmeticTokens."""
    vocab = get_train_spec().model_args[job_config.model.flavor].vocab_size
    ds = ArithmeticTokens(job_config.training.seq_len, vocab, dp_rank)
    return ParallelAwareDataloader(ds, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                   **dataclasses.asdict(job_config.training.dataloader),
                                   batch_size=job_config.training.local_batch_size)


class Llama3CpuInit(Transformer):
    """TorchTitan's llama3 Transformer, whose initial weights are drawn on the CPU from a fixed
    seed and then copied into the (sharded) parameters. Each device has its own generator (ember's
    is Philox, the CPU's mt19937), so weights drawn on the device would differ between the ember
    run and its CPU reference; drawn on the CPU they are the same, for any parallelism."""

    INIT_SEED = 0

    def init_weights(self, buffer_device=None):
        super().init_weights(buffer_device=buffer_device)  # buffers (RoPE) and the layout
        from torch.distributed.tensor import DTensor, distribute_tensor

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.INIT_SEED)
            with torch.device("cpu"):
                ref = Transformer(self.model_args)
                ref.init_weights()
        want = dict(ref.named_parameters())
        with torch.no_grad():
            for name, p in self.named_parameters():
                full = want[name].to(p.dtype)
                if isinstance(p, DTensor):
                    full = distribute_tensor(full.to(p.device), p.device_mesh, p.placements)
                    p.to_local().copy_(full.to_local())
                else:
                    p.copy_(full)


def _register() -> None:
    from torchtitan.protocols.train_spec import _extra_train_specs

    if SPEC_NAME not in _extra_train_specs:
        spec = dataclasses.replace(get_train_spec(), model_cls=Llama3CpuInit,
                                   build_dataloader_fn=build_local_dataloader,
                                   build_tokenizer_fn=None, build_validator_fn=None)
        register_train_spec(SPEC_NAME, spec)


_register()
