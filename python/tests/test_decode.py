"""Dense and block-sparse decode, block summaries and input handling, against float64 NumPy
references written here (conftest.py)."""

import ctypes
import math

import numpy as np
import pytest
import torch

import amc
from conftest import mean_rule_selection, random_qkv, softmax_attention


def check_dense(result, q, k, v, scale, rtol):
    group = q.shape[0] // k.shape[0]
    for h in range(q.shape[0]):
        ref, lse = softmax_attention(q[h], k[h // group], v[h // group], scale)
        np.testing.assert_allclose(result.output[h], ref, rtol=rtol, atol=rtol)
        assert abs(result.lse[h] - lse) <= rtol * max(1.0, abs(lse))
        assert result.positions_read[h] == k.shape[1]
    assert result.finite.all()


def test_dense_f32_against_reference(rng):
    q, k, v = random_qkv(rng)
    result = amc.dense_decode(q, k, v)
    assert result.output.shape == (6, 32) and result.output.dtype == np.float32
    check_dense(result, q, k, v, 1 / math.sqrt(32), 2e-5)
    # An explicit scale, and a reused decoder, give the same as the reference with that scale.
    decoder = amc.DenseDecoder(scale=0.3)
    for _ in range(2):
        check_dense(decoder.decode(q, k, v), q, k, v, 0.3, 2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dense_half_types_read_as_stored(rng, dtype):
    q, k, v = random_qkv(rng)
    kt, vt = torch.from_numpy(k).to(dtype), torch.from_numpy(v).to(dtype)
    qt = torch.from_numpy(q).to(dtype)  # queries are converted to f32 (exactly)
    result = amc.dense_decode(qt, kt, vt)
    # The reference reads the same rounded values, in float64.
    check_dense(result, qt.double().numpy(), kt.double().numpy(), vt.double().numpy(),
                1 / math.sqrt(32), 2e-5)


def test_bf16_products_within_its_bound_or_exact_where_unavailable(rng):
    """arithmetic="bf16_products" rounds the scaled query and the weights to bf16: the lse errs
    by at most delta = max_j 2^-8 sum_i |c q_i k_ji| and each output channel by
    (exp(2 delta)(1 + 2^-8) - 1) sum_j w_j |v_j| (docs/operators.md; f32 rounding added)."""
    q, k, v = random_qkv(rng, query_heads=8, kv_heads=2, n=300, d=64)
    kt, vt = torch.from_numpy(k).to(torch.bfloat16), torch.from_numpy(v).to(torch.bfloat16)
    exact = amc.dense_decode(q, kt, vt)
    decoder = amc.DenseDecoder(arithmetic="bf16_products", threads=2)
    assert decoder.arithmetic == "bf16_products"
    fast = decoder.decode(q, kt, vt)
    if not amc.bf16_products_available("bf16", 64):
        np.testing.assert_array_equal(fast.output, exact.output)
        np.testing.assert_array_equal(fast.lse, exact.lse)
        pytest.skip("no AVX512_BF16 here: bf16_products ran exact_f32 (checked bit for bit)")
    kd, vd, c = kt.double().numpy(), vt.double().numpy(), 1 / math.sqrt(64)
    assert not np.array_equal(fast.output, exact.output)  # the mode really ran
    for h in range(8):
        ref, lse = softmax_attention(q[h], kd[h // 4], vd[h // 4], c)
        delta = 2.0 ** -8 * (np.abs(c * q[h].astype(np.float64)) * np.abs(kd[h // 4])).sum(1).max()
        f32 = (300 + 64) * 2.0 ** -24  # f32 rounding of the sums over n = 300 positions
        assert abs(fast.lse[h] - lse) <= delta + f32 * (1 + abs(lse))
        s = kd[h // 4] @ (c * q[h].astype(np.float64))
        w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        magnitude = (w[:, None] * np.abs(vd[h // 4])).sum(0).max()
        bound = (math.exp(2 * (delta + f32)) * (1 + 2.0 ** -8) - 1 + f32) * magnitude
        assert np.abs(fast.output[h] - ref).max() <= bound


def test_bf16_products_names_and_availability():
    assert amc.DenseDecoder().arithmetic == "exact_f32"
    with pytest.raises(amc.Error, match="arithmetic 'bf16'"):
        amc.DenseDecoder(arithmetic="bf16")
    assert not amc.bf16_products_available("f32", 64)
    assert not amc.bf16_products_available("bf16", 48)
    with pytest.raises(amc.Error, match="unknown storage type 'fp8'"):
        amc.bf16_products_available("fp8", 64)


def test_numpy_float16_and_threads(rng):
    q, k, v = random_qkv(rng, query_heads=8, kv_heads=4, d=16)
    result = amc.DenseDecoder(threads=2).decode(q, k.astype(np.float16), v.astype(np.float16))
    check_dense(result, q, k.astype(np.float16), v.astype(np.float16), 0.25, 2e-5)


def test_strided_cache_read_in_place(rng):
    """An engine's cache [n, kv_heads, d] viewed as [kv_heads, n, d]: row stride kv_heads * d."""
    q, k, v = random_qkv(rng)
    engine_k = np.ascontiguousarray(k.transpose(1, 0, 2))
    engine_v = np.ascontiguousarray(v.transpose(1, 0, 2))
    kt, vt = torch.from_numpy(engine_k).permute(1, 0, 2), torch.from_numpy(engine_v).permute(1, 0, 2)
    assert kt.stride() == (32, 64, 1)
    result = amc.dense_decode(q, kt, vt)
    check_dense(result, q, k, v, 1 / math.sqrt(32), 2e-5)
    assert result._key_addresses == [kt.data_ptr(), kt.data_ptr() + 32 * 4]
    # Strided queries (every other row of a larger array) too.
    wide = np.zeros((12, 32), np.float32)
    wide[::2] = q
    check_dense(amc.dense_decode(wide[::2], k, v), q, k, v, 1 / math.sqrt(32), 2e-5)


def test_zero_copy_of_contiguous_bf16_torch_tensor(rng):
    k = torch.randn(2, 300, 32).bfloat16()
    v = torch.randn(2, 300, 32).bfloat16()
    q = torch.randn(6, 32)
    seen = amc._amc._inspect_input(k)
    assert seen["address"] == k.data_ptr() and seen["dtype"] == "bfloat16"
    assert seen["via"] == "dlpack" and seen["strides"] == [9600, 32, 1]
    result = amc.dense_decode(q, k, v)
    # The operator's views start at the tensor's own memory, KV head h at h * 300 * 32 elements.
    assert result._key_addresses == [k.data_ptr(), k.data_ptr() + 9600 * 2]
    assert result._value_addresses == [v.data_ptr(), v.data_ptr() + 9600 * 2]
    # Mutate in place and observe: a position made to dominate now sets the output.
    k[0, 123] = (q[0] * 40).bfloat16()
    after = amc.dense_decode(q, k, v)
    np.testing.assert_allclose(after.output[0], v[0, 123].float().numpy(), atol=1e-3)
    assert not np.allclose(after.output[0], result.output[0], atol=1e-3)


def test_sparse_mean_rule_against_reference(rng):
    q, k, v = random_qkv(rng, n=400)
    config = amc.SparseConfig(block_size=16, top_k=4, sinks=2, window=32)
    result = amc.sparse_decode(q, k, v, config)
    scale = 1 / math.sqrt(32)
    assert result.sparse and result.block_scores.shape == (6, 25)
    for h in range(6):
        g = h // 3
        blocks, positions = mean_rule_selection(q[h], k[g], 16, 4, 2, 32, scale)
        assert list(result.selected_blocks[h]) == blocks
        assert list(result.support_positions(h)) == positions
        assert result.positions_read[h] == len(positions)
        ref, lse = softmax_attention(q[h], k[g], v[g], scale, positions)
        np.testing.assert_allclose(result.output[h], ref, rtol=2e-5, atol=2e-5)
        assert abs(result.lse[h] - lse) < 2e-5 * max(1, abs(lse))
        ranges = result.support[h]
        assert sum(int(e - b) for b, e in ranges) == len(positions)


def test_sparse_covering_support_equals_dense_and_group_scope(rng):
    q, k, v = random_qkv(rng, n=200)
    dense = amc.dense_decode(q, k, v)
    covering = amc.sparse_decode(q, k, v, window=200)
    np.testing.assert_allclose(covering.output, dense.output, rtol=1e-6, atol=1e-6)
    group = amc.sparse_decode(q, k, v, scope="group", top_k=2)
    for g in range(2):  # one support per GQA group
        for h in (3 * g + 1, 3 * g + 2):
            np.testing.assert_array_equal(group.support[h], group.support[3 * g])


def test_adaptive_selection_reports_bounds(rng):
    q, k, v = random_qkv(rng, n=400)
    result = amc.sparse_decode(q, k, v, target_eps=0.05, block_size=16)
    scale = 1 / math.sqrt(32)
    assert result.needed_k is not None and result.needed_k.shape == (6,)
    for h in range(6):
        g = h // 3
        positions = result.support_positions(h)
        _, lse_all = softmax_attention(q[h], k[g], v[g], scale)
        _, lse_support = softmax_attention(q[h], k[g], v[g], scale, positions)
        eps = -math.expm1(lse_support - lse_all)
        assert eps <= result.omitted_mass_bound[h] + 1e-12  # the certificate holds
        assert result.target_met[h] == (result.omitted_mass_bound[h] <= 0.05)
        assert len(result.selected_blocks[h]) == result.needed_k[h]
    assert amc.sparse_decode(q, k, v).needed_k is None


def test_summaries_built_appended_and_used(rng):
    _, k, v = random_qkv(rng, n=70, d=8)
    s = amc.BlockSummaries(16, 8, channel_bounds=True, value_norms=True, sub_blocks=4)
    s.append(k[0, :33], v[0, :33])
    for p in range(33, 70):
        s.append(k[0, p], v[0, p])
    assert (s.positions, s.blocks, s.block_size, s.head_dim) == (70, 5, 16, 8)
    for b in range(5):
        rows = k[0, 16 * b:min(16 * b + 16, 70)].astype(np.float64)
        np.testing.assert_allclose(s.mean_keys[b], rows.mean(0), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(s.channel_min[b], rows.min(0).astype(np.float32))
        np.testing.assert_array_equal(s.channel_max[b], rows.max(0).astype(np.float32))
        norms = np.linalg.norm(v[0, 16 * b:min(16 * b + 16, 70)].astype(np.float64), axis=1)
        assert norms.max() <= s.value_norm_max[b] <= norms.max() * (1 + 1e-6)
        for j in range(4):
            sub = k[0, 16 * b + 4 * j:min(16 * b + 4 * j + 4, 70)].astype(np.float64)
            if len(sub):
                np.testing.assert_allclose(s.sub_block_means[4 * b + j], sub.mean(0), rtol=1e-6,
                                           atol=1e-7)
    built = amc.build_summaries(k, v, amc.SparseConfig(rule="bound"))
    assert len(built) == 2 and built[1].options["channel_bounds"]
    # Appending the positions a cache gained equals building from scratch.
    grown = amc.build_summaries(k[:, :40], v[:, :40])
    amc.update_summaries(grown, k, v)
    fresh = amc.build_summaries(k, v)
    for a, b in zip(grown, fresh):
        assert a.positions == 70
        np.testing.assert_array_equal(a.mean_keys, b.mean_keys)
    q = rng.standard_normal((4, 8)).astype(np.float32)
    with_kept = amc.SparseDecoder(block_size=16, top_k=1, window=8).decode(q, k, v, grown)
    np.testing.assert_array_equal(with_kept.output,
                                  amc.sparse_decode(q, k, v, block_size=16, top_k=1,
                                                    window=8).output)
    with pytest.raises(amc.Error, match="channel_min\\(\\) needs SummaryOptions::channel_bounds"):
        fresh[0].channel_min
    with pytest.raises(amc.Error, match="cover 70 positions, more than k's 40"):
        amc.update_summaries(grown, k[:, :40], v[:, :40])
    with pytest.raises(amc.Error, match="rule bound reads summaries with channel_bounds=1"):
        amc.sparse_decode(q, k, v, rule="bound", summaries=fresh)
    with pytest.raises(amc.Error, match="summaries has 1 entries, expected one"):
        amc.sparse_decode(q, k, v, summaries=fresh[:1])


def dlpack_capsule_on_device(device_type):
    """A DLPack capsule of a [4, 4] float32 tensor that claims to live on another device."""

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                    ("deleter", ctypes.c_void_p)]

    shape = (ctypes.c_int64 * 2)(4, 4)
    managed = DLManagedTensor(DLTensor(None, DLDevice(device_type, 0), 2, DLDataType(2, 32, 1),
                                       shape, None, 0), None, None)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(managed), b"dltensor", None)
    return capsule, (managed, shape)  # keep the structs alive with the capsule


class FakeDeviceTensor:
    def __init__(self, device_type):
        self.capsule, self.keep = dlpack_capsule_on_device(device_type)

    def __dlpack__(self, stream=None):
        return self.capsule


def test_refusals_name_the_problem(rng):
    q, k, v = random_qkv(rng, n=50, d=8)
    cases = [
        (lambda: amc.dense_decode(q[0], k, v), "amc.dense_decode: q has shape [8]; expected 2 "
                                               "dimensions [query heads, head_dim]"),
        (lambda: amc.dense_decode(q, k[0], v), "amc.dense_decode: k has shape [50, 8]; expected 3 "
                                               "dimensions [KV heads, positions, head_dim]"),
        (lambda: amc.dense_decode(q, k.astype(np.float64), v), "k has dtype float64; amc reads "
                                                                "float32, float16 or bfloat16"),
        (lambda: amc.dense_decode(q, k.astype(np.int32), v), "k has dtype int32"),
        (lambda: amc.dense_decode(q, k, v.astype(np.float16)), "k has dtype float32 but v has "
                                                                "float16"),
        (lambda: amc.dense_decode(q, k, v[:, :40]), "k has shape [2, 50, 8] but v has [2, 40, 8]"),
        (lambda: amc.dense_decode(q[:, :4], k, v), "q has head_dim 4 but k has head_dim 8"),
        (lambda: amc.dense_decode(q[:5], k, v), "query heads (5) are not a multiple of KV heads"),
        (lambda: amc.dense_decode(q, k[:, :, ::2], v[:, :, ::2]),
         "k has strides (400, 8, 2) (elements) for shape [2, 50, 4]: its channels are not "
         "contiguous"),
        (lambda: amc.dense_decode(q, np.broadcast_to(k[:, :1], k.shape), v),
         "its rows are 0 elements apart, fewer than head_dim 8"),
        (lambda: amc.dense_decode(q, [[1.0]], v), "amc.dense_decode: k: expected a NumPy array or "
                                                  "a PyTorch tensor"),
        (lambda: amc.dense_decode(q, None, v), "amc.dense_decode: k is None"),
        (lambda: amc.dense_decode(q, FakeDeviceTensor(2), v),
         "amc.dense_decode: k: the tensor is on DLPack device type 2 (device 0); amc reads CPU "
         "memory only"),
        (lambda: amc.sparse_decode(q, k, v, top_k=-3), "top_k must be an integer >= 0, got '-3'"),
        (lambda: amc.DenseDecoder(scale=-1.0), "amc::DenseDecode: scale must be positive"),
        (lambda: amc.BlockSummaries(16, 8).append(k[0, 0, :4]), "amc::BlockSummaries::append: "
                                                                "key has 4 elements, head_dim is 8"),
    ]
    for call, message in cases:
        with pytest.raises(amc.Error) as error:
            call()
        assert message in str(error.value), (message, str(error.value))


def test_read_only_numpy_arrays_are_read_through_the_buffer_protocol(rng):
    q, k, v = random_qkv(rng, n=20, d=8)
    k.setflags(write=False)
    assert amc._amc._inspect_input(k)["via"] == "buffer"
    check_dense(amc.dense_decode(q, k, v), q, k, v, 1 / math.sqrt(8), 2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_dense_decode_is_dense_decode_at_each_position(rng, dtype):
    """CausalDenseDecoder over 5 positions of 6 query heads (3 per KV head) against DenseDecoder
    on each position's own prefix: the same bits (docs/speculative.md)."""
    positions, query_heads, kv_heads, n, d = 5, 6, 2, 70, 64
    q, k, v = random_qkv(rng, query_heads=positions * query_heads, kv_heads=kv_heads, n=n, d=d)
    kt, vt = torch.from_numpy(k).to(dtype), torch.from_numpy(v).to(dtype)
    result = amc.CausalDenseDecoder().decode(q, kt, vt, positions)
    assert result.output.shape == (positions * query_heads, d)
    dense = amc.DenseDecoder()
    for t in range(positions):
        prefix = n - (positions - 1 - t)
        rows = slice(t * query_heads, (t + 1) * query_heads)
        want = dense.decode(q[rows], kt[:, :prefix], vt[:, :prefix])
        np.testing.assert_array_equal(result.output[rows], want.output)
        np.testing.assert_array_equal(result.lse[rows], want.lse)
        assert (result.positions_read[rows] == prefix).all()
    with pytest.raises(amc.Error, match="positions must be >= 1 and divide q's 30 rows, got 4"):
        amc.CausalDenseDecoder().decode(q, kt, vt, 4)
    with pytest.raises(amc.Error, match="fewer than the 15 query positions"):
        amc.CausalDenseDecoder().decode(q, kt[:, :3], vt[:, :3], 15)
