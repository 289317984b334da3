"""Seeding and RNG state. Each device has a counter-based generator whose state is 16 bytes:
(seed, offset), as CUDA's Philox generator."""
from typing import Any, Iterable

import torch

from .. import _C
from .device import _device_index, device_count


def _generator(dev: Any = None) -> torch.Generator:
    return _C._get_default_generator(_device_index(dev))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = "ember") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "ember") -> None:
    _generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


class _DefaultGenerators:
    """torch.ember.default_generators[i]: device i's default generator, as in torch.cuda."""

    def __getitem__(self, i: int) -> torch.Generator:
        if not -device_count() <= i < device_count():
            raise IndexError(f"ember has {device_count()} devices, no generator {i}")
        return _generator(i % device_count())

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of `device` (AOTAutograd's RNG handling asks device modules for it)."""
    return _generator(device)
