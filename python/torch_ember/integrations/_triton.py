"""Registers Ember's Triton backend as soon as Triton's backend registry exists."""


def register_backend(module) -> None:
    from torch_ember.triton.registration import register
    register(module)
