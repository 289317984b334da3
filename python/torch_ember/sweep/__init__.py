"""Sweeps over other people's models: Hugging Face architectures built from reduced configs."""
