"""Sparse tensors on ember: refused with an error that says so and names the way out.

Ember has no sparse kernels. With nothing registered for the SparsePrivateUse1 dispatch key,
the first sparse op (a sparse embedding's gradient, `.to_sparse()`, moving a sparse tensor to
the device) failed with the dispatcher's list of every backend it knows. A fallback on that key
(and the CSR one) raises this message instead, and so do the dense-to-sparse conversions (the
CPU fallback would build a CPU sparse tensor it cannot move back).
"""
import torch

_lib = None
_conversions = None
_TO_SPARSE = ("_to_sparse", "_to_sparse.sparse_dim", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr",
              "_to_sparse_bsc")
# The compressed-layout constructors (sparse_csr_tensor and its kin) build the tensor without
# dispatching on a sparse key: refused before the tensor exists, whose accessors would fail
# with contradictory messages ("expected sparse row compressed layout but got SparseCsr").
_COMPRESSED_CONSTRUCTORS = ("sparse_compressed_tensor.comp_plain_value_size", "sparse_compressed_tensor.comp_plain_value",
                            "_sparse_compressed_tensor_unsafe", "_sparse_csr_tensor_unsafe",
                            "_sparse_csc_tensor_unsafe", "_sparse_bsr_tensor_unsafe", "_sparse_bsc_tensor_unsafe")


def _refuse(op, *args, **kwargs):
    raise NotImplementedError(
        f"ember: sparse tensors are not supported on ember devices ({op}). Keep sparse tensors on the "
        "CPU, or use dense gradients: nn.Embedding(..., sparse=False) / nn.EmbeddingBag(..., sparse=False) "
        "with a dense optimizer instead of SparseAdam.")


def _conversion(name):
    def refuse(*args, **kwargs):
        _refuse("aten." + name)
    return refuse


def install() -> None:
    global _lib, _conversions
    if _lib is not None:
        return
    _lib = torch.library.Library("_", "IMPL")
    for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
        _lib.fallback(_refuse, dispatch_key=key)
    _conversions = torch.library.Library("aten", "IMPL")
    for name in _TO_SPARSE:
        _conversions.impl(name, _conversion(name), "PrivateUse1")
    for name in _COMPRESSED_CONSTRUCTORS:
        # Composite ops: PyTorch's kernel would run at the autograd key, or at the backend key
        # when called below autograd (moving a CPU CSR tensor to ember), so the refusal goes to both.
        for key in ("AutogradPrivateUse1", "PrivateUse1"):
            _conversions.impl(name, _conversion(name), key)
