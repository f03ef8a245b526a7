#!/usr/bin/env python3
"""The capture lab: real JAX workloads on one TPU v5e chip, each captured with the JAX profiler,
timed again without it, and written down with a truth measured on the chip.

Usage:
    python3 bench/tpu_lab.py OUTDIR [--cases a,b,c] [--smoke]

Every case runs in this one process (opening the chip takes ~15 s and only one process may hold
it). For each case: build the step, run 2 warm-up steps (compilation stays out of the capture)
and block on them; then, under `jax.profiler.trace(OUTDIR/<case>, create_perfetto_trace=True)`,
run 4-6 steps, each inside `jax.profiler.StepTraceAnnotation("train", step_num=i)` and blocked on
at its end; then, outside the profiler, time 8 more steps one by one with `time.perf_counter()`.

Each case leaves the folder jax writes, `OUTDIR/<case>/plugins/profile/<run>/<host>.xplane.pb`,
`<host>.trace.json.gz` and `perfetto_trace.json.gz`, and beside it `OUTDIR/<case>/truth.json`.
The truth's `bound` is measured by the chip's own clock: in the capture's trace, the process
`/device:TPU:0` has a thread `XLA Modules` with one event per program run; the share of each
"train" step window (host) covered by the union of those runs is that step's device busy share,
and the median over the captured steps decides: "device" at >= 0.8, "host" below 0.5, "mixed"
between. A case with a first change has an "after" case, the same workload with that change,
captured and timed the same way; the before's truth says how much faster (or not) it measured.
At the end `OUTDIR/lab.tar.gz` holds every case folder of the run (and `lab_summary.json`), and
one line per case is printed.

Cases (`--cases` takes any of these; naming a "before" brings its "after" along):
    eager_loop -> eager_loop_jit, train_step, pallas_matmul -> pallas_matmul_big,
    input_pipeline -> input_pipeline_prefetch, host_sync -> host_sync_fused,
    scan_layers -> scan_layers_unrolled, gather_sort, bf16_matmul, tiny_step -> tiny_step_scan,
    recompile -> recompile_padded, h2d_copy -> h2d_copy_resident, mxu_padded -> mxu_aligned,
    layout_moved -> layout_native, eager_big (the eager loop, 50 steps captured: about a
    million trace events, for the benchmark at size),
    flax_optax -> flax_optax_fused (skipped, with a note, where flax or optax is not importable:
    install them first into a folder of their own, `pip install --target DIR flax optax`, and put
    DIR at the END of PYTHONPATH, so that the jax already installed stays the one imported: the
    lab prints which jax it runs and from where)

`--smoke`: tiny shapes, 2 captured and 2 timed steps, for a CPU (`JAX_PLATFORMS=cpu`): it proves
every code path (capture, truth, tarball). On a CPU there is no TPU device line in the trace, so
each truth says `bound: "unmeasured"`; Pallas kernels run with `interpret=True` off a TPU.
Nothing is written outside OUTDIR (libtpu's own log files are turned off unless TPU_LOG_DIR is
set).

Exit codes: 0 every case done; 1 a case failed (the others still ran; its folder holds
error.txt); 2 usage.
"""

from __future__ import annotations

import os

os.environ.setdefault("TPU_LOG_DIR", "disabled")  # libtpu's log files would go to /tmp

import argparse
import gc
import gzip
import json
import math
import queue
import shutil
import statistics
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

WARMUP = 2
DEVICE_BOUND_AT = 0.8
HOST_BOUND_BELOW = 0.5
BOUND_RULE = (
    "device_busy_share = median over the captured steps of (union of the XLA Modules runs on "
    "/device:TPU:0 inside the host 'train' step window, clipped to it) / window length; "
    f"bound = 'device' if >= {DEVICE_BOUND_AT}, 'host' if < {HOST_BOUND_BELOW}, 'mixed' otherwise"
)
NO_GAIN_BELOW = 1.05
TAR_LIMIT = 15 * 1024 * 1024


@dataclass
class Cfg:
    smoke: bool
    interpret: bool  # Pallas kernels interpreted (off a TPU)

    def pick(self, full, smoke):
        return smoke if self.smoke else full

    @property
    def timed(self) -> int:
        return 2 if self.smoke else 8

    def captured(self, heavy: bool) -> int:
        return 2 if self.smoke else (4 if heavy else 5)


@dataclass
class Workload:
    """One case ready to run: `step(i)` runs step i and returns what to block on."""

    step: Callable[[int], Any]
    workload: str
    heavy: bool = False  # a trace with many events a step: fewer captured steps
    inner_steps: int = 1  # updates done per step (tiny_step_scan)
    extra: dict = field(default_factory=dict)  # more truth fields (flops...)
    captured: int | None = None  # steps under the profiler, where not the usual (eager_big)
    close: Callable[[], None] | None = None


@dataclass
class Pair:
    after: str
    first_change: str


# ----------------------------------------------------------------------------- shared pieces

def _normal(key, shape, dtype, scale):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def _rms_norm(x, scale):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


def _xent(logits, labels):
    """Mean softmax cross-entropy over integer labels, in f32."""
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jnp.mean(logz - picked)


def _sgd(params, grads, lr):
    return jax.tree.map(lambda p, g: (p - lr * g.astype(jnp.float32)).astype(p.dtype),
                        params, grads)


def _global_norm(tree):
    leaves = jax.tree.leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


# ----------------------------------------------------------------------------- 1 eager loop

def _eager_body(x, w, iters):
    for _ in range(iters):
        x = jnp.tanh(x @ w) + 0.5 * x
        x = x / (1.0 + jnp.mean(jnp.abs(x)))
    return x


def _eager_loop(cfg: Cfg, jit: bool) -> Workload:
    n, iters = cfg.pick(256, 64), 40
    kx, kw = jax.random.split(jax.random.key(1))
    state = {"x": _normal(kx, (n, n), jnp.float32, 1.0)}
    w = _normal(kw, (n, n), jnp.float32, 1.0 / math.sqrt(n))
    body = jax.jit(partial(_eager_body, iters=iters)) if jit else partial(_eager_body, iters=iters)

    def step(i):
        state["x"] = body(state["x"], w)
        return state["x"]

    how = "the same body under jax.jit: one program a step" if jit else (
        "op by op with no jit: about 8 programs an iteration, ~320 a step")
    return Workload(step, f"{iters} iterations of x = tanh(x @ w) + 0.5 x; x = x / (1 + "
                          f"mean(|x|)) on {n}x{n} f32 (w {n}x{n} f32), x carried from step to "
                          f"step; {how}", heavy=not jit)


def case_eager_loop(cfg):
    return _eager_loop(cfg, jit=False)


def case_eager_big(cfg):
    """The eager loop at size: 50 captured steps, about a million trace events (the benchmark's
    TPU capture at size; bench/run.py)."""
    wl = _eager_loop(cfg, jit=False)
    wl.captured = 2 if cfg.smoke else 50
    wl.workload += f"; {wl.captured} steps captured (a capture at size)"
    return wl


def case_eager_loop_jit(cfg):
    return _eager_loop(cfg, jit=True)


# ----------------------------------------------------------------------------- 2 train step

def case_train_step(cfg: Cfg) -> Workload:
    batch, d, hidden, blocks, classes = cfg.pick((8192, 1024, 4096, 4, 1000),
                                                 (64, 32, 64, 2, 10))
    keys = jax.random.split(jax.random.key(2), 2 * blocks + 3)
    bf = jnp.bfloat16
    params = {
        "blocks": [{"ln": jnp.ones((d,), bf),
                    "w1": _normal(keys[2 * i], (d, hidden), bf, 1 / math.sqrt(d)),
                    "w2": _normal(keys[2 * i + 1], (hidden, d), bf, 1 / math.sqrt(hidden))}
                   for i in range(blocks)],
        "head": _normal(keys[-3], (d, classes), bf, 1 / math.sqrt(d)),
    }
    x = _normal(keys[-2], (batch, d), bf, 1.0)
    y = jax.random.randint(keys[-1], (batch,), 0, classes)

    def loss_fn(p, x, y):
        h = x
        for b in p["blocks"]:
            h = h + jax.nn.gelu(_rms_norm(h, b["ln"]) @ b["w1"]) @ b["w2"]
        return _xent(h @ p["head"], y)

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return _sgd(p, grads, 1e-3), loss

    state = {"p": params}

    def step(i):
        state["p"], loss = train_step(state["p"], x, y)
        return loss

    flops = 6 * batch * (blocks * 2 * d * hidden + d * classes)
    return Workload(step, f"jitted bf16 residual-MLP train step: batch {batch} x {d} features, "
                          f"{blocks} blocks (RMS norm, {d}->{hidden} GELU ->{d}), {classes}-class "
                          "head, f32 softmax cross-entropy, SGD, params donated "
                          "(donate_argnums=0); one program a step",
                    extra={"matmul_flops_per_step": flops})


# ----------------------------------------------------------------------------- 3 pallas matmul

def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    """One (i, j, k) grid step: acc[i, j] += A[i, k] @ B[k, j]; written out at the last k."""
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _zero():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def pallas_matmul(a, b, block: int, interpret: bool):
    m, kd = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // block, n // block, kd // block),
        in_specs=[pl.BlockSpec((block, block), lambda i, j, k: (i, k)),
                  pl.BlockSpec((block, block), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=interpret,
        name=f"matmul_{block}",
    )(a, b)


def _pallas(cfg: Cfg, big: bool) -> Workload:
    n = cfg.pick(4096, 256)
    block = cfg.pick(512, 128) if big else cfg.pick(128, 64)
    ka, kb = jax.random.split(jax.random.key(3))
    a = _normal(ka, (n, n), jnp.bfloat16, 1.0)
    b = _normal(kb, (n, n), jnp.bfloat16, 1 / math.sqrt(n))
    mm = jax.jit(partial(pallas_matmul, block=block, interpret=cfg.interpret))

    def step(i):
        return mm(a, b)

    grid = (n // block) ** 3
    return Workload(step, f"a Pallas TPU matmul kernel (pl.pallas_call, grid (i, j, k) of "
                          f"{n // block}^3 = {grid} steps, BlockSpecs {block}x{block} for A, B "
                          f"and the output, f32 VMEM accumulator, k 'arbitrary') on bf16 "
                          f"{n}x{n} @ {n}x{n}; one tpu_custom_call a step"
                          + (" (interpret=True: not on a TPU)" if cfg.interpret else ""),
                    extra={"matmul_flops_per_step": 2 * n ** 3, "block": block})


def case_pallas_matmul(cfg):
    return _pallas(cfg, big=False)


def case_pallas_matmul_big(cfg):
    return _pallas(cfg, big=True)


# ----------------------------------------------------------------------------- 4 input pipeline

_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_STD = np.array([0.229, 0.224, 0.225], np.float32)


def _make_batch(rng: np.random.Generator, batch: int, size: int, pad: int, classes: int):
    """An image batch the way a numpy loader makes it: decode stand-in (random uint8), random
    crop, random horizontal flip per image, to f32, per-channel normalise; integer labels."""
    raw = rng.integers(0, 256, size=(batch, size + pad, size + pad, 3), dtype=np.uint8)
    oy, ox = rng.integers(0, pad + 1, size=2)
    x = np.ascontiguousarray(raw[:, oy:oy + size, ox:ox + size, :])
    flip = rng.random(batch) < 0.5
    x[flip] = x[flip, :, ::-1]
    x = x.astype(np.float32)
    x *= (1.0 / 255.0) / _STD
    x -= _MEAN / _STD
    labels = rng.integers(0, classes, size=batch).astype(np.int32)
    return x, labels


def _input_pipeline(cfg: Cfg, prefetch: bool) -> Workload:
    batch, size, patch, d, hidden, blocks, classes = cfg.pick(
        (32, 128, 8, 1024, 4096, 4, 1000), (4, 32, 8, 32, 64, 1, 10))
    pad = 8
    pdim = patch * patch * 3
    keys = jax.random.split(jax.random.key(4), 2 * blocks + 2)
    bf = jnp.bfloat16
    params = {
        "embed": _normal(keys[0], (pdim, d), bf, 1 / math.sqrt(pdim)),
        "blocks": [{"ln": jnp.ones((d,), bf),
                    "w1": _normal(keys[2 + 2 * i], (d, hidden), bf, 1 / math.sqrt(d)),
                    "w2": _normal(keys[3 + 2 * i], (hidden, d), bf, 1 / math.sqrt(hidden))}
                   for i in range(blocks)],
        "head": _normal(keys[1], (d, classes), bf, 1 / math.sqrt(d)),
    }

    def loss_fn(p, images, labels):
        b = images.shape[0]
        g = size // patch
        x = images.astype(bf).reshape(b, g, patch, g, patch, 3)
        x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, g * g, pdim)
        h = x @ p["embed"]
        for blk in p["blocks"]:
            h = h + jax.nn.gelu(_rms_norm(h, blk["ln"]) @ blk["w1"]) @ blk["w2"]
        return _xent(jnp.mean(h, axis=1) @ p["head"], labels)

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(p, images, labels)
        return _sgd(p, grads, 1e-3), loss

    state = {"p": params}
    rng = np.random.default_rng(4)

    def produce():
        return jax.device_put(_make_batch(rng, batch, size, pad, classes))

    close = None
    if prefetch:
        q: queue.Queue = queue.Queue(maxsize=2)
        stop = threading.Event()

        def producer():
            while not stop.is_set():
                item = produce()
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        pass

        worker = threading.Thread(target=producer, name="prefetch", daemon=True)
        worker.start()

        def next_batch():
            return q.get()

        def close():
            stop.set()
            while not q.empty():
                q.get_nowait()
            worker.join(timeout=10)
    else:
        next_batch = produce

    def step(i):
        images, labels = next_batch()
        state["p"], loss = train_step(state["p"], images, labels)
        return loss

    feed = ("produced in a background thread (numpy work and jax.device_put) into a "
            "queue.Queue(maxsize=2), so the next batch is made while the step runs") if prefetch \
        else "produced on the main thread before each step, then jax.device_put"
    return Workload(step, f"a jitted bf16 patch-MLP image classifier train step (batch {batch} "
                          f"images {size}x{size}x3 f32, {patch}x{patch} patches -> {d}, "
                          f"{blocks} residual MLP blocks {d}->{hidden}->{d}, {classes} classes, "
                          "SGD, params donated) fed by a numpy loader (random uint8 "
                          f"{size + pad}x{size + pad} images, random crop, per-image flip, "
                          f"to f32, per-channel normalise): batch {feed}",
                    heavy=True, close=close)  # device_put's relayout: ~40k host events a step


def case_input_pipeline(cfg):
    return _input_pipeline(cfg, prefetch=False)


def case_input_pipeline_prefetch(cfg):
    return _input_pipeline(cfg, prefetch=True)


# ----------------------------------------------------------------------------- 5 host sync

def _mlp_setup(cfg: Cfg, seed: int):
    batch, d_in, width, depth, classes = cfg.pick((4096, 1024, 2048, 3, 1000),
                                                  (64, 32, 64, 2, 10))
    keys = jax.random.split(jax.random.key(seed), depth + 3)
    bf = jnp.bfloat16
    dims = [d_in] + [width] * depth
    params = {"layers": [{"w": _normal(keys[i], (dims[i], dims[i + 1]), bf,
                                       1 / math.sqrt(dims[i])),
                          "b": jnp.zeros((dims[i + 1],), bf)} for i in range(depth)],
              "head": _normal(keys[depth], (width, classes), bf, 1 / math.sqrt(width))}
    x = _normal(keys[depth + 1], (batch, d_in), bf, 1.0)
    y = jax.random.randint(keys[depth + 2], (batch,), 0, classes)

    def loss_fn(p, x, y):
        h = x
        for layer in p["layers"]:
            h = jax.nn.gelu(h @ layer["w"] + layer["b"])
        return _xent(h @ p["head"], y)

    shape = (f"a bf16 MLP ({d_in} -> {depth} x {width} GELU -> {classes}) on batch {batch}, "
             "SGD")
    return params, x, y, loss_fn, shape


def case_host_sync(cfg: Cfg) -> Workload:
    params, x, y, loss_fn, shape = _mlp_setup(cfg, 5)
    forward = jax.jit(loss_fn)

    @jax.jit
    def grads_fn(p, x, y):
        g = jax.grad(loss_fn)(p, x, y)
        return g, _global_norm(g)

    update = jax.jit(partial(_sgd, lr=1e-3))
    state = {"p": params, "log": []}

    def step(i):
        p = state["p"]
        loss = forward(p, x, y)
        loss_value = float(loss)  # the host waits for the forward
        grads, gnorm = grads_fn(p, x, y)
        metrics = jax.device_get({"loss": loss, "grad_norm": gnorm})  # and for the grads
        state["log"].append((loss_value, float(metrics["grad_norm"])))
        state["p"] = update(p, grads)
        return state["p"]

    return Workload(step, f"{shape}: three jitted programs a step (forward+loss, grads with "
                          "their global norm, SGD update), with float(loss) after the forward "
                          "and jax.device_get(metrics) after the grads every step")


def case_host_sync_fused(cfg: Cfg) -> Workload:
    params, x, y, loss_fn, shape = _mlp_setup(cfg, 5)

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return _sgd(p, grads, 1e-3), {"loss": loss, "grad_norm": _global_norm(grads)}

    state = {"p": params, "log": []}

    def step(i):
        state["p"], metrics = train_step(state["p"], x, y)
        if i % 4 == 3:
            state["log"].append(jax.device_get(metrics))
        return metrics

    return Workload(step, f"{shape}: one jitted train step (value_and_grad, global norm, SGD; "
                          "params donated), metrics fetched with jax.device_get every 4 steps "
                          "(the lab still blocks at the end of each step to time it)")


# ----------------------------------------------------------------------------- 6 scan layers

def _transformer(cfg: Cfg, unrolled: bool) -> Workload:
    vocab, d, heads, seq, batch, layers = cfg.pick((8192, 1024, 8, 512, 8, 4),
                                                   (256, 64, 4, 32, 2, 4))
    ff = 4 * d
    hd = d // heads
    bf = jnp.bfloat16
    k = jax.random.split(jax.random.key(6), 8)
    params = {
        "embed": _normal(k[0], (vocab, d), bf, 1.0),
        "unembed": _normal(k[1], (d, vocab), bf, 1 / math.sqrt(d)),
        "lnf": jnp.ones((d,), bf),
        "layers": {  # stacked on a leading layer axis
            "ln1": jnp.ones((layers, d), bf),
            "ln2": jnp.ones((layers, d), bf),
            "wqkv": _normal(k[2], (layers, d, 3 * d), bf, 1 / math.sqrt(d)),
            "wo": _normal(k[3], (layers, d, d), bf, 1 / math.sqrt(d)),
            "w1": _normal(k[4], (layers, d, ff), bf, 1 / math.sqrt(d)),
            "w2": _normal(k[5], (layers, ff, d), bf, 1 / math.sqrt(ff)),
        },
    }
    tokens = jax.random.randint(k[6], (batch, seq + 1), 0, vocab)
    causal = jnp.tril(jnp.ones((seq, seq), bool))

    def block(x, lp):
        b, t, _ = x.shape
        qkv = _rms_norm(x, lp["ln1"]) @ lp["wqkv"]
        q, kk, v = (a.reshape(b, t, heads, hd) for a in jnp.split(qkv, 3, axis=-1))
        s = jnp.einsum("bthd,bshd->bhts", q, kk).astype(jnp.float32) / math.sqrt(hd)
        s = jnp.where(causal, s, -1e9)
        pr = jax.nn.softmax(s, axis=-1).astype(bf)
        o = jnp.einsum("bhts,bshd->bthd", pr, v).reshape(b, t, d)
        x = x + o @ lp["wo"]
        return x + jax.nn.gelu(_rms_norm(x, lp["ln2"]) @ lp["w1"]) @ lp["w2"]

    def run_layers(x, stacked):
        if unrolled:
            for i in range(layers):
                x = block(x, jax.tree.map(lambda a, i=i: a[i], stacked))
            return x
        x, _ = jax.lax.scan(lambda c, lp: (block(c, lp), None), x, stacked)
        return x

    def loss_fn(p, tokens):
        x = p["embed"][tokens[:, :-1]]
        x = run_layers(x, p["layers"])
        return _xent(_rms_norm(x, p["lnf"]) @ p["unembed"], tokens[:, 1:])

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(p, tokens)
        return _sgd(p, grads, 1e-3), loss

    state = {"p": params}

    def step(i):
        state["p"], loss = train_step(state["p"], tokens)
        return loss

    how = ("the layers in a Python loop inside the jitted step (unrolled)" if unrolled
           else "the layers under jax.lax.scan over the stacked params")
    return Workload(step, f"a jitted bf16 decoder-only transformer train step: vocab {vocab}, "
                          f"d_model {d}, {heads} heads, seq {seq}, batch {batch}, {layers} "
                          "layers (RMS norm, causal einsum attention with f32 softmax, GELU MLP "
                          f"{d}->{ff}), f32 cross-entropy, jax.value_and_grad, SGD, params "
                          f"donated; {how}")


def case_scan_layers(cfg):
    return _transformer(cfg, unrolled=False)


def case_scan_layers_unrolled(cfg):
    return _transformer(cfg, unrolled=True)


# ----------------------------------------------------------------------------- 7 gather + sort

def case_gather_sort(cfg: Cfg) -> Workload:
    rows, dim, picks, top = cfg.pick((1 << 20, 128, 1 << 18, 1024), (4096, 16, 1024, 16))
    kt, kq, kk = jax.random.split(jax.random.key(7), 3)
    table = _normal(kt, (rows, dim), jnp.float32, 1.0)
    query = _normal(kq, (dim,), jnp.float32, 1.0)

    @jax.jit
    def retrieve(table, query, key, i):
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        idx = jax.random.randint(k1, (picks,), 0, rows)
        cand = jnp.take(table, idx, axis=0)  # gather `picks` random rows
        scores = cand @ query
        ranked = jnp.sort(scores)
        vals, pos = jax.lax.top_k(scores, top)
        best = jnp.take(cand, pos, axis=0)
        perm = jnp.argsort(jax.random.uniform(k2, (rows,)))  # a full shuffle of the table
        shuffled = jnp.take(table, perm[:picks], axis=0)
        return ranked[picks // 2], vals, best.sum(0), shuffled.sum(0)

    def step(i):
        return retrieve(table, query, kk, i)

    return Workload(step, f"a jitted retrieval step on an f32 table {rows}x{dim}: jnp.take of "
                          f"{picks} random rows, scores against a query, jnp.sort of the {picks} "
                          f"scores, jax.lax.top_k {top} and a gather of those rows, and a "
                          f"jnp.argsort of {rows} random keys (a shuffle) with a gather of "
                          f"{picks} rows by it; one program a step")


# ----------------------------------------------------------------------------- 8 bf16 matmul

def case_bf16_matmul(cfg: Cfg) -> Workload:
    n, chain = cfg.pick((8192, 4), (256, 4))
    keys = jax.random.split(jax.random.key(8), chain + 1)
    x = _normal(keys[0], (n, n), jnp.bfloat16, 1.0)
    ws = [_normal(kw, (n, n), jnp.bfloat16, 1 / math.sqrt(n)) for kw in keys[1:]]

    @jax.jit
    def matmul_chain(x, ws):
        for w in ws:
            x = x @ w
        return x

    def step(i):
        return matmul_chain(x, ws)

    return Workload(step, f"a jitted chain of {chain} bf16 matmuls {n}x{n} @ {n}x{n} "
                          "(x = x @ w_i, bf16 out); one program a step",
                    extra={"matmul_flops_per_step": 2 * chain * n ** 3})


# ----------------------------------------------------------------------------- 9 tiny step

TINY_INNER = 32


def _tiny_update(x, w, target):
    r = x @ w - target
    return x - 0.01 * (r @ w.T)


def _tiny(cfg: Cfg, scan: bool) -> Workload:
    n = 128
    k = jax.random.split(jax.random.key(9), 3)
    w = _normal(k[0], (n, n), jnp.float32, 1 / math.sqrt(n))
    target = _normal(k[1], (n, n), jnp.float32, 1.0)
    state = {"x": _normal(k[2], (n, n), jnp.float32, 1.0)}
    if scan:
        fn = jax.jit(lambda x, w, t: jax.lax.fori_loop(
            0, TINY_INNER, lambda _, x: _tiny_update(x, w, t), x))
    else:
        fn = jax.jit(_tiny_update)

    def step(i):
        state["x"] = fn(state["x"], w, target)
        return state["x"]

    what = (f"{TINY_INNER} of those updates inside one jitted program (jax.lax.fori_loop): "
            f"one dispatch and one block per {TINY_INNER} updates") if scan else \
        "one jitted update a step, block_until_ready every step"
    return Workload(step, f"gradient-descent update x -= 0.01 (x @ w - t) @ w.T on a {n}x{n} "
                          f"f32 x (w, t {n}x{n} f32): {what}",
                    inner_steps=TINY_INNER if scan else 1)


def case_tiny_step(cfg):
    return _tiny(cfg, scan=False)


def case_tiny_step_scan(cfg):
    return _tiny(cfg, scan=True)


# ----------------------------------------------------------------------------- 11 recompiles

def _recompile(cfg: Cfg, padded: bool) -> Workload:
    """A jitted MLP step on token batches whose length changes every step (as a loader that
    does not bucket its sequences gives them): each new length is a new shape, compiled inside
    the step; the after pads every batch to one length (and masks), compiled once."""
    d, width = cfg.pick((512, 2048), (32, 64))
    bucket = cfg.pick(1024, 64)
    k = jax.random.split(jax.random.key(11), 2)
    params = {"w1": _normal(k[0], (d, width), jnp.bfloat16, 1 / math.sqrt(d)),
              "w2": _normal(k[1], (width, d), jnp.bfloat16, 1 / math.sqrt(width))}

    def loss(p, x, mask):
        h = jax.nn.gelu(x @ p["w1"]) @ p["w2"]
        return (jnp.square(h.astype(jnp.float32)).mean(-1) * mask).sum() / mask.sum()

    step_fn = jax.jit(lambda p, x, m: _sgd(p, jax.grad(loss)(p, x, m), 1e-3))
    state = {"p": params}

    def step(i):
        length = bucket // 2 + 8 * (i % (bucket // 16)) + 8  # a new length each step
        x = jnp.ones((8, bucket if padded else length, d), jnp.bfloat16)
        mask = (jnp.arange(bucket if padded else length) < length).astype(jnp.float32)
        mask = jnp.broadcast_to(mask, (8, mask.shape[0]))
        state["p"] = step_fn(state["p"], x, mask)
        return state["p"]

    what = (f"every batch padded to {bucket} tokens with a mask: one shape, compiled once"
            if padded else "a new length every step: a new shape, compiled inside the step")
    return Workload(step, f"a jitted bf16 MLP train step (d {d}, width {width}, SGD) on 8 "
                          f"sequences of {bucket // 2 + 8} to {bucket} tokens: {what}")


def case_recompile(cfg):
    return _recompile(cfg, padded=False)


def case_recompile_padded(cfg):
    return _recompile(cfg, padded=True)


# ----------------------------------------------------------------------------- 10 flax + optax

def have_flax() -> str | None:
    """None where flax.linen and optax import; else why not."""
    try:
        import flax.linen  # noqa: F401
        import optax  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"{type(e).__name__}: {e}"
    return None


def _flax_setup(cfg: Cfg):
    import flax.linen as nn
    import optax

    batch, d_in, width, depth, classes = cfg.pick((1024, 3072, 2048, 3, 10), (32, 48, 32, 2, 10))

    class MLP(nn.Module):
        width: int
        depth: int
        classes: int

        @nn.compact
        def __call__(self, x):
            for _ in range(self.depth):
                x = nn.relu(nn.Dense(self.width)(x))
            return nn.Dense(self.classes)(x)

    model = MLP(width, depth, classes)
    kx, ky, kp = jax.random.split(jax.random.key(10), 3)
    x = jax.random.normal(kx, (batch, d_in), jnp.float32)
    y = jax.random.randint(ky, (batch,), 0, classes)
    params = model.init(kp, x)["params"]
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    opt_state = tx.init(params)

    def loss_fn(p, x, y):
        logits = model.apply({"params": p}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    shape = (f"a flax.linen MLP (f32, {d_in} -> {depth} x Dense {width} ReLU -> {classes}) "
             f"on batch {batch} with optax.adamw")
    return optax, tx, params, opt_state, x, y, loss_fn, shape


def case_flax_optax(cfg: Cfg) -> Workload:
    optax, tx, params, opt_state, x, y, loss_fn, shape = _flax_setup(cfg)
    loss_j = jax.jit(loss_fn)
    grad_j = jax.jit(jax.grad(loss_fn))

    @jax.jit
    def update_j(grads, opt_state, params):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    state = {"p": params, "s": opt_state, "log": []}

    def step(i):
        loss = loss_j(state["p"], x, y)
        grads = grad_j(state["p"], x, y)
        gnorm = optax.global_norm(grads)  # eager: one small program per op and leaf
        state["p"], state["s"] = update_j(grads, state["s"], state["p"])
        state["log"].append((float(loss), float(gnorm)))  # two syncs
        return state["p"]

    return Workload(step, f"{shape}, written naively: three jitted programs a step (loss, "
                          "grads, tx.update + optax.apply_updates), an eager "
                          "optax.global_norm(grads), and float(loss), float(grad_norm) every "
                          "step")


def case_flax_optax_fused(cfg: Cfg) -> Workload:
    optax, tx, params, opt_state, x, y, loss_fn, shape = _flax_setup(cfg)

    @partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads)}
        return optax.apply_updates(params, updates), opt_state, metrics

    state = {"p": params, "s": opt_state, "log": []}

    def step(i):
        state["p"], state["s"], metrics = train_step(state["p"], state["s"], x, y)
        if i % 4 == 3:
            state["log"].append(jax.device_get(metrics))
        return metrics

    return Workload(step, f"{shape}: one jitted train step (value_and_grad, tx.update, "
                          "optax.apply_updates, the grad norm inside), params and optimizer "
                          "state donated (donate_argnums=(0, 1)), metrics fetched every 4 steps "
                          "(the lab still blocks at the end of each step to time it)")


# ----------------------------------------------------------------------------- 12 host-to-device

def _h2d(cfg: Cfg, resident: bool) -> Workload:
    """A jitted layer whose weight the step passes as a numpy array: jax copies it to the chip
    at every call (a large host-to-device copy every step); the after puts it on the chip once
    (jax.device_put) and passes the device array."""
    n, b = cfg.pick((4096, 512), (128, 16))
    w_host = (np.random.default_rng(12).standard_normal((n, n), dtype=np.float32)
              / math.sqrt(n))
    w = jax.device_put(w_host) if resident else w_host
    state = {"x": _normal(jax.random.key(12), (b, n), jnp.float32, 1.0)}
    layer = jax.jit(lambda w, x: jnp.tanh(x @ w))

    def step(i):
        state["x"] = layer(w, state["x"])
        return state["x"]

    what = ("the weight put on the chip once (jax.device_put) and passed as a device array"
            if resident else f"the weight passed as a numpy array: {n * n * 4 >> 20} MiB "
            "copied to the chip at every call")
    return Workload(step, f"a jitted layer x = tanh(x @ w) on a {b}x{n} f32 x, w {n}x{n} f32: "
                          f"{what}")


def case_h2d_copy(cfg):
    return _h2d(cfg, resident=False)


def case_h2d_copy_resident(cfg):
    return _h2d(cfg, resident=True)


# ----------------------------------------------------------------------------- 13 MXU padding

def _mxu_shapes(cfg: Cfg, width: int) -> Workload:
    """A jitted bf16 MLP block (x @ w1, gelu, @ w2) whose hidden width is `width`: 1040 is not a
    multiple of 128, so the MXU pads each tile to 1152 (10.8% of its work is padding); the after
    takes 1024 (1.5% fewer FLOPs, no padding)."""
    d, rows = cfg.pick((4096, 8192), (128, 64))
    width = width if not cfg.smoke else width // 8
    k = jax.random.split(jax.random.key(13), 3)
    x = _normal(k[0], (rows, d), jnp.bfloat16, 1.0)
    w1 = _normal(k[1], (d, width), jnp.bfloat16, 1 / math.sqrt(d))
    w2 = _normal(k[2], (width, d), jnp.bfloat16, 1 / math.sqrt(width))
    block = jax.jit(lambda x, w1, w2: [x := jax.nn.gelu(x @ w1) @ w2 for _ in range(4)][-1])

    def step(i):
        return block(x, w1, w2)

    return Workload(step, f"a jitted bf16 MLP block applied 4 times, x {rows}x{d} @ w1 "
                          f"{d}x{width}, gelu, @ w2 {width}x{d}: hidden width {width}"
                          + (" (not a multiple of 128: the MXU pads it)" if width % 128 else ""),
                    extra={"matmul_flops_per_step": 4 * 2 * 2 * rows * d * width})


def case_mxu_padded(cfg):
    return _mxu_shapes(cfg, 1040)


def case_mxu_aligned(cfg):
    return _mxu_shapes(cfg, 1024)


# ----------------------------------------------------------------------------- 14 layout copies

def _layout(cfg: Cfg, native: bool) -> Workload:
    """Attention scores on activations kept as (batch, seq, heads, dim): the before moves heads
    ahead of the sequence with an explicit transpose of q, k and v (materialised, then read by
    the dots) and back after; the after writes the same einsums on the native layout and lets
    the dots take any dimension order."""
    bsz, seq, heads, dim = cfg.pick((16, 1024, 16, 128), (2, 64, 2, 32))
    k = jax.random.split(jax.random.key(14), 3)
    q, kk, v = (_normal(kx, (bsz, seq, heads, dim), jnp.bfloat16, 1.0) for kx in k)

    def moved(q, k, v):
        t = lambda a: jnp.transpose(a, (0, 2, 1, 3)).copy()  # noqa: E731
        q, k, v = (jax.lax.optimization_barrier(t(a)) for a in (q, k, v))
        s = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dim), axis=-1)
        return jnp.transpose(jnp.einsum("bhqk,bhkd->bhqd", s, v), (0, 2, 1, 3))

    def native_layout(q, k, v):
        s = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dim), axis=-1)
        return jnp.einsum("bhqk,bkhd->bqhd", s, v)

    fn = jax.jit(native_layout if native else moved)

    def step(i):
        return fn(q, kk, v)

    what = ("einsums on the native (batch, seq, heads, dim) layout" if native else
            "q, k and v transposed to (batch, heads, seq, dim) and materialised first")
    return Workload(step, f"attention scores and values, bf16, batch {bsz}, seq {seq}, "
                          f"{heads} heads of {dim}: {what}")


def case_layout_moved(cfg):
    return _layout(cfg, native=False)


def case_layout_native(cfg):
    return _layout(cfg, native=True)


# ----------------------------------------------------------------------------- the case list

CASES: dict[str, Callable[[Cfg], Workload]] = {
    "eager_loop": case_eager_loop,
    "eager_loop_jit": case_eager_loop_jit,
    "eager_big": case_eager_big,
    "train_step": case_train_step,
    "pallas_matmul": case_pallas_matmul,
    "pallas_matmul_big": case_pallas_matmul_big,
    "input_pipeline": case_input_pipeline,
    "input_pipeline_prefetch": case_input_pipeline_prefetch,
    "host_sync": case_host_sync,
    "host_sync_fused": case_host_sync_fused,
    "scan_layers": case_scan_layers,
    "scan_layers_unrolled": case_scan_layers_unrolled,
    "gather_sort": case_gather_sort,
    "bf16_matmul": case_bf16_matmul,
    "tiny_step": case_tiny_step,
    "tiny_step_scan": case_tiny_step_scan,
    "flax_optax": case_flax_optax,
    "flax_optax_fused": case_flax_optax_fused,
    "recompile": case_recompile,
    "recompile_padded": case_recompile_padded,
    "h2d_copy": case_h2d_copy,
    "h2d_copy_resident": case_h2d_copy_resident,
    "mxu_padded": case_mxu_padded,
    "mxu_aligned": case_mxu_aligned,
    "layout_moved": case_layout_moved,
    "layout_native": case_layout_native,
}

NEEDS_FLAX = {"flax_optax", "flax_optax_fused"}

PAIRS: dict[str, Pair] = {
    "eager_loop": Pair("eager_loop_jit",
                       "jit the step: put the loop body under jax.jit (knob: jax.jit around the "
                       "step function), so the ~320 small programs dispatched one by one from "
                       "Python become one program a step"),
    "pallas_matmul": Pair("pallas_matmul_big",
                          "raise the Pallas block sizes from 128x128 to 512x512 (knob: the "
                          "BlockSpec block shapes and the grid of pl.pallas_call), so each grid "
                          "step gives the MXU more work and A and B are re-read 8 times "
                          "instead of 32"),
    "input_pipeline": Pair("input_pipeline_prefetch",
                           "prefetch: make the next batch (the numpy work and jax.device_put) "
                           "in a background thread with a queue of 2, so it overlaps the "
                           "device step (knob: a prefetching iterator around the data "
                           "producer, queue depth 2)"),
    "host_sync": Pair("host_sync_fused",
                      "fuse the step: one jitted train step (value_and_grad and the update, "
                      "params donated) instead of three programs, and fetch metrics every 4 "
                      "steps instead of float(loss) and jax.device_get every step (knobs: "
                      "jax.jit around the whole step; the metrics logging interval)"),
    "scan_layers": Pair("scan_layers_unrolled",
                        "unroll the layer stack: a Python loop over the 4 layers inside the "
                        "jitted step instead of jax.lax.scan (knob: lax.scan vs an unrolled "
                        "loop), which drops the scan's stacking of each layer's residuals for "
                        "the backward pass"),
    "tiny_step": Pair("tiny_step_scan",
                      f"do more work per dispatch: {TINY_INNER} updates inside one jitted "
                      "program with jax.lax.fori_loop (knob: updates per jit call), so the "
                      "per-dispatch and per-block host cost is paid once per "
                      f"{TINY_INNER} updates"),
    "recompile": Pair("recompile_padded",
                      "pad to a few shapes: every batch padded to one length (a mask for the "
                      "padding), so the step compiles once instead of at every new length "
                      "(knob: bucket or pad the input shapes)"),
    "flax_optax": Pair("flax_optax_fused",
                       "one jitted train step: value_and_grad, optax.global_norm, tx.update "
                       "and optax.apply_updates inside jax.jit with params and optimizer state "
                       "donated (donate_argnums=(0, 1)), metrics read every 4 steps instead of "
                       "two float() per step (knob: jax.jit around the whole step)"),
}
PAIRS.update({
    "h2d_copy": Pair("h2d_copy_resident",
                     "keep the weight on the chip: jax.device_put it once and pass the device "
                     "array (knob: what the step passes as numpy), so no 64 MiB host-to-device "
                     "copy runs at every call"),
    "mxu_padded": Pair("mxu_aligned",
                       "a hidden width that is a multiple of 128: 1024 instead of 1040 (knob: "
                       "the model's dimensions), so the MXU's 128-wide tiles carry no padding"),
    "layout_moved": Pair("layout_native",
                         "no transposes: write the einsums on the activations' own (batch, "
                         "seq, heads, dim) layout (knob: the einsum's dimension order) instead "
                         "of materialising q, k and v as (batch, heads, seq, dim)"),
})
BEFORE_OF = {p.after: b for b, p in PAIRS.items()}


# ----------------------------------------------------------------------------- measuring

def _trace_file(case_dir: Path) -> Path:
    runs = sorted((case_dir / "plugins" / "profile").iterdir())
    found = sorted(runs[-1].glob("*.trace.json.gz"))
    if not found:
        raise FileNotFoundError(f"no *.trace.json.gz in {runs[-1]}")
    return found[0]


def device_busy(trace_path: Path) -> dict:
    """Per captured step, from the trace: the device busy share (union of the XLA Modules runs
    of /device:TPU:0 clipped to the host 'train' window, over the window), the number of runs
    starting in the window, and the device and window milliseconds."""
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    pname: dict = {}
    tname: dict = {}
    for e in events:
        if e.get("ph") == "M":
            if e.get("name") == "process_name":
                pname[e["pid"]] = e.get("args", {}).get("name", "")
            elif e.get("name") == "thread_name":
                tname[(e["pid"], e.get("tid"))] = e.get("args", {}).get("name", "")
    dev = [p for p, n in pname.items() if n == "/device:TPU:0"]
    dev = dev or [p for p, n in pname.items() if n.startswith("/device:")]
    module_lines = {k for k, n in tname.items() if k[0] in dev and n == "XLA Modules"}
    hosts = {p for p, n in pname.items() if n.startswith("/host:")}
    steps = {}
    runs = []
    for e in events:
        if e.get("ph") != "X":
            continue
        if (e["pid"], e.get("tid")) in module_lines:
            runs.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
        elif e.get("name") == "train" and e["pid"] in hosts and "step_num" in e.get("args", {}):
            n = int(e["args"]["step_num"])
            steps[n] = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
    out = {"device_process": pname.get(dev[0]) if dev else None,
           "module_runs": len(runs), "steps": []}
    runs.sort()
    for n in sorted(steps):
        lo, hi = steps[n]
        busy, cur_lo, cur_hi, count = 0.0, None, None, 0
        for a, b in runs:
            if lo <= a < hi:
                count += 1
            a, b = max(a, lo), min(b, hi)
            if b <= a:
                continue
            if cur_hi is None or a > cur_hi:
                if cur_hi is not None:
                    busy += cur_hi - cur_lo
                cur_lo, cur_hi = a, b
            else:
                cur_hi = max(cur_hi, b)
        if cur_hi is not None:
            busy += cur_hi - cur_lo
        win = hi - lo
        out["steps"].append({"step": n, "window_ms": win / 1e3, "device_ms": busy / 1e3,
                             "programs": count, "share": busy / win if win > 0 else 0.0})
    return out


def _bound(share: float | None) -> str:
    if share is None:
        return "unmeasured"
    if share >= DEVICE_BOUND_AT:
        return "device"
    return "host" if share < HOST_BOUND_BELOW else "mixed"


def run_case(name: str, cfg: Cfg, outdir: Path) -> dict:
    case_dir = outdir / name
    if case_dir.exists():
        shutil.rmtree(case_dir)  # a previous run's folder: jax picks the newest run by mtime
    case_dir.mkdir(parents=True)
    t_start = time.perf_counter()
    wl = CASES[name](cfg)
    try:
        i = 0
        for _ in range(WARMUP):
            jax.block_until_ready(wl.step(i))
            i += 1
        n_cap = wl.captured or cfg.captured(wl.heavy)
        t0 = time.perf_counter()
        with jax.profiler.trace(str(case_dir), create_perfetto_trace=True):
            for s in range(n_cap):
                with jax.profiler.StepTraceAnnotation("train", step_num=s):
                    jax.block_until_ready(wl.step(i))
                i += 1
        wall_profiled = time.perf_counter() - t0
        times = []
        for _ in range(cfg.timed):
            t = time.perf_counter()
            jax.block_until_ready(wl.step(i))
            times.append((time.perf_counter() - t) * 1e3)
            i += 1
    finally:
        if wl.close is not None:
            wl.close()
    trace_path = _trace_file(case_dir)
    busy = device_busy(trace_path)
    per = busy["steps"]
    measured = busy["device_process"] is not None and busy["module_runs"] > 0 and per
    share = statistics.median(p["share"] for p in per) if measured else None
    median = statistics.median(times)
    truth: dict[str, Any] = {
        "case": name,
        "workload": wl.workload,
        "bound": _bound(share),
    }
    if measured:
        win = statistics.median(p["window_ms"] for p in per)
        dev_ms = statistics.median(p["device_ms"] for p in per)
        progs = statistics.median(p["programs"] for p in per)
        progs = int(progs) if float(progs).is_integer() else progs
        shares = ", ".join(f"{p['share']:.1%}" for p in per)
        truth["bound_evidence"] = (
            f"median device busy share {share:.1%} over {len(per)} captured steps (per step "
            f"{shares}): {dev_ms:.3f} ms of XLA Modules "
            f"runs on {busy['device_process']} in a {win:.3f} ms step window, {progs:g} "
            "program runs a step (profiled)")
    else:
        win = statistics.median(p["window_ms"] for p in per) if per else None
        dev_ms = progs = None
        truth["bound_evidence"] = (
            "nothing to measure: the trace has no /device:TPU:0 XLA Modules line (run on "
            f"{jax.devices()[0].platform}); the bound must be measured on the chip")
    truth.update({
        "bound_rule": BOUND_RULE,
        "device_busy_share": round(share, 4) if share is not None else None,
        "device_busy_share_per_step": [round(p["share"], 4) for p in per] if measured else None,
        "device_ms_per_step": round(dev_ms, 4) if dev_ms is not None else None,
        "programs_per_step": progs,
        "step_ms_profiled_median": round(win, 4) if win is not None else None,
        "step_ms_unprofiled": [round(t, 4) for t in times],
        "step_ms_unprofiled_median": round(median, 4),
        "steps": len(per) if per else cfg.captured(wl.heavy),
        "wall_s_under_profiler": round(wall_profiled, 3),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
    })
    if wl.inner_steps > 1:
        truth["inner_steps"] = wl.inner_steps
        truth["step_ms_unprofiled_median_per_inner_step"] = round(median / wl.inner_steps, 5)
    if "matmul_flops_per_step" in wl.extra:
        truth["achieved_tflops_unprofiled"] = round(
            wl.extra["matmul_flops_per_step"] / (median * 1e-3) / 1e12, 2)
    truth.update(wl.extra)
    if cfg.smoke:
        truth["smoke"] = True
    if name in BEFORE_OF:
        truth["before"] = BEFORE_OF[name]
    _write_truth(case_dir, truth)
    truth["_case_s"] = round(time.perf_counter() - t_start, 1)
    return truth


def _write_truth(case_dir: Path, truth: dict) -> None:
    clean = {k: v for k, v in truth.items() if not k.startswith("_")}
    (case_dir / "truth.json").write_text(json.dumps(clean, indent=1) + "\n")


def link_pair(before: dict, after: dict, outdir: Path) -> None:
    """Write the before's pair fields (and the after's speedup) from both measurements."""
    pair = PAIRS[before["case"]]
    b_ms = before["step_ms_unprofiled_median"]
    a_ms = after["step_ms_unprofiled_median"]
    inner = after.get("inner_steps", 1)
    if inner > 1:
        a_per = a_ms / inner
        speedup = b_ms / a_per
        text = (f"{a_per:.4g} ms per update ({a_ms:.4g} ms per dispatch of {inner} updates, "
                f"divided by {inner}) vs {b_ms:.4g} ms per update unprofiled: {speedup:.3g}x")
    else:
        speedup = b_ms / a_ms
        text = f"{a_ms:.4g} ms vs {b_ms:.4g} ms unprofiled: {speedup:.3g}x"
    if speedup < NO_GAIN_BELOW:
        text += f" (no gain: below {NO_GAIN_BELOW}x)"
    text += f"; after's bound: {after['bound']}"
    before.update({"first_change": pair.first_change, "after": after["case"],
                   "measured_after": text, "after_speedup": round(speedup, 3)})
    after["speedup_vs_before"] = round(speedup, 3)
    _write_truth(outdir / before["case"], before)
    _write_truth(outdir / after["case"], after)


def write_tarball(outdir: Path, names: list[str]) -> tuple[Path, int, bool]:
    """OUTDIR/lab.tar.gz with the case folders (and lab_summary.json); without the perfetto
    copies of the traces where the whole would pass TAR_LIMIT."""
    path = outdir / "lab.tar.gz"

    def build(skip_perfetto: bool) -> int:
        with tarfile.open(path, "w:gz") as tar:
            summary = outdir / "lab_summary.json"
            if summary.exists():
                tar.add(summary, arcname=summary.name)
            for name in names:
                case_dir = outdir / name
                if not case_dir.is_dir():
                    continue
                for f in sorted(case_dir.rglob("*")):
                    if f.is_file() and not (skip_perfetto and f.name == "perfetto_trace.json.gz"):
                        tar.add(f, arcname=str(f.relative_to(outdir)))
        return path.stat().st_size

    size = build(False)
    if size > TAR_LIMIT:
        return path, build(True), True
    return path, size, False


def _summary_line(t: dict) -> str:
    share = t.get("device_busy_share")
    busy = f"{share:6.1%}" if share is not None else "   n/a"
    line = (f"{t['case']:<24} step {t['step_ms_unprofiled_median']:9.3f} ms  busy {busy}  "
            f"{t['bound']:<10}")
    if t.get("programs_per_step") is not None:
        line += f" programs/step {t['programs_per_step']:g}"
    if "after_speedup" in t:
        line += f"  -> {t['after']} {t['after_speedup']:.3g}x"
    return line + f"  ({t.get('_case_s', 0):.0f} s)"


def select(spec: str | None) -> list[str]:
    if not spec:
        return list(CASES)
    asked = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in asked if s not in CASES]
    if unknown:
        print(f"tpu_lab: unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}",
              file=sys.stderr)
        raise SystemExit(2)
    wanted = set(asked)
    for s in asked:
        if s in PAIRS and PAIRS[s].after not in wanted:
            print(f"tpu_lab: {s} brings its after, {PAIRS[s].after}")
            wanted.add(PAIRS[s].after)
    return [c for c in CASES if c in wanted]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes and 2 steps: proves the code paths on a CPU")
    args = ap.parse_args(argv)
    names = select(args.cases)
    outdir = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)

    t_all = time.perf_counter()
    dev = jax.devices()[0]
    cfg = Cfg(smoke=args.smoke, interpret=dev.platform != "tpu")
    print(f"tpu_lab: jax {jax.__version__} ({Path(jax.__file__).parent}), device "
          f"{dev.device_kind} ({dev.platform}), {len(names)} cases"
          f"{' (smoke)' if cfg.smoke else ''}, chip opened in {time.perf_counter() - t_all:.1f} s",
          flush=True)
    if dev.platform != "tpu" and not cfg.smoke:
        print("tpu_lab: warning: not a TPU; the truths will say 'unmeasured'", flush=True)
    flax_missing = have_flax() if NEEDS_FLAX & set(names) else None
    if flax_missing:
        print(f"tpu_lab: skipping {', '.join(sorted(NEEDS_FLAX & set(names)))}: flax/optax not "
              f"importable ({flax_missing}); install them (pip install --target DIR flax optax, "
              "then DIR at the end of PYTHONPATH) and run those cases", flush=True)
        names = [n for n in names if n not in NEEDS_FLAX]

    truths: dict[str, dict] = {}
    failed: dict[str, str] = {}
    for name in names:
        print(f"tpu_lab: {name} ...", flush=True)
        try:
            truths[name] = run_case(name, cfg, outdir)
        except Exception:
            tb = traceback.format_exc()
            failed[name] = tb.strip().splitlines()[-1]
            print(f"tpu_lab: {name} FAILED:\n{tb}", flush=True)
            case_dir = outdir / name
            case_dir.mkdir(parents=True, exist_ok=True)
            (case_dir / "error.txt").write_text(tb)
            continue
        finally:
            gc.collect()
        print("  " + _summary_line(truths[name]), flush=True)
        before = BEFORE_OF.get(name)
        if before in truths:
            link_pair(truths[before], truths[name], outdir)

    summary = {"jax": jax.__version__, "device": dev.device_kind, "smoke": cfg.smoke,
               "wall_s": round(time.perf_counter() - t_all, 1),
               "cases": {n: {k: v for k, v in t.items() if not k.startswith("_")}
                         for n, t in truths.items()},
               "failed": failed,
               "skipped": sorted(NEEDS_FLAX & set(select(args.cases))) if flax_missing else []}
    (outdir / "lab_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    tar, size, trimmed = write_tarball(outdir, names)

    print(f"\ntpu_lab: {len(truths)} cases in {time.perf_counter() - t_all:.0f} s on "
          f"{dev.device_kind}; rule: {BOUND_RULE}")
    for name in names:
        if name in truths:
            print(_summary_line(truths[name]))
        else:
            print(f"{name:<24} FAILED: {failed.get(name, '?')}")
    for n in summary["skipped"]:
        print(f"{n:<24} skipped: flax/optax not importable")
    print(f"tpu_lab: {tar} {size / 2**20:.2f} MiB"
          + (" (perfetto_trace.json.gz copies left out to stay under "
             f"{TAR_LIMIT / 2**20:.0f} MiB)" if trimmed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
