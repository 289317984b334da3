"""The training workloads of `ember bench train`, each built on the CPU from a fixed seed (so
every mode starts from the same weights and sees the same batches) with random weights and no
downloads:

  demo       the demo's reduced Qwen3 (torch_ember.demo.train_lm), batch 8 x seq 64
  qwen3-s    Qwen3 architecture, hidden 256, 4 layers, vocab 2048, batch 4 x seq 128
  qwen3-m    Qwen3 architecture, hidden 512, 6 layers, vocab 8192, batch 4 x seq 128
  resnet     a small ResNet (3 stages of BasicBlocks, 16/32/64 channels) on 32x32 images, batch 16

Language models train on the demo's byte corpus (next-byte prediction), the ResNet on random
images with random labels out of 10 classes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded

DTYPES = ("float32", "bfloat16")


@dataclass
class Workload:
    name: str
    unit: str  # what one step processes: "tokens" or "images"
    per_step: int  # units per step
    build: Callable  # () -> nn.Module, on the CPU
    batches: Callable  # (seed) -> iterator of (inputs, targets) on the CPU
    loss: Callable  # (model, inputs, targets) -> scalar loss
    describe: str


# --------------------------------------------------------------------------- language models

def _qwen3(hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, seq):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ..demo.train_lm import BOS, EOS, PAD

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, max_position_embeddings=max(seq, 256), tie_word_embeddings=True,
                      use_cache=False, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                      attn_implementation="sdpa")
    return Qwen3ForCausalLM(cfg)


def _corpus_batches(batch, seq):
    def batches(seed):
        import torch

        from ..demo.train_lm import get_batch, load_corpus

        data, gen = load_corpus(), torch.Generator().manual_seed(seed)
        while True:
            yield get_batch(data, batch, seq, gen)
    return batches


def _lm_loss(model, x, y):
    import torch.nn.functional as F

    logits = model(input_ids=x).logits
    # In float32 also under autocast: the softmax over the vocabulary is the sensitive part.
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


def _demo_model(seq):
    from ..demo.train_lm import build_model

    return lambda: build_model(seq)


def _lm(name, build, batch, seq, describe):
    return Workload(name, "tokens", batch * seq, build, _corpus_batches(batch, seq), _lm_loss, describe)


# --------------------------------------------------------------------------- ResNet

def _resnet(widths=(16, 32, 64), classes=10):
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers.append(BasicBlock(cin, w, 1 if i == 0 else 2))
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _image_batches(batch, size=32, classes=10):
    def batches(seed):
        import torch

        gen = torch.Generator().manual_seed(seed)
        while True:
            yield (torch.randn(batch, 3, size, size, generator=gen),
                   torch.randint(0, classes, (batch,), generator=gen))
    return batches


def _image_loss(model, x, y):
    import torch.nn.functional as F

    return F.cross_entropy(model(x).float(), y)


WORKLOADS = {
    "demo": _lm("demo", _demo_model(64), 8, 64, "demo Qwen3 (hidden 128, 2 layers, vocab 260), batch 8 x seq 64"),
    "qwen3-s": _lm("qwen3-s", lambda: _qwen3(256, 4, 8, 4, 32, 768, 2048, 128), 4, 128,
                   "Qwen3 hidden 256, 4 layers, heads 8/4, vocab 2048, batch 4 x seq 128"),
    "qwen3-m": _lm("qwen3-m", lambda: _qwen3(512, 6, 8, 4, 64, 1536, 8192, 128), 4, 128,
                   "Qwen3 hidden 512, 6 layers, heads 8/4, vocab 8192, batch 4 x seq 128"),
    "resnet": Workload("resnet", "images", 16, _resnet, _image_batches(16), _image_loss,
                       "ResNet, BasicBlocks at 16/32/64 channels, 32x32 images, batch 16, 10 classes"),
}
