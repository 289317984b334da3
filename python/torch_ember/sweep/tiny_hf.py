"""Hugging Face models from reduced configs with random weights: no downloads, seconds each.

`tiny_config(model_type)` starts from the config class's defaults and shrinks every size it
recognises by name (hidden sizes, layer and head counts, experts, image size, per-stage lists),
zeroes every dropout and keeps token ids inside the small vocabulary; it never mutates a default
config (v5 configs are strict dataclasses): it builds a new one from overrides. `build(model_type,
task)` makes the model, `inputs(...)` a batch with labels for the task. OVERRIDES holds the
per-architecture values the generic rules get wrong.
"""
import dataclasses
import inspect

import torch

VOCAB = 99
# name -> value for scalar fields, applied when the default is larger (or unset).
_SIZES = {
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "hidden_dim": 32,
    "word_embed_proj_dim": 32, "embedding_size": 32, "projection_dim": 32, "proj_size": 32,
    # Feed-forward sizes stay multiples of 16 bytes: grouped GEMMs on the CPU require it.
    "intermediate_size": 48, "ffn_dim": 48, "d_ff": 48, "n_inner": 48, "encoder_ffn_dim": 48,
    "decoder_ffn_dim": 48, "mlp_dim": 48, "ffn_hidden_size": 48, "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    # Multi-head latent attention (DeepSeek family), as its own tests shrink it.
    "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8,
    "rotary_dim": 4, "mamba_n_heads": 4,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_key_value_heads": 2, "n_kv_heads": 2, "head_dim": 8, "d_kv": 8,
    "kv_channels": 8,
    "max_position_embeddings": 128, "n_positions": 128, "max_seq_len": 128,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2,
    "image_size": 32, "patch_size": 4,
}
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
              "cls_token_id", "mask_token_id", "unk_token_id")
# Per-architecture values that the generic rules get wrong.
OVERRIDES = {
    "roberta": dict(pad_token_id=1), "xlm-roberta": dict(pad_token_id=1), "camembert": dict(pad_token_id=1),
    "bloom": dict(n_layer=2, n_head=4), "gpt2": dict(n_positions=128),
    "mamba2": dict(num_heads=8, head_dim=8),
}
TASKS = ("causal", "masked", "seq2seq", "image")


def _fields(cls) -> dict:
    """Field name -> default value of a config class (dataclass fields or __init__ defaults)."""
    out = {}
    try:
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                out[f.name] = f.default_factory()  # type: ignore[misc]
            else:
                out[f.name] = None
    except TypeError:
        pass
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name not in ("self", "kwargs") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            out.setdefault(name, None if p.default is inspect.Parameter.empty else p.default)
    return out


def _shrink_list(name, value):
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    if "depth" in name or "layers" in name:
        return [1] * len(value)
    if "head" in name:
        return [min(v, 2) for v in value]
    if any(k in name for k in ("hidden", "size", "dim", "channels")):
        return [min(v, 16) for v in value]
    return None


def _tiny_kwargs(cls) -> dict:
    fields = _fields(cls)
    alias = getattr(cls, "attribute_map", {}) or {}  # n_embd -> hidden_size, ...
    kw = {}
    for name, default in fields.items():
        canonical = alias.get(name, name)
        small = _SIZES.get(name, _SIZES.get(canonical))
        if small is not None and isinstance(default, (int, type(None))) and not isinstance(default, bool):
            if default is None or default > small or name in ("num_hidden_layers", "num_layers"):
                kw[name] = small
        elif isinstance(default, (list, tuple)):
            shrunk = _shrink_list(name, list(default))
            if shrunk is not None:
                kw[name] = shrunk
        if "dropout" in name or name.endswith("_pdrop") or name in ("drop_path_rate", "layerdrop"):
            if isinstance(default, float) or default is None:
                kw[name] = 0.0
        if name in _TOKEN_IDS and isinstance(default, int) and default >= VOCAB:
            kw[name] = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}.get(name, 3)
        if name == "vocab_size":
            kw[name] = VOCAB
        if name == "layer_types" and isinstance(default, (list, tuple)):
            kw[name] = None  # derived from the layer count at construction
    if "kv_lora_rank" in fields and "num_key_value_heads" in kw:  # latent attention: one kv head per head
        kw["num_key_value_heads"] = kw.get("num_attention_heads", 4)
    return {k: v for k, v in kw.items() if k in fields}


def _tiny(cls, model_type: str | None = None):
    """A reduced config of class `cls`; composite configs (text + vision + audio parts) get each
    part reduced the same way."""
    kw = _tiny_kwargs(cls)
    subs = getattr(cls, "sub_configs", None) or {}
    if subs:
        try:
            defaults = cls()
        except Exception:
            defaults = None
        for name in subs:
            part = getattr(defaults, name, None) if defaults is not None else None
            if part is not None and hasattr(part, "to_dict"):
                try:
                    kw[name] = _tiny(type(part))
                except Exception:
                    pass  # keep that part's defaults
    if model_type is not None:
        kw.update(OVERRIDES.get(model_type, {}))
    config = cls(**kw)
    return _keep_every_layer_type(cls, kw, config)


def _keep_every_layer_type(cls, kw, config):
    """Hybrid models (linear and full attention, sliding and global) derive their per-layer pattern
    from the layer count; two layers may then all be of one kind, which leaves the other kind
    untested or the model unable to run. Give the reduced model one layer of each kind."""
    small = getattr(config, "layer_types", None)
    if not isinstance(small, (list, tuple)) or "layer_types" not in _fields(cls):
        return config
    try:
        full = getattr(cls(), "layer_types", None) or []
    except Exception:
        return config
    kinds = list(dict.fromkeys(full))
    if len(kinds) < 2 or set(small) >= set(kinds):
        return config
    layers = {name: len(kinds) for name in ("num_hidden_layers", "num_layers") if name in kw}
    try:
        return cls(**{**kw, **layers, "layer_types": kinds})
    except Exception:
        return config


def tiny_config(model_type: str):
    from transformers import CONFIG_MAPPING

    return _tiny(CONFIG_MAPPING[model_type], model_type)


def _auto(task):
    import transformers as t
    return {"causal": t.AutoModelForCausalLM, "masked": t.AutoModelForMaskedLM,
            "seq2seq": t.AutoModelForSeq2SeqLM, "image": t.AutoModelForImageClassification}[task]


def _break_ties(model) -> None:
    """Parameters that start constant (zero-initialized routers and biases) make every expert or
    key score the same, and then which of several equal candidates topk or argmax picks is not
    specified: CPU and other devices may differ without either being wrong. A little seeded
    noise on those parameters makes the comparison meaningful."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and p.is_floating_point() and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype) * 0.02)


def build(model_type: str, task: str, attn_implementation: str = "sdpa", break_ties: bool = True):
    config = tiny_config(model_type)
    auto = _auto(task)
    torch.manual_seed(0)
    try:
        model = auto.from_config(config, attn_implementation=attn_implementation).eval()
    except ValueError as e:  # an architecture without SDPA support: its plain attention
        if "does not support an attention implementation" not in str(e):
            raise
        torch.manual_seed(0)
        model = auto.from_config(config, attn_implementation="eager").eval()
    if break_ties:
        _break_ties(model)
    return model


def inputs(task: str, device, batch: int = 2, seq: int = 8, vocab: int = VOCAB, config=None) -> dict:
    g = torch.Generator().manual_seed(1)
    if task == "image":
        size = getattr(config, "image_size", 32) if config is not None else 32
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(config, "num_channels", 3) if config is not None else 3
        labels = max(getattr(config, "num_labels", 2), 1) if config is not None else 2
        out = {"pixel_values": torch.randn(batch, channels, size, size, generator=g),
               "labels": torch.randint(0, labels, (batch,), generator=g)}
        return {k: v.to(device) for k, v in out.items()}
    ids = torch.randint(3, vocab, (batch, seq), generator=g)
    out = {"input_ids": ids, "labels": ids.clone()}
    if task == "seq2seq":
        dec = torch.randint(3, vocab, (batch, max(seq // 2, 2)), generator=g)
        out.update(decoder_input_ids=dec, labels=dec.clone())
    return {k: v.to(device) for k, v in out.items()}


def architectures(tasks=TASKS) -> list:
    """(model_type, task) for every architecture transformers maps for the tasks, each model type
    once (its first task in `tasks` order)."""
    from transformers.models.auto import modeling_auto as m

    mappings = {"causal": m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "masked": m.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                "seq2seq": m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
                "image": m.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES}
    seen, out = set(), []
    for task in tasks:
        for model_type in mappings[task]:
            if model_type not in seen:
                seen.add(model_type)
                out.append((model_type, task))
    return out
