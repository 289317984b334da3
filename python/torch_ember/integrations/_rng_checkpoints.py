"""Training checkpoints keep ember's RNG state: transformers' Trainer and accelerate's save_state.

Both write the Python, NumPy and CPU generator states to a file, plus the state of each
accelerator they know by name (CUDA, XPU, NPU, ...), and restore them on resume. Without ember's
state a resumed run draws different dropout masks than an uninterrupted one. Each wrapper lets
the library write its file, then adds ember's generator states under a key of the library's own
naming style ("ember" for the Trainer, "torch_ember_manual_seed" for accelerate); on resume the
library restores what it knows and the wrapper sets ember's state from the same file. A
checkpoint without the key (written before, or on another machine) leaves ember's state alone.
"""
import functools
import os

import torch


def _ember_in_use() -> bool:
    return torch.ember.is_available() and torch.ember.is_initialized()


def _add_to_file(path, key: str, load) -> None:
    if not _ember_in_use() or not os.path.isfile(path):
        return
    states = load(path)
    states[key] = torch.ember.get_rng_state_all()
    torch.save(states, path)


def _restore_from_file(path, key: str, load) -> None:
    if not torch.ember.is_available() or not os.path.isfile(path):
        return
    states = load(path)
    if key in states:
        saved = list(states[key])
        count = min(len(saved), torch.ember.device_count())
        for index in range(count):
            torch.ember.set_rng_state(saved[index], index)


def patch_trainer(module) -> None:
    """transformers.trainer: `_save_rng_state` / `_load_rng_state`."""
    from transformers.trainer_pt_utils import safe_globals

    def load(path):
        with safe_globals():
            return torch.load(path, weights_only=True)

    def rng_file(trainer, folder) -> str:
        name = "rng_state.pth" if trainer.args.world_size <= 1 else f"rng_state_{trainer.args.process_index}.pth"
        return os.path.join(folder, name)

    cls = module.Trainer
    save, restore = cls._save_rng_state, cls._load_rng_state

    @functools.wraps(save)
    def _save_rng_state(self, output_dir: str) -> None:
        save(self, output_dir)
        _add_to_file(rng_file(self, output_dir), "ember", load)

    @functools.wraps(restore)
    def _load_rng_state(self, checkpoint) -> None:
        restore(self, checkpoint)
        if checkpoint is not None:
            _restore_from_file(rng_file(self, checkpoint), "ember", load)

    cls._save_rng_state, cls._load_rng_state = _save_rng_state, _load_rng_state


def patch_accelerate(module) -> None:
    """accelerate.checkpointing: `save_accelerator_state` / `load_accelerator_state`."""
    import inspect
    from pathlib import Path

    from . import rebind

    from accelerate.utils import RNG_STATE_NAME, load

    save, restore = module.save_accelerator_state, module.load_accelerator_state

    def rng_file(original, args, kwargs) -> Path:
        bound = inspect.signature(original).bind(*args, **kwargs).arguments
        folder = bound.get("output_dir", bound.get("input_dir"))
        return Path(folder) / f"{RNG_STATE_NAME}_{bound['process_index']}.pkl"

    @functools.wraps(save)
    def save_accelerator_state(*args, **kwargs):
        result = save(*args, **kwargs)
        _add_to_file(rng_file(save, args, kwargs), "torch_ember_manual_seed", load)
        return result

    @functools.wraps(restore)
    def load_accelerator_state(*args, **kwargs):
        result = restore(*args, **kwargs)
        _restore_from_file(rng_file(restore, args, kwargs), "torch_ember_manual_seed", load)
        return result

    module.save_accelerator_state, module.load_accelerator_state = save_accelerator_state, load_accelerator_state
    # accelerate.accelerator binds both names when it imports this module.
    rebind(save, save_accelerator_state, ("accelerate.accelerator",), ("save_accelerator_state",))
    rebind(restore, load_accelerator_state, ("accelerate.accelerator",), ("load_accelerator_state",))
