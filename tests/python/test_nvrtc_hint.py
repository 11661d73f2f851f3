"""The package's NVRTC hint (dfgnn/_nvrtc.py): the directory of an nvidia-cuda-nvrtc wheel anywhere
on sys.path goes into DFGNN_NVRTC_WHEEL_DIRS (once), which libdfgnn searches after the CUDA Toolkit; the user's
DFGNN_NVRTC_PATH is left alone."""

import os
import sys

import dfgnn._nvrtc as hint


def fake_wheel(root, sub="cu13/lib"):
    d = root / "nvidia" / sub
    d.mkdir(parents=True)
    (d / "libnvrtc.so.13").write_bytes(b"")
    return str(d)


def test_wheel_directory_is_appended_after_the_users(tmp_path, monkeypatch):
    want = fake_wheel(tmp_path)
    (tmp_path / "nvidia" / "cudnn" / "lib").mkdir(parents=True)  # an nvidia wheel without NVRTC: not added
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DFGNN_NVRTC_PATH", "/user/dir")
    monkeypatch.setenv("DFGNN_NVRTC_WHEEL_DIRS", "/earlier/hint")
    assert want in hint.wheel_dirs()
    assert not any(d.startswith(str(tmp_path / "nvidia" / "cudnn")) for d in hint.wheel_dirs())
    hint.add_wheel_hint()
    entries = os.environ["DFGNN_NVRTC_WHEEL_DIRS"].split(":")
    assert entries[0] == "/earlier/hint" and want in entries
    assert os.environ["DFGNN_NVRTC_PATH"] == "/user/dir"
    hint.add_wheel_hint()  # idempotent
    assert os.environ["DFGNN_NVRTC_WHEEL_DIRS"].split(":").count(want) == 1


def test_cuda12_layout(tmp_path, monkeypatch):
    want = fake_wheel(tmp_path, "cuda_nvrtc/lib")
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("DFGNN_NVRTC_WHEEL_DIRS", raising=False)
    hint.add_wheel_hint()
    assert want in os.environ["DFGNN_NVRTC_WHEEL_DIRS"].split(":")


def test_no_wheel_leaves_the_environment_alone(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "nvidia"))])
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    monkeypatch.delenv("DFGNN_NVRTC_WHEEL_DIRS", raising=False)
    hint.add_wheel_hint()
    assert "DFGNN_NVRTC_WHEEL_DIRS" not in os.environ
