"""custom_costs.py: the FLOPs and bytes of custom calls from their backend configs, against
formulas written apart from it (FlashAttention-2's benchmark count, GEMM 2MNK, brute-force
mask counting), on calls built inline as XLA and Transformer Engine write them, on the shared
MI355X Transformer Engine capture, and the user's --costs table."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from test_roofline import BF16, F32, Hlo

from conftest import REPO
from jaxperf.cost import custom_costs, hlo_costs

U8, TUPLE = 6, 13
TE_CAPTURE = "tracelens-amd-rocm/mi355x-jax-te-fused-attn"


def fa2_flops(batch, seqlen, headdim, nheads, causal, mode="fwd"):
    """FlashAttention-2's own count (Dao-AILab/flash-attention benchmarks/
    benchmark_flash_attention.py): the convention the model is held to."""
    f = 4 * batch * seqlen ** 2 * nheads * headdim // (2 if causal else 1)
    return f if mode == "fwd" else 2.5 * f


def brute_pairs(sq, skv, causal, left, right):
    off = skv - sq if causal == "bottom-right" else 0
    n = 0
    for i in range(sq):
        for j in range(skv):
            d = j - (i + off)
            if causal and d > 0:
                continue
            if left >= 0 and d < -left:
                continue
            if right >= 0 and d > right:
                continue
            n += 1
    return n


@pytest.mark.parametrize("sq,skv,causal,left,right", [
    (16, 16, None, -1, -1), (16, 16, "top-left", -1, -1), (12, 20, "bottom-right", -1, -1),
    (20, 12, "bottom-right", -1, -1), (16, 16, "top-left", 4, -1), (16, 16, None, 3, 2),
    (9, 17, "top-left", 0, -1), (16, 16, None, 100, 100)])
def test_visible_pairs_exact(sq, skv, causal, left, right):
    assert custom_costs.visible_pairs(sq, skv, causal, left, right) == \
        brute_pairs(sq, skv, causal, left, right)


def _te_call(h, e, backward=False, **cfg):
    """A te_fused_attn_*_ffi call with its attributes as the MLIR dictionary the capture shows;
    q packed as [B, S, 3, H, D] (layout BS3HD, as the shared capture)."""
    base = {"input_batch": 2, "attn_heads": 16, "num_gqa_groups": 16, "q_max_seqlen": 256,
            "kv_max_seqlen": 256, "qk_head_dim": 64, "v_head_dim": 64, "mask_type": 0,
            "dropout_probability": 0.0, "window_size_left": -1, "window_size_right": -1,
            "is_training": True}
    base.update(cfg)
    b, s, n, d = base["input_batch"], base["q_max_seqlen"], base["attn_heads"], \
        base["qk_head_dim"]
    qkv = h.ins(e, "parameter", [b, s, 3, n, d], BF16)
    def typed(v):
        if isinstance(v, bool):
            return str(v).lower()
        return f"{v} : {'f64' if isinstance(v, float) else 'i64'}"
    attrs = ", ".join(f"{k} = {typed(v)}" for k, v in sorted(base.items()))
    target = f"te_fused_attn_{'backward' if backward else 'forward'}_ffi"
    call = h.ins(e, "custom-call", [], operands=(qkv,), custom_call_target=target,
                 backend_config=("{" + attrs + "}").encode())
    call.shape.element_type = TUPLE
    out = call.shape.tuple_shapes.add(element_type=BF16)
    out.dimensions.extend([b, s, 3, n, d] if backward else [b, s, n, d])
    call.shape.tuple_shapes.add(element_type=U8).dimensions.append(1 << 20)
    return call


@pytest.mark.parametrize("mask,causal", [(0, False), (2, True), (3, True)])
@pytest.mark.parametrize("backward", [False, True])
def test_te_attention_matches_flash_attention_count(mask, causal, backward):
    h = Hlo()
    e = h.comp("e")
    call = _te_call(h, e, backward, mask_type=mask, dropout_probability=0.1)
    c = hlo_costs.Costs(h.program(e)).cost(call)
    want = fa2_flops(2, 256, 64, 16, causal, "bwd" if backward else "fwd")
    # FlashAttention halves S^2 for causal; the diagonal is visible too: (S + 1) / S of it
    assert c.flops == pytest.approx(want * ((257 / 256) if causal else 1), rel=1e-12)
    assert c.kind == ("attention backward" if backward else "attention")
    assert c.matrix_dtype == "bf16"
    assert ("causal (top-left)" in c.method) == causal
    assert ("2.5x the forward" in c.method) == backward and "dropout 0.1" in c.method
    qkv_bytes = 2 * 256 * 3 * 16 * 64 * 2
    out_bytes = qkv_bytes if backward else qkv_bytes // 3
    assert c.bytes == qkv_bytes + out_bytes  # the u8 workspace is not data


def test_te_attention_gqa_window_and_lengths():
    h = Hlo()
    e = h.comp("e")
    call = _te_call(h, e, mask_type=4, q_max_seqlen=128, kv_max_seqlen=256, num_gqa_groups=4,
                    window_size_left=31, window_size_right=0, v_head_dim=32)
    c = hlo_costs.Costs(h.program(e)).cost(call)
    pairs = brute_pairs(128, 256, "bottom-right", 31, 0)
    assert c.flops == 2 * pairs * (64 + 32) * 2 * 16
    assert "GQA groups 4" in c.method and "window (31, 0)" in c.method
    assert "causal (bottom-right)" in c.method


def _cudnn_call(h, e, backward, cfg, q_dims, kv_dims, v_dims=None):
    """A __cudnn$fmha* call as XLA writes it (xla/backends/gpu/tests/gpu_fused_mha_test.cc:
    the GpuBackendConfig JSON with snake_case keys, int64 as strings, the mask as its name)."""
    q = h.ins(e, "parameter", q_dims, BF16)
    k = h.ins(e, "parameter", kv_dims, BF16)
    v = h.ins(e, "parameter", v_dims or kv_dims, BF16)
    ops = [q, k, v]
    if backward:
        ops += [h.ins(e, "parameter", q_dims[:3], F32), h.ins(e, "parameter", q_dims, BF16),
                h.ins(e, "parameter", q_dims, BF16)]
    target = "__cudnn$fmhaSoftmaxDropoutBackward" if backward else "__cudnn$fmhaSoftmax"
    call = h.ins(e, "custom-call", [], operands=ops, custom_call_target=target,
                 backend_config=json.dumps({"operation_queue_id": "0",
                                            "cudnn_fmha_backend_config": cfg}).encode())
    call.shape.element_type = TUPLE
    for dims in ([q_dims, kv_dims, v_dims or kv_dims] if backward else [q_dims]):
        call.shape.tuple_shapes.add(element_type=BF16).dimensions.extend(dims)
    call.shape.tuple_shapes.add(element_type=U8).dimensions.append(0)
    return call


def _dn(lc, rc, lb, rb):
    return {"lhs_contracting_dimensions": [str(x) for x in lc],
            "rhs_contracting_dimensions": [str(x) for x in rc],
            "lhs_batch_dimensions": [str(x) for x in lb],
            "rhs_batch_dimensions": [str(x) for x in rb]}


def test_cudnn_attention_forward_from_dimension_numbers():
    """XLA's own test's forward (BNTH [2, 6, 1024, 64], causal), sized from bmm1's dimension
    numbers where no intermediate tensor shape is given."""
    h = Hlo()
    e = h.comp("e")
    cfg = {"fmha_scale": 1, "dropout_rate": 0, "mask_type": "CAUSAL", "seed": "42",
           "bmm1_dot_dimension_numbers": _dn([3], [3], [0, 1], [0, 1]),
           "bmm2_dot_dimension_numbers": _dn([3], [2], [0, 1], [0, 1])}
    call = _cudnn_call(h, e, False, cfg, [2, 6, 1024, 64], [2, 6, 1024, 64])
    c = hlo_costs.Costs(h.program(e)).cost(call)
    assert c.flops == pytest.approx(fa2_flops(2, 1024, 64, 6, True) * 1025 / 1024, rel=1e-12)
    assert c.kind == "attention" and "causal" in c.method


def test_cudnn_attention_backward_gqa_window_from_intermediate_shape():
    """A backward with grouped KV heads (8 query heads, 2 KV heads, BTNH layout) and a sliding
    window, sized by its intermediate tensor shape [B, N, T, S]."""
    h = Hlo()
    e = h.comp("e")
    cfg = {"fmha_scale": 0.125, "dropout_rate": 0.1, "mask_type": "NO_MASK",
           "sliding_window_length": 32,
           "intermediate_tensor_shape": {"element_type": "BF16",
                                         "dimensions": ["2", "8", "128", "128"]}}
    call = _cudnn_call(h, e, True, cfg, [2, 128, 8, 64], [2, 128, 2, 64])
    c = hlo_costs.Costs(h.program(e)).cost(call)
    pairs = brute_pairs(128, 128, None, 31, -1)
    assert c.flops == round(2.5 * 2 * pairs * (64 + 64) * 2 * 8)
    assert "KV heads 2" in c.method and "window (31, -1)" in c.method


def test_te_gemm_and_elementwise_calls():
    h = Hlo()
    e = h.comp("e")
    a = h.ins(e, "parameter", [4, 512, 1024], BF16)
    b = h.ins(e, "parameter", [1024, 768], BF16)
    g = h.ins(e, "custom-call", [4, 512, 768], BF16, operands=(a, b),
              custom_call_target="te_gemm_v2_ffi",
              backend_config=b"{config = {lhs_axis_boundary = 2 : i64, rhs_axis_boundary = 1 "
                             b": i64, lhs_transposed = false, rhs_transposed = false}}")
    costs = hlo_costs.Costs(h.program(e))
    c = costs.cost(g)
    assert (c.flops, c.kind) == (2 * 2048 * 768 * 1024, "gemm")
    n = h.ins(e, "custom-call", [4, 512, 1024], BF16, operands=(a,),
              custom_call_target="te_norm_forward_ffi", backend_config=b"{norm_type = 1 : i64}")
    c = hlo_costs.Costs(h.program(e)).cost(n)
    assert (c.flops, c.bytes, c.kind) == (0, 2 * 2 * 4 * 512 * 1024, "elementwise")


def test_pallas_kernel_without_and_with_a_cost_estimate():
    h = Hlo()
    e = h.comp("e")
    a = h.ins(e, "parameter", [1024], F32)
    t = h.ins(e, "custom-call", [1024], F32, operands=(a,),
              custom_call_target="__gpu$xla.gpu.triton",
              backend_config=b'{name = "my_kernel", ir = "ML\\EFR", num_stages = 3 : i32, '
                             b'num_warps = 4 : i32}')
    c = hlo_costs.Costs(h.program(e)).cost(t)
    assert c.flops is None and "my_kernel" in c.why and "--costs" in c.why
    t.backend_config = json.dumps({"cost_estimate": {"flops": 5000, "bytes_accessed": 8192,
                                                     "transcendentals": 0}}).encode()
    c = hlo_costs.Costs(h.program(e)).cost(t)
    assert (c.flops, c.bytes, c.kind) == (5000, 8192, "kernel")


def test_users_costs_table(tmp_path):
    h = Hlo()
    e = h.comp("e")
    a = h.ins(e, "parameter", [64, 128], F32)
    t = h.ins(e, "custom-call", [64, 128], F32, operands=(a,),
              custom_call_target="my_fused_op", backend_config=b"{block = 32 : i64}")
    table = tmp_path / "costs.csv"
    table.write_text("match,flops,bytes,kind\n^my_fused,2 * in0_d0 * in0_d1 * block,,\n")
    c = hlo_costs.Costs(h.program(e), user=custom_costs.UserCosts(table)).cost(t)
    assert (c.flops, c.bytes, c.kind) == (2 * 64 * 128 * 32, 2 * 4 * 64 * 128, "custom")
    assert c.method == "costs table (costs.csv line 2)"
    table.write_text("match,flops\n^my_fused,missing_name * 2\n")
    c = hlo_costs.Costs(h.program(e), user=custom_costs.UserCosts(table)).cost(t)
    assert c.flops is None and "missing_name" in c.why
    for bad in ("__import__('os').system('x')", "in0_d0.real", "[1, 2]", "lambda: 1"):
        table.write_text(f'match,flops\nx,"{bad}"\n')
        with pytest.raises(custom_costs.CostsTableError):
            custom_costs.UserCosts(table)


def test_mlir_attributes_parse():
    got = custom_costs.attributes(b'{a = 1 : i64, b = 1.000000e-01 : f64, c = true, '
                                  b'd = "x, y", e = [1, 2], f = {g = 2 : i32}}')
    assert got["a"] == 1 and got["b"] == 0.1 and got["c"] is True and got["d"] == "x, y"
    assert custom_costs.attributes(b"not a config") == {}


def _run(script, *args):
    return subprocess.run([sys.executable, "-P", str(REPO / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_shared_te_capture_every_instruction_costed(shared, tmp_path):
    """The real MI355X capture: the four fused-attention calls (55.6% of GPU time) get their
    FLOPs from their backend configs and a point at 6-8% of the bf16 ceiling; every instruction
    above 1% of the attributed time has a point; the best GEMM of the same size is named."""
    cap = shared / TE_CAPTURE
    out = tmp_path / "out"
    assert _run("attribute_kernels.py", cap, "--out", out, "--no-xprof").returncode == 0
    p = _run("roofline.py", cap, "--out", out, "--no-xprof")
    assert p.returncode == 0, p.stderr
    with open(out / "roofline.csv", newline="") as fh:
        rows = {r["instruction"]: r for r in csv.DictReader(fh)}
    attention = [r for r in rows.values() if r["work"].startswith("attention")]
    assert len(attention) == 4
    for r in attention:
        backward = "backward" in r["instruction"]
        assert int(r["run_flops"]) == (85_941_288_960 if backward else 34_376_515_584)
        assert r["ceiling_dtype"] == "bf16_fp16_matrix" and r["binding"] == "compute"
        assert 6.0 < float(r["pct_of_ceiling"]) < 8.0
    total = sum(float(r["device_us"]) for r in rows.values())
    assert sum(float(r["device_us"]) for r in attention) / total > 0.55
    for r in rows.values():
        if float(r["device_us"]) / total >= 0.01:
            assert r["pct_of_ceiling"], r["instruction"]
    g = rows["gemm_fusion_dot"]
    assert float(g["best_same_work_pct"]) > float(g["pct_of_ceiling"])
    assert rows[g["best_same_work"]]["work"] == "gemm"
    res = json.loads((out / "roofline.json").read_text())
    assert not any("no roofline point" in t for t in res["trust_list"])


def test_bad_costs_table_one_sentence(shared, tmp_path):
    cap = shared / TE_CAPTURE
    out = tmp_path / "out"
    assert _run("attribute_kernels.py", cap, "--out", out, "--no-xprof").returncode == 0
    bad = tmp_path / "c.csv"
    bad.write_text("match,flops\nte_,open('x')\n")
    p = _run("roofline.py", cap, "--out", out, "--no-xprof", "--costs", bad)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert "c.csv line 2" in p.stderr and "Traceback" not in p.stderr


def test_generated_custom_calls_costed_from_their_configs(tmp_path):
    """A generated capture (tests/capgen `custom-calls`): Transformer Engine and cuDNN attention
    calls with other masks, GQA, windows, lengths and dropout, written as the libraries write
    their configs, and Pallas calls without and with a cost estimate, through the capture's
    proto, the attribution and step 5: each call's FLOPs a run are the formulas' (brute-force
    mask counting, 4 x pairs x head dims, 2.5x for a backward), the kernel without an estimate
    gets a sentence naming --costs, and a --costs row naming that kernel fills it in."""
    from capgen.generate import generate
    from capgen.scenarios import SCENARIOS
    from capgen.small_programs import CUDNN_CALLS, PALLAS_ESTIMATE, TE_CALLS
    r = generate(SCENARIOS["custom-calls"], tmp_path / "capture")
    out = tmp_path / "out"
    assert _run("attribute_kernels.py", r.run_dir, "--out", out, "--no-xprof").returncode == 0
    p = _run("roofline.py", r.run_dir, "--out", out, "--no-xprof")
    assert p.returncode == 0, p.stderr
    with open(out / "roofline.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_line = {}
    with open(out / "attribution" / "ops.csv", newline="") as fh:
        for o in csv.DictReader(fh):
            by_line[int(o["source"].rsplit(":", 1)[1])] = o["instruction"]
    flops = {r["instruction"]: r for r in rows}
    want = []
    for cfg in TE_CALLS.values():  # forward, then backward, on consecutive lines
        causal = {0: None, 2: "top-left", 4: "bottom-right"}[cfg["mask_type"]]
        pairs = brute_pairs(cfg["q_max_seqlen"], cfg["kv_max_seqlen"], causal,
                            cfg["window_size_left"], cfg["window_size_right"])
        f = 2 * pairs * (cfg["qk_head_dim"] + cfg["v_head_dim"]) * cfg["input_batch"] * \
            cfg["attn_heads"]
        want += [f, round(2.5 * f)]
    for c in CUDNN_CALLS.values():
        cf = c["cfg"]
        inter = [int(d) for d in cf.get("intermediate_tensor_shape", {}).get("dimensions", [])]
        b, n, t, s = inter or (c["q"][0], c["q"][1], c["q"][2], c["kv"][2])  # BNTH from bmm1
        d = c["q"][-1]
        window = cf.get("sliding_window_length", 0)
        pairs = brute_pairs(t, s, "top-left" if cf["mask_type"] == "CAUSAL" else None,
                            window - 1 if window else -1, -1)
        f = 2 * pairs * 2 * d * b * n
        want.append(round(2.5 * f) if "Backward" in c["target"] else f)
    got = [flops[by_line[line]] for line in sorted(by_line)]
    assert [int(g["run_flops"]) for g in got[:len(want)]] == want
    assert all(g["work"] == "attention" + (" backward" if "backward" in g["method"] else "")
               and g["pct_of_ceiling"] for g in got[:len(want)])
    plain, estimated = got[len(want):]
    assert not plain["run_flops"] and "pallas_plain" in plain["no_ceiling_why"] and \
        "--costs" in plain["no_ceiling_why"]
    assert (int(estimated["run_flops"]), int(estimated["run_bytes"])) == (
        PALLAS_ESTIMATE["flops"], PALLAS_ESTIMATE["bytes_accessed"])
    table = tmp_path / "costs.csv"
    table.write_text("match,flops,bytes\n^pallas_plain$,2 * in0_d0 * in0_d1,\n")
    p = _run("roofline.py", r.run_dir, "--out", out, "--no-xprof", "--costs", table)
    assert p.returncode == 0, p.stderr
    with open(out / "roofline.csv", newline="") as fh:
        row = next(x for x in csv.DictReader(fh) if x["instruction"] == plain["instruction"])
    assert int(row["run_flops"]) == 2 * 4096 * 1024 and row["pct_of_ceiling"]
