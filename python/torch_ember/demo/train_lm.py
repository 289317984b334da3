"""Train a tiny Qwen3-style language model on a bundled text corpus.

The model is small and randomly initialised, so the demo needs no network
access and finishes in seconds on a CPU. Running it on the "ember" device
shows end to end that forward, backward and optimizer steps work there, and
how many ops still fall back to the CPU.
"""

import argparse
import contextlib
import os
import time
from pathlib import Path

# Must be set before transformers is imported: the demo never downloads
# anything, and this makes any accidental hub access fail fast.
os.environ["HF_HUB_OFFLINE"] = "1"

import torch
import torch.nn.functional as F

CORPUS = Path(__file__).with_name("corpus.txt")
# Byte-level vocabulary: ids 0-255 are raw bytes, then a few specials. They
# are unused in training but keep the embedding shaped like a real tokenizer's.
BOS, EOS, PAD = 256, 257, 258
VOCAB_SIZE = 260  # 256 bytes + 4 specials (one spare)


def _import_backend(device):
    """Import torch_ember if the device needs it, so "ember" is registered.

    Kept optional so the demo still runs on "cpu" before the backend is built.
    """
    if str(device).split(":")[0] != "ember":
        return None
    try:
        import torch_ember
    except (ImportError, OSError) as exc:
        raise RuntimeError(f"device {device!r} needs torch_ember, which failed to import: {exc}") from exc
    return torch_ember


def _sync(device):
    # Kernels may run asynchronously; without this a timer would only measure
    # how long it took to queue the work.
    if device.type != "cpu":
        torch.accelerator.synchronize()


def load_corpus(path=CORPUS):
    """Tokenize the corpus as UTF-8 bytes: one token per byte, no vocab file."""
    data = path.read_bytes()
    return torch.tensor(list(data), dtype=torch.long)


def get_batch(data, batch, seq, generator):
    """Random windows of seq+1 bytes; inputs and targets are offset by one."""
    starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=generator)
    windows = torch.stack([data[s : s + seq + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def build_model(seq, attn="sdpa"):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # exercise grouped-query attention
        head_dim=32,
        max_position_embeddings=max(seq, 256),
        tie_word_embeddings=True,
        use_cache=False,  # training only; avoids building a KV cache
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attn_implementation=attn,
    )
    return Qwen3ForCausalLM(config)


def _report_fallbacks(backend):
    report = backend.fallback_report()
    print(report)
    if report:
        print(f"fallbacks: {len(report)} ops fell back to CPU ({report.total_calls} calls); "
              "each is a kernel ember does not have yet")
    else:
        print("fallbacks: none, every op ran on ember")


def train(device="ember", steps=20, batch=8, seq=64, dtype="float32", quiet=False, seed=0, attn="sdpa"):
    """Train for `steps` steps; returns {"losses", "tokens_per_s", "device"}.

    quiet=True suppresses the per-step lines and the config line; the final
    summary (and fallback report on ember) is still printed.
    """
    backend = _import_backend(device)
    try:
        device = torch.device(device)
    except RuntimeError as exc:
        raise RuntimeError(f"unknown device {device!r}; is the torch_ember extension built?") from exc
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")

    # Build and initialise on the CPU, then move: the starting weights are then
    # identical on every device, so loss curves can be compared across devices.
    if backend is not None:
        # The report at the end lists every op that left the device; per-op warnings would
        # only repeat it, and the count should cover this run alone.
        backend.set_fallback_mode("silent")
        backend.reset_fallback_stats()
    torch.manual_seed(seed)
    model = build_model(seq, attn).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    data = load_corpus()
    # Own generator so batch sampling does not depend on model-init RNG use.
    gen = torch.Generator().manual_seed(seed)
    # bfloat16 is mixed precision: weights and optimizer state stay float32.
    autocast = (
        torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        if dtype == "bfloat16"
        else contextlib.nullcontext()
    )

    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    if not quiet:
        print(
            f"Qwen3 {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
            f"heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, vocab {cfg.vocab_size} | "
            f"{n_params / 1e6:.2f}M params | device {device} | {dtype} | attn {attn} | "
            f"batch {batch} x seq {seq} | corpus {len(data)} bytes"
        )

    losses, rates = [], []
    width = len(str(steps))
    for step in range(1, steps + 1):
        x, y = get_batch(data, batch, seq, gen)
        _sync(device)
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        with autocast:
            logits = model(input_ids=x).logits
        # Loss in float32: softmax over the vocab is the precision-sensitive part.
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        _sync(device)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        rates.append(batch * seq / dt)
        if not quiet:
            print(f"step {step:>{width}}/{steps}  loss {losses[-1]:.4f}  tokens/s {rates[-1]:.0f}")

    # The first step pays one-off costs (allocation, kernel setup), so leave it out.
    timed = rates[1:] or rates
    tokens_per_s = sum(timed) / len(timed) if timed else 0.0
    if losses:
        verdict = "decreased" if losses[-1] < losses[0] else "did NOT decrease"
        print(f"avg tokens/s (steps 2+): {tokens_per_s:.0f}")
        print(f"final loss {losses[-1]:.4f}; loss {verdict} ({losses[0]:.4f} -> {losses[-1]:.4f})")
    if backend is not None:
        _report_fallbacks(backend)
    return {"losses": losses, "tokens_per_s": tokens_per_s, "device": str(device)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="ember")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="only print the final summary")
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the closing side-by-side of Ember eager and compiled")
    parser.add_argument("--compare-steps", type=int, default=8, metavar="N",
                        help="steps of each run in the side-by-side (default 8)")
    args = parser.parse_args(argv)
    # Import the backend before anything touches the device (train does it too;
    # the import is idempotent).
    _import_backend(args.device)
    train(
        device=args.device, steps=args.steps, batch=args.batch, seq=args.seq,
        dtype=args.dtype, quiet=args.quiet, seed=args.seed, attn=args.attn,
    )
    if str(args.device).split(":")[0] == "ember" and not args.no_compare:
        from .compare import side_by_side

        side_by_side(args.compare_steps, args.dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
