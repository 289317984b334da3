"""Legacy typed-storage classes (`torch.ember.FloatStorage`, ...), the counterparts of
`torch.cuda.FloatStorage`. `Tensor.storage_type()` looks them up on the device's module by
name, and `TypedStorage` takes the device from the module's last name part ("ember")."""
import torch
from torch.storage import _LegacyStorage


class _EmberLegacyStorage(_LegacyStorage):
    # Shared-memory and buffer constructors make sense for host memory only.
    @classmethod
    def from_buffer(cls, *args, **kwargs):
        raise RuntimeError("from_buffer: not available for ember storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: not available for ember storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: not available for ember storage")


def _storage_class(name, dtype):
    # `dtype` is read on the class itself (cls.dtype, cls._dtype), so it is a class property.
    prop = torch._utils.classproperty(lambda cls: dtype)
    return type(name, (_EmberLegacyStorage,), {"dtype": prop, "_dtype": prop, "__module__": __package__})


_QUANTIZED = (torch.qint8, torch.qint32, torch.quint8, torch.quint4x2, torch.quint2x4)

# The same names torch.cuda has, from PyTorch's own dtype table (quantized ones excluded:
# ember has no quantized tensors).
STORAGE_CLASSES = {name: _storage_class(name, dtype)
                   for dtype, name in torch.storage._dtype_to_storage_type_map().items()
                   if dtype not in _QUANTIZED}
