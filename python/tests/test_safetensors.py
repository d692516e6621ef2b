"""amc.load_safetensors / amc.save_safetensors round trips, and their refusals."""

import json
import struct

import numpy as np
import pytest
import torch

import amc
import amc.torch


def test_round_trip_numpy_and_torch(tmp_path, rng):
    tensors = {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "f64": rng.standard_normal((2, 2, 2)),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "u8": np.arange(7, dtype=np.uint8),
        "i32": np.array([-5, 7], np.int32),
        "flag": np.array([True, False, True]),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "bf16": torch.randn(4, 3).bfloat16(),
    }
    path = tmp_path / "t.safetensors"
    amc.save_safetensors(path, tensors, {"format": "pt", "note": "amc"})
    back = amc.load_safetensors(path)
    assert list(back) == list(tensors)  # file order is the dict's order
    for name, value in tensors.items():
        if name == "bf16":
            np.testing.assert_array_equal(back[name], value.float().numpy())
            assert back[name].dtype == np.float32
        else:
            assert back[name].dtype == value.dtype and back[name].shape == value.shape
            np.testing.assert_array_equal(back[name], value)
    assert amc.safetensors_metadata(path) == {"format": "pt", "note": "amc"}
    assert amc.safetensors_dtypes(path)["bf16"] == "BF16"
    raw = amc.load_safetensors(path, bf16="uint16")["bf16"]
    np.testing.assert_array_equal(raw, tensors["bf16"].view(torch.int16).numpy().view(np.uint16))
    as_torch = amc.torch.load_safetensors(path)
    assert as_torch["bf16"].dtype == torch.bfloat16
    assert torch.equal(as_torch["bf16"], tensors["bf16"])
    # The file is what the format says: header length, JSON, then the bytes in order.
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    assert header["f32"] == {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}
    assert data[8 + length:8 + length + 48] == tensors["f32"].tobytes()


def test_reads_a_checkpoint():
    from conftest import ROOT
    weights = amc.torch.load_safetensors(ROOT / "data" / "qwen2-tiny" / "model.safetensors")
    embed = weights["model.embed_tokens.weight"]
    assert embed.shape == (257, 384) and embed.dtype == torch.bfloat16


def test_refusals(tmp_path):
    with pytest.raises(amc.Error, match="tensor 'x' has strides \\(1, 3\\) for shape \\[3, 2\\]: "
                                        "it is not contiguous"):
        amc.save_safetensors(tmp_path / "a.safetensors", {"x": np.zeros((2, 3), np.float32).T})
    with pytest.raises(amc.Error, match="tensor names must be str"):
        amc.save_safetensors(tmp_path / "a.safetensors", {3: np.zeros(2, np.float32)})
    with pytest.raises(amc.Error, match="amc::SafetensorsFile::open"):
        amc.load_safetensors(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(amc.Error, match="bad.safetensors"):
        amc.load_safetensors(tmp_path / "bad.safetensors")
    with pytest.raises(amc.Error, match="bf16 must be 'float32'"):
        amc.load_safetensors(tmp_path / "bad.safetensors", bf16="half")
    assert not (tmp_path / "a.safetensors").exists()
