"""`ember upstream` on a tiny synthetic PyTorch tree: tmp/test/test_fake.py, a device-generic file
whose tests pass, fail only on the accelerator, fail everywhere, are skipped (onlyCUDA), exist only
for the accelerator (onlyPRIVATEUSE1), abort the process and hang it. The runner must classify
each, pin the crash and the hang on their tests, carry on after both, and rerun the failures on
the CPU. The real files need a PyTorch checkout: `python -m torch_ember.cli upstream --help`."""
import json
import textwrap

import pytest
from torch_ember import cli
from torch_ember.upstream import run as upstream

HANG_TIMEOUT = 8  # seconds without output before the hanging test is killed

FAKE_TEST = textwrap.dedent('''
    import os
    import time

    import torch
    from torch.testing._internal.common_device_type import (
        instantiate_device_type_tests, onlyCUDA, onlyPRIVATEUSE1)
    from torch.testing._internal.common_utils import TestCase, run_tests


    # unittest runs these in name order: a, b, c, ... so the crash and the hang come mid-file.
    class TestFake(TestCase):
        def test_a_pass(self, device):
            self.assertEqual(torch.ones(3, device=device).sum().item(), 3)

        def test_b_accel_failure(self, device):
            assert device == "cpu", f"not on the cpu: {device} at 0x7f3a 12"

        def test_c_crash(self, device):
            if device != "cpu":
                os.abort()

        def test_d_hang(self, device):
            if device != "cpu":
                time.sleep(600)

        @onlyCUDA
        def test_e_cuda_only(self, device):
            pass

        def test_f_fails_everywhere(self, device):
            self.fail("broken everywhere 42")

        @onlyPRIVATEUSE1
        def test_g_accel_only(self, device):
            raise RuntimeError("accelerator only 7")

        def test_h_after(self, device):
            self.assertEqual(torch.zeros(2, device=device).sum().item(), 0)


    instantiate_device_type_tests(TestFake, globals())

    if __name__ == "__main__":
        run_tests()
''')

EXPECTED = {
    "a_pass": "passed", "b_accel_failure": "failed", "c_crash": "crash", "d_hang": "hang",
    "e_cuda_only": "skipped", "f_fails_everywhere": "failed", "g_accel_only": "failed",
    "h_after": "passed",
}


def _short(nodeid: str) -> str:
    """TestFakePRIVATEUSE1::test_b_accel_failure_ember -> b_accel_failure."""
    return nodeid.rsplit("::", 1)[-1].removeprefix("test_").removesuffix("_ember")


def _fake_tree(root):
    (root / "test").mkdir(parents=True)
    (root / "test" / "test_fake.py").write_text(FAKE_TEST)
    return root


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """One run through the `ember` command line, as a user would start it."""
    src = _fake_tree(tmp_path_factory.mktemp("pytorch"))
    out = tmp_path_factory.mktemp("out")
    rc = cli.main(["upstream", "--pytorch-src", str(src), "--files", "test_fake.py,test_absent.py",
                   "--per-test-timeout", str(HANG_TIMEOUT), "--out", str(out), "--no-progress"])
    data = json.loads((out / "upstream.json").read_text())
    by_name = {_short(r["nodeid"]): r for r in data["results"]}
    return rc, data, by_name, out


def test_every_outcome_classified(fake_run):
    rc, data, by_name, _ = fake_run
    assert rc == 0
    assert {name: r["status"] for name, r in by_name.items()} == EXPECTED
    assert data["summary"]["totals"] == {"passed": 2, "failed": 3, "skipped": 1, "crash": 1,
                                         "hang": 1, "not run": 0}
    assert data["summary"]["ran"] == 7
    assert data["summary"]["pass_rate"] == round(2 / 7, 4)
    assert by_name["e_cuda_only"]["reason"] == "Only runs on cuda"
    assert by_name["b_accel_failure"]["type"] == "AssertionError"
    assert by_name["g_accel_only"]["message"] == "RuntimeError: accelerator only 7"


def test_crash_and_hang_pinned_on_their_tests(fake_run):
    _, data, by_name, _ = fake_run
    crash, hang = by_name["c_crash"], by_name["d_hang"]
    assert "SIGABRT" in crash["message"] and "test_c_crash" in crash["message"], crash
    assert crash["when"] == "call"
    assert hang["message"] == f"no output for {HANG_TIMEOUT} seconds: killed"
    info = data["files"]["test_fake.py"]
    # One child died on the crash and one was killed on the hang; a third ran e..h.
    assert info["children"] == 3
    assert info["collected"] == len(EXPECTED)
    assert any("test_c_crash_ember" in n and n.startswith("crash") for n in info["notes"])
    assert any("test_d_hang_ember" in n and n.startswith("hang") for n in info["notes"])


def test_cpu_control(fake_run):
    _, data, by_name, _ = fake_run
    b = by_name["b_accel_failure"]
    assert b["cpu_nodeid"] == "test_fake.py::TestFakeCPU::test_b_accel_failure_cpu"
    assert (b["control"], b["cpu_status"]) == ("ember's", "passed")
    # The crash and the hang happen only off the CPU: ember's too.
    assert by_name["c_crash"]["control"] == "ember's"
    assert by_name["d_hang"]["control"] == "ember's"
    f = by_name["f_fails_everywhere"]
    assert (f["control"], f["cpu_status"]) == ("also fails on CPU", "failed")
    assert f["cpu_message"] == "AssertionError: broken everywhere 42"
    g = by_name["g_accel_only"]
    assert (g["control"], g["cpu_status"]) == ("no CPU counterpart", "skipped")
    assert "control" not in by_name["a_pass"]  # only failures get a control run
    assert data["summary"]["control"] == {"ember's": 3, "also fails on CPU": 1,
                                          "no CPU counterpart": 1}


def test_summary_and_reports(fake_run):
    _, data, _, out = fake_run
    s = data["summary"]
    groups = {(g["type"], g["message"]): g for g in s["failure_groups"]}
    assert len(groups) == s["failure_group_count"] == 5
    b = groups[("AssertionError", "not on the cpu: ember:N at 0x? N")]
    assert b["count"] == 1 and b["control"] == {"ember's": 1}
    assert b["examples"] == ["test_fake.py::TestFakePRIVATEUSE1::test_b_accel_failure_ember"]
    assert ("hang", "no output for N seconds: killed") in groups
    assert s["skip_reasons"] == {"Only runs on cuda": 1}
    assert s["device_skipped"] == 1
    assert [c["nodeid"].rsplit("::", 1)[1] for c in s["crashes"]] == ["test_c_crash_ember",
                                                                      "test_d_hang_ember"]
    assert data["files"]["test_absent.py"]["status"] == "missing"
    md = (out / "upstream.md").read_text()
    assert "| test_fake.py | ran | 2 | 3 | 1 | 1 | 1 | 0 |" in md
    assert "| test_absent.py | missing |" in md
    assert (out / "logs" / "test_fake.py.log").is_file()
    assert (out / "logs" / "cpu-control.log").is_file()


def test_k_expression_and_no_control(tmp_path):
    src = _fake_tree(tmp_path / "pytorch")
    data = upstream.run(src, files=["test_fake.py"], k="a_pass or f_fails", control=False,
                        progress=False)
    assert {_short(r["nodeid"]): r["status"] for r in data["results"]} == {
        "a_pass": "passed", "f_fails_everywhere": "failed"}
    assert "control" not in data["results"][1]
    assert data["control"]["notes"] == ["--no-control"]


def test_spent_budget_runs_nothing(tmp_path):
    src = _fake_tree(tmp_path / "pytorch")
    data = upstream.run(src, files=["test_fake.py"], budget=0, progress=False)
    assert data["files"]["test_fake.py"]["status"] == "not run"
    assert data["results"] == []


def test_a_file_that_fails_to_import_is_an_error(tmp_path):
    # It was reported as "ran" with no tests and the command succeeded.
    src = _fake_tree(tmp_path / "pytorch")
    (src / "test" / "test_broken.py").write_text("from torch.testing._internal import no_such_name\n")
    data = upstream.run(src, files=["test_broken.py"], control=False, progress=False)
    info = data["files"]["test_broken.py"]
    assert info["status"] == "error"
    assert any("collection error: test_broken.py: ImportError" in n for n in info["notes"]), info["notes"]
    assert upstream.main(["--pytorch-src", str(src), "--files", "test_broken.py", "--no-control",
                          "--no-progress"]) == 1


def test_bad_tree_is_a_usage_error(tmp_path, capsys):
    assert upstream.main(["--pytorch-src", str(tmp_path / "nowhere"), "--no-progress"]) == 2
    assert "PyTorch source tree" in capsys.readouterr().err
    (tmp_path / "test").mkdir()
    assert upstream.main(["--pytorch-src", str(tmp_path), "--files", "test_x.py"]) == 2


@pytest.mark.parametrize("nodeid, twin", [
    ("test_ops.py::TestCommonPRIVATEUSE1::test_out_abs_ember_float32",
     "test_ops.py::TestCommonCPU::test_out_abs_cpu_float32"),
    ("test_view_ops.py::TestOldViewOpsEMBER::test_ravel_ember",
     "test_view_ops.py::TestOldViewOpsCPU::test_ravel_cpu"),
    ("t.py::TestFooPRIVATEUSE1::test_bar_privateuse1_float32_int64",
     "t.py::TestFooCPU::test_bar_cpu_float32_int64"),
    # Only the device token is replaced, not "ember" inside the test's own name.
    ("t.py::TestFooPRIVATEUSE1::test_remember_ember_things_ember",
     "t.py::TestFooCPU::test_remember_ember_things_cpu"),
    ("test_torch.py::TestTorch::test_dir", None),  # not device-generic
    ("t.py::TestFooPRIVATEUSE1::test_no_device_suffix", None),
    ("t.py::test_function_ember", None),
])
def test_cpu_nodeid(nodeid, twin):
    assert upstream.cpu_nodeid(nodeid, "ember") == twin


def test_normalize_masks_numbers_not_names():
    assert upstream.normalize("ember:0 at 0xdeadbeef: 12 vs -1.5e-05 (75.0%)") == \
        "ember:N at 0x?: N vs N (N%)"
    assert upstream.normalize("float32 conv2d aten::_foo2 is 3D") == \
        "float32 conv2d aten::_foo2 is 3D"
