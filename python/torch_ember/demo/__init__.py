"""Demo: train a tiny Qwen3-style language model (python -m torch_ember.demo)."""
