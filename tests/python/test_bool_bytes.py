"""Bool tensors whose bytes are not 0/1 (a uint8 tensor viewed as bool): every non-zero byte is
true, as on the CPU, in eager kernels and in compiled graphs."""
import pytest
import torch

import torch_ember  # noqa: F401

BYTES = torch.tensor([0, 1, 2, 255, 0, 128, 3, 0], dtype=torch.uint8)

CASES = {
    "sum": lambda b: b.sum(),
    "int": lambda b: b.int(),
    "float": lambda b: b.float(),
    "eq": lambda b: b == torch.ones_like(b),
    "ne": lambda b: b != torch.ones_like(b),
    "logical_not": lambda b: ~b,
    "logical_and": lambda b: b & b.flip(0),
    "any_all": lambda b: torch.stack([b.any(), b.all(), b[1:4].all()]),
    "where": lambda b: torch.where(b, 1.0, -1.0),
    "masked_fill": lambda b: torch.zeros(8).to(b.device).masked_fill(b, 5.0),
    "mul_bool": lambda b: b * b,
    "add_int": lambda b: b + 1,
    "cumsum": lambda b: b.cumsum(0),
    "clone_int": lambda b: b.clone().to(torch.int64),
    "index_by_mask": lambda b: torch.arange(8.0).to(b.device)[b],
    "sort": lambda b: b.to(torch.int64).sort().values,
    "sort_bool": lambda b: b.sort(stable=True).indices,
    "argsort_descending": lambda b: b.argsort(stable=True, descending=True),
    "unique": lambda b: torch.unique(b, return_counts=True)[1],
    "unique_values": lambda b: torch.unique(b).int(),
    "mode": lambda b: b.view(2, 4).mode().values.int(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_non_standard_bool_bytes_read_as_true(name):
    fn = CASES[name]
    expected = fn(BYTES.view(torch.bool))
    actual = fn(BYTES.to("ember").view(torch.bool))
    torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("name", ["sum", "int", "eq", "where", "mul_bool", "add_int"])
def test_compiled_graph_reads_non_standard_bytes_as_true(name):
    torch._dynamo.reset()
    fn = CASES[name]
    compiled = torch.compile(fn, backend="ember")
    torch.testing.assert_close(compiled(BYTES.to("ember").view(torch.bool)).cpu(), fn(BYTES.view(torch.bool)))
