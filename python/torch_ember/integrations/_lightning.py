"""Lightning: `L.Trainer(accelerator="ember", precision="bf16-mixed" | "16-mixed")`, and the same
for `L.Fabric` and for the standalone `pytorch_lightning` package.

`accelerator="auto"` (the default) and `"gpu"` choose ember when Lightning finds no TPU, MPS or
CUDA device, as they would choose CUDA.

Registers an `EmberAccelerator` under the name "ember" and corrects two choices the accelerator
connector makes from hard-coded device names: a single-device strategy is placed on the root
device only for cuda/gpu/mps (anything else lands on the CPU), and mixed precision autocasts
for "cuda" unless the accelerator is cpu or mps (so ember ops would silently run in float32).
"""
import functools
import importlib
from typing import Any

import torch


def _parse(devices: Any) -> list:
    count = torch.ember.device_count()
    if devices in ("auto", -1, "-1", None):
        return list(range(count))
    if isinstance(devices, int):
        return list(range(devices))
    if isinstance(devices, str):
        devices = devices.strip()
        if "," in devices:
            return [int(d) for d in devices.split(",") if d.strip()]
        return list(range(int(devices)))
    return [int(d) for d in devices]


def _accelerator_class(Accelerator) -> type:
    class EmberAccelerator(Accelerator):
        """Lightning's accelerator for ember devices."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != "ember":
                raise ValueError(f"EmberAccelerator: expected an ember device, got {device}")
            torch.ember.set_device(device)

        def teardown(self) -> None:
            pass

        @staticmethod
        def parse_devices(devices: Any) -> list:
            indices = _parse(devices)
            count = torch.ember.device_count()
            bad = [i for i in indices if not 0 <= i < count]
            if bad or not indices:
                raise ValueError(f"EmberAccelerator: devices={devices!r} asks for ember devices {indices}, "
                                 f"but there are {count} (EMBER_DEVICE_COUNT sets how many)")
            if len(indices) > 1:
                # Lightning's DDP wraps the model on a torch.cuda.Stream, which fails without CUDA
                # ("torch.cuda.Stream requires CUDA support") after the processes have started.
                raise ValueError(f"EmberAccelerator: devices={devices!r} asks for {len(indices)} ember devices; "
                                 "Lightning's multi-device strategies need CUDA streams, so train on one "
                                 "(devices=1), or use torch.distributed with the 'ember' backend directly")
            return indices

        @staticmethod
        def get_parallel_devices(devices: Any) -> list:
            return [torch.device("ember", i) for i in devices]

        @staticmethod
        def auto_device_count() -> int:
            # `devices="auto"` means one device: ember's virtual devices share the host's cores,
            # so data parallelism across them gains nothing, and Lightning's DDP assumes CUDA.
            return 1

        @staticmethod
        def is_available() -> bool:
            return torch.ember.is_available()

        @staticmethod
        def name() -> str:
            return "ember"

        def get_device_stats(self, device: Any) -> dict:
            return dict(torch.ember.memory_stats(device))

        @classmethod
        def register_accelerators(cls, registry) -> None:
            registry.register(cls.name(), cls, description=cls.__name__)

    return EmberAccelerator


def register_accelerator(module) -> None:
    """lightning.pytorch.accelerators (or pytorch_lightning's, or lightning.fabric's)."""
    registry = module.AcceleratorRegistry if hasattr(module, "AcceleratorRegistry") else module.ACCELERATOR_REGISTRY
    cls = _accelerator_class(module.Accelerator)
    if "ember" not in registry:
        cls.register_accelerators(registry)
    module.EmberAccelerator = cls


def _is_ember(connector) -> bool:
    flag = connector._accelerator_flag
    return flag == "ember" or getattr(type(flag), "__name__", "") == "EmberAccelerator"


def patch_connector(module) -> None:
    """The Trainer's `_AcceleratorConnector` (lightning.pytorch or pytorch_lightning)."""
    # The same code ships as `lightning.pytorch` and as the standalone `pytorch_lightning`.
    root = module.__name__.rsplit(".trainer.", 1)[0]
    _patch(module._AcceleratorConnector, root, "_precision_flag", "_precision_plugin_flag")


def patch_fabric_connector(module) -> None:
    """Fabric's `_Connector` (lightning.fabric)."""
    _patch(module._Connector, module.__name__.rsplit(".", 1)[0], "_precision_input", "_precision_instance")


def _patch(cls, root: str, precision_attr: str, plugin_attr: str) -> None:
    MixedPrecision = importlib.import_module(f"{root}.plugins.precision").MixedPrecision
    SingleDeviceStrategy = importlib.import_module(f"{root}.strategies").SingleDeviceStrategy
    choose_strategy, init_precision = cls._choose_strategy, cls._check_and_init_precision

    @functools.wraps(choose_strategy)
    def _choose_strategy(self):
        if _is_ember(self) and self._num_nodes_flag == 1 and len(self._parallel_devices) <= 1:
            return SingleDeviceStrategy(device=self._parallel_devices[0])
        return choose_strategy(self)

    @functools.wraps(init_precision)
    def _check_and_init_precision(self):
        precision = getattr(self, precision_attr)
        if _is_ember(self) and getattr(self, plugin_attr) is None and precision in ("16-mixed", "bf16-mixed"):
            scaler = torch.amp.GradScaler("ember") if precision == "16-mixed" else None
            return MixedPrecision(precision, "ember", scaler)
        return init_precision(self)

    cls._choose_strategy = _choose_strategy
    cls._check_and_init_precision = _check_and_init_precision
    _prefer_ember_for_auto(cls)


def _prefer_ember_for_auto(cls) -> None:
    """`accelerator="auto"` and `"gpu"` choose ember where Lightning finds no device of its own."""
    choose_auto, choose_gpu = cls._choose_auto_accelerator, cls._choose_gpu_accelerator_backend

    @functools.wraps(choose_auto)
    def _choose_auto_accelerator(*args) -> str:
        chosen = choose_auto(*args)
        return "ember" if chosen == "cpu" and torch.ember.is_available() else chosen

    @functools.wraps(choose_gpu)
    def _choose_gpu_accelerator_backend(*args) -> str:
        try:
            return choose_gpu(*args)
        except Exception:
            if torch.ember.is_available():
                return "ember"
            raise

    cls._choose_auto_accelerator = staticmethod(_choose_auto_accelerator)
    cls._choose_gpu_accelerator_backend = staticmethod(_choose_gpu_accelerator_backend)
