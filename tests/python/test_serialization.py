"""torch.save / torch.load of ember tensors, storages and state dicts."""
import io
import warnings

import pytest
import torch


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("map_location, expected", [
    (None, "ember:0"),
    ("ember", "ember:0"),
    ("ember:0", "ember:0"),
    ("ember:1", "ember:1"),
    (torch.device("ember", 1), "ember:1"),
    ("cpu", "cpu"),
    ({"ember:0": "ember:1"}, "ember:1"),
    (lambda storage, loc: storage, "cpu"),
])
@pytest.mark.parametrize("weights_only", [True, False])
def test_tensor_roundtrip_map_location(map_location, expected, weights_only):
    x = torch.randn(5, 7)
    y = _roundtrip(x.to("ember"), map_location=map_location, weights_only=weights_only)
    assert y.device == torch.device(expected)
    torch.testing.assert_close(y.cpu(), x, rtol=0, atol=0)


def test_load_without_map_location_keeps_saved_device():
    x = torch.arange(6.0)
    y = _roundtrip(x.to("ember:1"), weights_only=True)
    assert y.device == torch.device("ember:1")
    torch.testing.assert_close(y.cpu(), x)


def test_cpu_tensor_loads_onto_ember():
    x = torch.arange(10, dtype=torch.int64)
    y = _roundtrip(x, map_location="ember", weights_only=True)
    assert y.device.type == "ember"
    torch.testing.assert_close(y.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool,
                                   torch.complex64])
def test_dtypes(dtype):
    x = (torch.arange(-6, 18).reshape(4, 6) % 5).to(dtype)
    y = _roundtrip(x.to("ember"), weights_only=True)
    assert y.device.type == "ember" and y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.cpu(), x, rtol=0, atol=0)


def test_storage_sharing_preserved():
    base = torch.arange(24.0).reshape(4, 6).to("ember")
    row, col, t = base[1], base[:, 2], base.t()
    loaded = _roundtrip({"base": base, "row": row, "col": col, "t": t}, weights_only=True)
    lb, lr, lc, lt = loaded["base"], loaded["row"], loaded["col"], loaded["t"]
    for v in (lr, lc, lt):
        assert v.device.type == "ember"
        assert _same_storage(v, lb)
    assert lr.storage_offset() == 6 and lc.storage_offset() == 2
    assert lc.stride() == (6,) and lt.stride() == (1, 6)
    # Still one storage: writing through one view shows up in the others.
    lr.fill_(-1.0)
    expected = torch.arange(24.0).reshape(4, 6)
    expected[1] = -1.0
    torch.testing.assert_close(lb.cpu(), expected)
    torch.testing.assert_close(lc.cpu(), expected[:, 2])
    torch.testing.assert_close(lt.cpu(), expected.t())


def test_views_saved_alone_keep_their_storage():
    base = torch.arange(10.0).to("ember")
    v = base[3:6]
    y = _roundtrip(v, weights_only=True)
    # torch.save stores the whole storage, so offset and storage size survive.
    assert y.storage_offset() == 3
    assert y.untyped_storage().nbytes() == 10 * 4
    torch.testing.assert_close(y.cpu(), torch.arange(3.0, 6.0))


@pytest.mark.parametrize("make", [
    lambda x: x.t(),
    lambda x: x[:, ::2],
    lambda x: x[1:, 1:3],
    lambda x: x.unsqueeze(1).expand(4, 3, 6),
    lambda x: torch.as_strided(x, (3, 2), (5, 2), 1),
], ids=["transpose", "step", "slice", "expand", "as_strided"])
def test_non_contiguous(make):
    cpu = torch.randn(4, 6)
    x = make(cpu.to("ember"))
    y = _roundtrip(x, weights_only=True)
    assert y.device.type == "ember"
    assert y.shape == x.shape and y.stride() == x.stride()
    assert y.storage_offset() == x.storage_offset()
    torch.testing.assert_close(y.cpu(), make(cpu), rtol=0, atol=0)


def test_module_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 2)).to("ember")
    sd = model.state_dict()
    buf = io.BytesIO()
    torch.save(sd, buf)
    for map_location, dev in [(None, "ember:0"), ("cpu", "cpu"), ("ember:1", "ember:1")]:
        buf.seek(0)
        loaded = torch.load(buf, map_location=map_location, weights_only=True)
        assert list(loaded) == list(sd)
        for k, v in loaded.items():
            assert v.device == torch.device(dev), k
            torch.testing.assert_close(v.cpu(), sd[k].cpu(), rtol=0, atol=0)
    buf.seek(0)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 2)).to("ember")
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    x = torch.randn(3, 4)
    torch.testing.assert_close(fresh(x.to("ember")).cpu(), model(x.to("ember")).cpu())


def test_module_state_dict_loads_into_cpu_module():
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 3).to("ember")
    cpu_model = torch.nn.Linear(5, 3)
    cpu_model.load_state_dict(_roundtrip(model.state_dict(), map_location="cpu",
                                         weights_only=True))
    x = torch.randn(2, 5)
    torch.testing.assert_close(cpu_model(x), model(x.to("ember")).cpu())


def test_optimizer_state_dict():
    model = torch.nn.Linear(3, 2).to("ember")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3, device="ember")).sum().backward()
    opt.step()
    sd = _roundtrip(opt.state_dict(), weights_only=True)
    exp_avg = sd["state"][0]["exp_avg"]
    assert exp_avg.device.type == "ember"
    torch.testing.assert_close(exp_avg.cpu(), opt.state_dict()["state"][0]["exp_avg"].cpu())


def test_parameter_roundtrip():
    p = torch.nn.Parameter(torch.randn(3, 3).to("ember"))
    q = _roundtrip(p, weights_only=True)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad
    assert q.device.type == "ember"
    torch.testing.assert_close(q.detach().cpu(), p.detach().cpu())


def test_zero_element_and_zero_dim():
    loaded = _roundtrip({"empty": torch.empty(0, 3, device="ember"),
                         "scalar": torch.tensor(2.5).to("ember")}, weights_only=True)
    assert loaded["empty"].shape == (0, 3) and loaded["empty"].device.type == "ember"
    assert loaded["scalar"].shape == () and loaded["scalar"].item() == 2.5


def test_save_to_file(tmp_path):
    x = torch.randn(8, 8).to("ember")
    path = tmp_path / "x.pt"
    torch.save(x, path)
    y = torch.load(path, weights_only=True)
    assert y.device.type == "ember"
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_untyped_storage_ember():
    s = torch.UntypedStorage(16)
    assert hasattr(s, "ember")
    e = s.ember()
    assert e.device.type == "ember" and e.nbytes() == 16
    assert e.is_ember
    t = torch.arange(4, dtype=torch.int32)
    es = t.untyped_storage().ember()
    back = torch.empty(0, dtype=torch.int32).set_(es.cpu())
    torch.testing.assert_close(back, t)
    ember_storage = torch.arange(3.0).to("ember").untyped_storage()
    assert ember_storage.device.type == "ember"
    assert ember_storage.ember().device.type == "ember"
    assert torch.frombuffer(bytearray(bytes(ember_storage.cpu())), dtype=torch.float32).tolist() \
        == [0.0, 1.0, 2.0]


def test_untyped_storage_roundtrip():
    x = torch.arange(4, dtype=torch.int16).to("ember:1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare storage loads back as a (deprecated) TypedStorage
        s = _roundtrip(x.untyped_storage(), weights_only=True)
        s = s.untyped() if isinstance(s, torch.TypedStorage) else s
    assert s.device == torch.device("ember:1") and s.nbytes() == 8
    assert torch.empty(0, dtype=torch.int16).set_(s.cpu()).tolist() == [0, 1, 2, 3]


def test_typed_storage_roundtrip():
    x = torch.arange(5, dtype=torch.float32).to("ember")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated (warned once per process)
        s = x.storage()
    y = _roundtrip(s, weights_only=False)
    assert y.device.type == "ember"
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("dtype, name", [(torch.float32, "FloatStorage"), (torch.int64, "LongStorage"),
                                         (torch.bool, "BoolStorage"), (torch.bfloat16, "BFloat16Storage"),
                                         (torch.complex64, "ComplexFloatStorage")])
def test_legacy_storage_classes(dtype, name):
    # What torch.cuda.FloatStorage and friends are for CUDA: storage_type() names them, and
    # constructing one allocates ember memory of that dtype.
    cls = getattr(torch.ember, name)
    x = torch.ones(3, dtype=dtype, device="ember")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        assert x.storage_type() is cls
        assert cls.dtype == dtype
        s = cls(4)
        assert s.device.type == "ember" and s.dtype == dtype and s.size() == 4
        wrapped = cls(wrap_storage=x.untyped_storage())
        assert wrapped.tolist() == x.cpu().tolist()
        with pytest.raises(RuntimeError, match="from_buffer: not available for ember storage"):
            cls.from_buffer(b"\0" * 8)
