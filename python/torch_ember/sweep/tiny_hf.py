"""Hugging Face models from reduced configs with random weights: no downloads, seconds each.

`tiny_config(model_type)` passes the small values below to the config class for every field it
has (also through its `attribute_map`, so GPT-2's n_embd gets the hidden size), and zeroes every
dropout so results are deterministic. `build(model_type, task)` makes the model, `inputs(...)`
a batch with labels for the task. Each architecture's quirks live in OVERRIDES."""
import dataclasses
import inspect

import torch

SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=37, max_position_embeddings=64, d_model=32, d_ff=37, d_kv=8, num_layers=2,
             num_decoder_layers=2, num_heads=4, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, ffn_dim=37)
# Per-architecture values that the generic ones get wrong.
OVERRIDES = {
    "qwen3": dict(head_dim=8), "gemma": dict(head_dim=8), "gemma2": dict(head_dim=8),
    "opt": dict(word_embed_proj_dim=32), "roberta": dict(pad_token_id=1),
    "gpt2": dict(n_positions=64), "bloom": dict(n_layer=2, n_head=4),
}
TASKS = ("causal", "masked", "seq2seq")


def _fields(cls) -> set:
    names = set(inspect.signature(cls.__init__).parameters)
    try:
        names |= {f.name for f in dataclasses.fields(cls)}
    except TypeError:
        pass
    return names


def tiny_config(model_type: str):
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    names = _fields(cls)
    alias = {v: k for k, v in getattr(cls, "attribute_map", {}).items()}  # hidden_size -> n_embd
    kw = {}
    for name, value in SMALL.items():
        if name in names:
            kw[name] = value
        elif name in alias and alias[name] in names:
            kw[alias[name]] = value
    for name in names:
        if "dropout" in name or name.endswith("_pdrop") or name in ("drop_path_rate", "layerdrop"):
            kw[name] = 0.0
    kw.update(OVERRIDES.get(model_type, {}))
    return cls(**kw)


def build(model_type: str, task: str, attn_implementation: str = "sdpa"):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    auto = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM, "seq2seq": AutoModelForSeq2SeqLM}[task]
    config = tiny_config(model_type)
    torch.manual_seed(0)
    try:
        return auto.from_config(config, attn_implementation=attn_implementation).eval()
    except ValueError as e:  # an architecture without SDPA support: its plain attention
        if "does not support an attention implementation" not in str(e):
            raise
        torch.manual_seed(0)
        return auto.from_config(config, attn_implementation="eager").eval()


def inputs(task: str, device, batch: int = 2, seq: int = 8, vocab: int = 99) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (batch, seq), generator=g)
    out = {"input_ids": ids, "labels": ids.clone()}
    if task == "seq2seq":
        dec = torch.randint(3, vocab, (batch, max(seq // 2, 2)), generator=g)
        out.update(decoder_input_ids=dec, labels=dec.clone())
    return {k: v.to(device) for k, v in out.items()}
