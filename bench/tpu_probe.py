#!/usr/bin/env python3
"""Probes: JAX programs captured the way users capture them, not the way the lab does.

Usage:
    python3 bench/tpu_probe.py OUTDIR [--probes a,b,c] [--smoke]

The lab (`bench/tpu_lab.py`) captures every case alike: a "train" StepTraceAnnotation around
each step, a block at each step's end, `create_perfetto_trace=True`. Real captures are not so
tidy, and the bundle is measured on captures it has not seen. Each probe here is a program
written and captured as a user would: `jax.profiler.start_trace`/`stop_trace`, and one of
- no step annotation at all (steps are the program cycle),
- a step annotation of another name (`step`, `solve`),
- no block at each step (the host runs ahead of the chip; a metric read every few steps),
- a host callback inside the jitted step, an autoregressive decode loop that reads each token,
- int8 matmuls, a rematerialised attention stack, a while loop on the chip,
- ProfileOptions with the Python tracer off, or the host tracer off too,
- steps marked by a plain TraceAnnotation(f"step {i}"), batches from a loader thread,
- lax.switch among branches of very different cost, a few long steps,
- the compilation inside the capture (no warmup), a capture opened while earlier dispatched
  steps still run on the chip,
- a whole greedy generation in one lax.scan (KV cache in the carry), a ResNet-style step with
  batch norm and hand-written momentum, an embedding table's scatter-add gradient (ids drawn
  on the chip), a 50,257-word softmax cross-entropy, eager jnp metrics after the jitted step,
  jax.checkpoint policies (nothing saved, then the matmuls saved),
- per-example gradients by lax.map inside the jitted step, f32 matmuls at Precision.HIGHEST,
  a top-k by argsort of whole rows, batch lengths that bring a compile every 8th step, 64 MB
  of numpy batch made device arrays each step, a 2,048-step scan of a tiny RNN cell, attention
  at sequence 4,096 with the scores written out, a Python loop of 48 jitted layer calls,
- the same per-example loop at batch 128 (small enough to commit; and with 8 steps a dispatch:
  the other change for a step too small for the chip), an inference step that scores rows one
  at a time in a lax.fori_loop,
- dropout masks drawn by the default threefry PRNG, a KV cache jitted without donation that
  XLA copies into another layout and back each step, 128 MiB of logits brought to numpy for an
  argmax each step, a learning rate passed as a static argument (a compile every step),
- a train step in float64 under jax.enable_x64, an Adam update of 512 separate small arrays,
- greedy decoding that grows its token history by jnp.concatenate (a new shape every step),
  a train step jitted inside the loop (jax.jit(lambda ...) each step), a denoising step whose
  noise numpy draws on the host each step,
- a capture at size: 250,000 tiny eager ops over 4 steps, the Python tracer off.

Each probe leaves `OUTDIR/<probe>/plugins/profile/<run>/...` and `OUTDIR/<probe>/truth.json`:
the step time without the profiler (`step_ms_unprofiled_median`: steps run as the probe runs
them, each timed; where the host does not block at each step, the loop's time over its steps),
the chip's own busy time per step in the capture (the union of `XLA Modules` runs on
`/device:TPU:0` over the captured steps' span, divided by the steps; where steps were dispatched
just before the capture, only the last runs, one a captured step), and `bound` from
`busy_share` = device ms per step / unprofiled step ms (device at 0.8 or more, host under 0.5,
mixed between: the lab's rule, on a share that needs no annotation). Where the probe annotates
its steps, `step_ms_profiled_median` is the median distance between annotation starts (a
StepTraceAnnotation's, or a TraceAnnotation's whose name starts with `annotation_prefix`). The
truth also names the capture's ProfileOptions (`profile_options`) and warmup where not default,
and in `notes` a fact read as the program was built (the path jax.nn.dot_product_attention took).

Twenty-three probes have an after, the change an engineer would make first, captured and timed
the same way (`AFTER`): the host callback moved out of the jitted step, the decoded token kept
on the device, the gradient norm jitted, the matmuls saved by the checkpoint policy, jax.vmap
for lax.map (at both batches) and for the fori_loop, bf16 matmul inputs at the default
precision, jax.lax.top_k, every batch padded to one length, batches device_put two steps ahead,
the scan unrolled by 8, jax.nn.dot_product_attention, the layers in one jitted call, an rbg key
(or float() read once), the cache donated (or stored in the program's order, donated or not),
the accuracy computed in the jitted function, the learning rate traced, float32 for float64, the
leaves stacked into one array, a preallocated history buffer, the step jitted once before the
loop, the noise drawn by jax.random in the step; the before's truth gets `after` and
`after_speedup` (an after no faster is kept as such). A before with two afters (the gradient
norm jitted, or float() read once after the steps; jax.vmap, or eight steps a dispatch) gets
each one's speedup in `afters`, and `after` is the one the chip ran fastest. The captures are
for trying the bundle on programs it was not written against; the few the tests read are
committed under tests/data/tpu-probes/.
`OUTDIR/probes.tar.gz` holds every probe's folder. Exit codes: 0 all ran, 1 one failed, 2 usage.
"""

from __future__ import annotations

import os

os.environ.setdefault("TPU_LOG_DIR", "disabled")

import argparse
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
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

WARMUP = 2
BOUND = (0.8, 0.5)


@dataclass
class Probe:
    """`run(n, annotate)` runs n steps as the user's loop does (annotated where the probe
    annotates) and returns when the last result is on the host."""

    run: Callable[[int, bool], None]
    what: str
    annotation: str | None  # the StepTraceAnnotation name the probe uses; None: none
    captured: int = 8
    timed: int = 16
    chunk: int = 1  # steps a timed chunk runs (the whole loop where the host does not block)
    options: dict[str, int] | None = None  # ProfileOptions attributes for the capture
    annotation_prefix: str | None = None  # steps marked by a TraceAnnotation named so, no step_num
    warmup: int = WARMUP  # steps run before the capture
    pre_capture: Callable[[], None] | None = None  # run just before start_trace, no block;
    # then the chip's busy time counts only the last `captured` runs (one program a step)
    notes: str | None = None  # a fact about the program found as it was built (the truth's notes)


def _normal(key, shape, dtype, scale):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def _step_ctx(name, i, annotate):
    if annotate and name:
        return jax.profiler.StepTraceAnnotation(name, step_num=i)
    return _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _mlp_loss(p, x, y):
    out = jax.nn.relu(x @ p["w1"]) @ p["w2"]
    return jnp.mean(jnp.square((out - y).astype(jnp.float32)))


def _mlp(smoke: bool):
    d, h, batch = (64, 128, 32) if smoke else (2048, 8192, 2048)
    k = jax.random.split(jax.random.key(11), 4)
    bf = jnp.bfloat16
    params = {"w1": _normal(k[0], (d, h), bf, 1 / math.sqrt(d)),
              "w2": _normal(k[1], (h, d), bf, 1 / math.sqrt(h))}
    x = _normal(k[2], (batch, d), bf, 1.0)
    y = _normal(k[3], (batch, d), bf, 1.0)


    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        loss, g = jax.value_and_grad(_mlp_loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g), loss

    return params, x, y, train_step, f"{d}->{h}->{d} bf16 MLP, batch {batch}"


def probe_async_train(smoke: bool) -> Probe:
    """Steps annotated "train" but not blocked: the host dispatches ahead; float(loss) every
    4th step is the only wait."""
    params, x, y, train_step, shape = _mlp(smoke)
    st = {"p": params}

    def run(n, annotate):
        loss = None
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], x, y)
                if i % 4 == 3:
                    float(loss)
        jax.block_until_ready(st["p"])

    return Probe(run, f"jitted donated {shape} train step, no block at the step's end; "
                      "float(loss) every 4th step", "train", captured=12, timed=48, chunk=24)


def probe_unannotated_train(smoke: bool) -> Probe:
    params, x, y, train_step, shape = _mlp(smoke)
    st = {"p": params}

    def run(n, annotate):
        for _ in range(n):
            st["p"], loss = train_step(st["p"], x, y)
            jax.block_until_ready(loss)

    return Probe(run, f"jitted donated {shape} train step, blocked each step, no step "
                      "annotation", None)


def probe_two_programs(smoke: bool, jit_norm: bool = False, sync: bool = True) -> Probe:
    """A step of two jitted programs (the gradients, then the update) and an eager metric,
    float(loss) each step (or, not `sync`, once after the steps run); no annotation: the steps
    are the program cycle."""
    params, x, y, _, shape = _mlp(smoke)


    grad_fn = jax.jit(jax.value_and_grad(_mlp_loss))
    update = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g),
                     donate_argnums=(0,))
    st = {"p": params}

    def norm(g):
        return jnp.sqrt(sum(jnp.sum(jnp.square(v.astype(jnp.float32)))
                            for v in jax.tree.leaves(g)))  # eager: several programs

    norm_fn = jax.jit(norm) if jit_norm else norm

    def run(n, annotate):
        for _ in range(n):
            loss, g = grad_fn(st["p"], x, y)
            st["p"] = update(st["p"], g)
            gnorm = norm_fn(g)
            if sync:
                float(loss), float(gnorm)
        if not sync:
            float(loss), float(gnorm)

    return Probe(run, f"{shape}: two jitted programs a step (value_and_grad, then the update, "
                      "params donated), " + ("a jitted" if jit_norm else "an eager") +
                 " gradient norm, float(loss) and float(gnorm) " +
                 ("each step" if sync else "once after the steps") + "; no annotation", None,
                 chunk=1 if sync else 16, timed=16 if sync else 32)


def probe_decode_kv(smoke: bool, on_device: bool = False) -> Probe:
    """Greedy decoding with a KV cache: one jitted step a token, the token read to the host
    (int()) to feed the next step (or, `on_device`, fed back as a jax array); no annotation."""
    d, heads, vocab, length = (32, 2, 64, 64) if smoke else (1024, 8, 32000, 1024)
    dh = d // heads
    k = jax.random.split(jax.random.key(12), 6)
    bf = jnp.bfloat16
    p = {"emb": _normal(k[0], (vocab, d), bf, 0.02), "wq": _normal(k[1], (d, d), bf, d ** -.5),
         "wk": _normal(k[2], (d, d), bf, d ** -.5), "wv": _normal(k[3], (d, d), bf, d ** -.5),
         "wo": _normal(k[4], (d, d), bf, d ** -.5), "head": _normal(k[5], (d, vocab), bf, d ** -.5)}

    @partial(jax.jit, donate_argnums=(1,))
    def decode(p, cache, tok, pos):
        x = p["emb"][tok][None]  # (1, d)
        q = (x @ p["wq"]).reshape(heads, dh)
        kk = (x @ p["wk"]).reshape(1, heads, dh)
        vv = (x @ p["wv"]).reshape(1, heads, dh)
        ck = jax.lax.dynamic_update_slice(cache["k"], kk, (pos, 0, 0))
        cv = jax.lax.dynamic_update_slice(cache["v"], vv, (pos, 0, 0))
        s = jnp.einsum("hd,thd->ht", q, ck).astype(jnp.float32) / math.sqrt(dh)
        s = jnp.where(jnp.arange(length)[None] <= pos, s, -1e9)
        o = jnp.einsum("ht,thd->hd", jax.nn.softmax(s, -1).astype(bf), cv).reshape(1, d)
        logits = (x + o @ p["wo"]) @ p["head"]
        return jnp.argmax(logits[0]), {"k": ck, "v": cv}

    st = {"cache": {"k": jnp.zeros((length, heads, dh), bf),
                    "v": jnp.zeros((length, heads, dh), bf)}, "tok": 1, "pos": 0}

    def run(n, annotate):
        for _ in range(n):
            t, st["cache"] = decode(p, st["cache"], st["tok"], st["pos"] % length)
            st["tok"] = t if on_device else int(t)
            st["pos"] += 1
        jax.block_until_ready(st["tok"])

    how = ("the token kept on the device (fed to the next step as a jax array), read at the "
           "loop's end" if on_device else "int(token) read each step")
    return Probe(run, f"greedy KV-cache decode, d {d}, {heads} heads, vocab {vocab}, cache "
                      f"{length}: one jitted step a token, {how}, no annotation", None,
                 captured=32, timed=64, chunk=32 if on_device else 4)


def probe_conv_train(smoke: bool) -> Probe:
    b, hw, c = (4, 16, 8) if smoke else (128, 64, 128)
    k = jax.random.split(jax.random.key(13), 5)
    bf = jnp.bfloat16
    p = {"c1": _normal(k[0], (3, 3, 3, c), bf, 0.2), "c2": _normal(k[1], (3, 3, c, c), bf, 0.05),
         "c3": _normal(k[2], (3, 3, c, c), bf, 0.05), "fc": _normal(k[3], (c, 10), bf, 0.1)}
    x = _normal(k[4], (b, hw, hw, 3), bf, 1.0)
    y = jnp.arange(b) % 10

    def conv(x, w, stride):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss_fn(p, x, y):
        h = jax.nn.relu(conv(x, p["c1"], 1))
        h = jax.nn.relu(conv(h, p["c2"], 2))
        h = jax.nn.relu(conv(h, p["c3"], 1))
        logits = jnp.mean(h, axis=(1, 2)) @ p["fc"]
        logz = jax.nn.logsumexp(logits.astype(jnp.float32), -1)
        return jnp.mean(logz - jnp.take_along_axis(logits.astype(jnp.float32), y[:, None], 1)[:, 0])

    @jax.jit
    def train_step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-2 * b, p, g), loss

    st = {"p": p}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("step", i, annotate):
                st["p"], loss = train_step(st["p"], x, y)
                jax.block_until_ready(loss)

    return Probe(run, f"jitted 3-layer bf16 CNN train step (NHWC, {hw}x{hw}, {c} channels, "
                      f"batch {b}), annotated StepTraceAnnotation('step')", "step")


def probe_while_solver(smoke: bool) -> Probe:
    n = 128 if smoke else 4096
    k = jax.random.split(jax.random.key(14), 2)
    a = _normal(k[0], (n, n), jnp.float32, 1 / math.sqrt(n))
    a = a @ a.T + jnp.eye(n)
    b = _normal(k[1], (n,), jnp.float32, 1.0)

    @jax.jit
    def cg(a, b):
        def cond(s):
            return (s[4] < 200) & (s[3] > 1e-10)

        def body(s):
            x, r, pp, rr, it = s
            ap = a @ pp
            alpha = rr / (pp @ ap)
            x = x + alpha * pp
            r = r - alpha * ap
            rr2 = r @ r
            return x, r, r + (rr2 / rr) * pp, rr2, it + 1

        x0 = jnp.zeros_like(b)
        return jax.lax.while_loop(cond, body, (x0, b, b, b @ b, 0))[0]

    def run(n_steps, annotate):
        for i in range(n_steps):
            with _step_ctx("solve", i, annotate):
                jax.block_until_ready(cg(a, b))

    return Probe(run, f"jitted conjugate gradient (lax.while_loop, up to 200 iterations) on a "
                      f"{n}x{n} f32 matrix, annotated StepTraceAnnotation('solve')", "solve")


def probe_callback_step(smoke: bool, outside: bool = False) -> Probe:
    params, x, y, _, shape = _mlp(smoke)

    def host_metric(v):
        time.sleep(0.003)  # a host-side logger or metric store
        return np.float32(np.asarray(v).mean())

    @jax.jit
    def step(p, x, y):
        h = jax.nn.relu(x @ p["w1"])
        mean = jnp.mean(h.astype(jnp.float32))
        if not outside:
            mean = io_callback(host_metric, jax.ShapeDtypeStruct((), jnp.float32), mean,
                               ordered=True)
        out = h @ p["w2"]
        return jnp.mean(jnp.square((out - y).astype(jnp.float32))) + 0 * mean, mean

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                loss, mean = jax.block_until_ready(step(params, x, y))
                if outside and i % 4 == 3:
                    host_metric(mean)  # the metric logged on the host every 4th step

    how = ("the host function (3 ms) called on the host after every 4th step instead"
           if outside else "an ordered io_callback to a host function (3 ms) between the two "
                           "matmuls")
    return Probe(run, f"jitted {shape} forward with {how}, annotated 'train', blocked each "
                      "step", "train")


def probe_int8_matmul(smoke: bool) -> Probe:
    n, chain = (256, 2) if smoke else (8192, 4)
    k = jax.random.split(jax.random.key(15), chain + 1)
    x = jax.random.randint(k[0], (n, n), -8, 8, jnp.int8)
    ws = [jax.random.randint(kw, (n, n), -8, 8, jnp.int8) for kw in k[1:]]

    @jax.jit
    def chain_fn(x, ws):
        for w in ws:
            acc = jax.lax.dot(x, w, preferred_element_type=jnp.int32)
            x = jnp.clip(acc >> 8, -127, 127).astype(jnp.int8)
        return x

    def run(n_steps, annotate):
        for i in range(n_steps):
            with _step_ctx("train", i, annotate):
                jax.block_until_ready(chain_fn(x, ws))

    return Probe(run, f"jitted chain of {chain} int8 matmuls {n}x{n} (int32 accumulate, "
                      "requantised), annotated 'train'", "train")


def _layers_run(layer, ps, x):
    """`run(n, annotate)` of a stack of `layer(p, h)` over the params `ps`: a jitted, donated
    train step on the mean square of the last output, annotated 'train', blocked each step."""
    def loss_fn(ps, x):
        h = x
        for p in ps:
            h = layer(p, h)
        return jnp.mean(jnp.square(h.astype(jnp.float32)))

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(ps, x):
        loss, g = jax.value_and_grad(loss_fn)(ps, x)
        return jax.tree.map(lambda a, gg: a - 1e-4 * gg, ps, g), loss

    st = {"p": ps}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], x)
                jax.block_until_ready(loss)
    return run


def probe_remat_attention(smoke: bool) -> Probe:
    b, t, d, heads, layers = (2, 32, 32, 2, 2) if smoke else (8, 1024, 1024, 8, 4)
    k = jax.random.split(jax.random.key(16), 3 * layers + 1)
    bf = jnp.bfloat16
    ps = [{"qkv": _normal(k[3 * i], (d, 3 * d), bf, d ** -.5),
           "o": _normal(k[3 * i + 1], (d, d), bf, d ** -.5),
           "ff": _normal(k[3 * i + 2], (d, d), bf, d ** -.5)} for i in range(layers)]
    x = _normal(k[-1], (b, t, d), bf, 1.0)

    @jax.checkpoint
    def layer(p, h):
        q, kk, v = jnp.split(h @ p["qkv"], 3, axis=-1)
        shp = (b, t, heads, d // heads)
        o = jax.nn.dot_product_attention(q.reshape(shp), kk.reshape(shp), v.reshape(shp),
                                         is_causal=True).reshape(b, t, d)
        h = h + o @ p["o"]
        return h + jax.nn.gelu(h @ p["ff"])

    return Probe(_layers_run(layer, ps, x),
                 f"jitted causal-attention train step, {layers} layers under jax.checkpoint "
                 f"(remat), batch {b}, seq {t}, d {d}, {heads} heads, "
                 "jax.nn.dot_product_attention, annotated 'train'", "train")


def probe_grad_accum(smoke: bool) -> Probe:
    """Gradient accumulation: lax.scan over 4 microbatches inside one jitted step."""
    params, x, y, _, shape = _mlp(smoke)
    micro = 4


    @partial(jax.jit, donate_argnums=(0,))
    def step(p, x, y):
        xs, ys = x.reshape(micro, -1, x.shape[-1]), y.reshape(micro, -1, y.shape[-1])

        def body(acc, xy):
            loss, g = jax.value_and_grad(_mlp_loss)(p, *xy)
            return jax.tree.map(jnp.add, acc, g), loss

        zero = jax.tree.map(jnp.zeros_like, p)
        g, losses = jax.lax.scan(body, zero, (xs, ys))
        return jax.tree.map(lambda a, b: a - 1e-3 * b / micro, p, g), jnp.mean(losses)

    st = {"p": params}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = step(st["p"], x, y)
                jax.block_until_ready(loss)

    return Probe(run, f"{shape}: gradients accumulated over {micro} microbatches with "
                      "lax.scan inside one jitted step, annotated 'train'", "train")


def probe_debug_print(smoke: bool) -> Probe:
    """A jitted train step that prints its loss with jax.debug.print every step."""
    params, x, y, _, shape = _mlp(smoke)


    @partial(jax.jit, donate_argnums=(0,))
    def step(p, x, y):
        loss, g = jax.value_and_grad(_mlp_loss)(p, x, y)
        jax.debug.print("loss {l}", l=loss)
        return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), loss

    st = {"p": params}

    def run(n, annotate):
        for _ in range(n):
            st["p"], loss = step(st["p"], x, y)
        jax.block_until_ready(loss)

    return Probe(run, f"{shape}: jitted train step printing its loss with jax.debug.print; "
                      "the host blocks only at the loop's end; no annotation", None,
                 captured=8, timed=32, chunk=16)


def probe_host_batches(smoke: bool) -> Probe:
    """Each step's batch made with numpy on the host and passed as a numpy array; float(loss)
    each step; no annotation."""
    params, x, y, train_step, shape = _mlp(smoke)
    rng = np.random.default_rng(0)
    st = {"p": params}
    xs, ys = x.shape, y.shape

    def run(n, annotate):
        for _ in range(n):
            bx = rng.standard_normal(xs, dtype=np.float32).astype(jnp.bfloat16)
            by = rng.standard_normal(ys, dtype=np.float32).astype(jnp.bfloat16)
            st["p"], loss = train_step(st["p"], bx, by)
            float(loss)

    return Probe(run, f"{shape}: each batch made by numpy on the host (standard normal, cast "
                      "to bf16) and passed as numpy arrays; float(loss) each step; no "
                      "annotation", None)


def probe_pmap_step(smoke: bool) -> Probe:
    """The train step under jax.pmap on the one chip (older data-parallel code)."""
    params, x, y, _, shape = _mlp(smoke)


    def step(p, x, y):
        loss, g = jax.value_and_grad(_mlp_loss)(p, x, y)
        g = jax.lax.pmean(g, "d")
        return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), jax.lax.pmean(loss, "d")

    pstep = jax.pmap(step, axis_name="d")
    st = {"p": jax.tree.map(lambda a: a[None], params)}
    px, py = x[None], y[None]

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = pstep(st["p"], px, py)
                jax.block_until_ready(loss)

    return Probe(run, f"{shape}: the train step under jax.pmap (axis 'd', one device, pmean "
                      "of the gradients), annotated 'train'", "train")


def probe_options_train(smoke: bool, **options: int) -> Probe:
    """The train step annotated "train", blocked each step, captured with ProfileOptions set
    (`options`: the Python tracer off, or the host tracer off too)."""
    params, x, y, train_step, shape = _mlp(smoke)
    st = {"p": params}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], x, y)
                jax.block_until_ready(loss)

    opts = ", ".join(f"{k}={v}" for k, v in options.items())
    return Probe(run, f"jitted donated {shape} train step, blocked each step, annotated "
                      f"'train'; captured with ProfileOptions({opts})", "train", options=options)


def probe_named_steps(smoke: bool) -> Probe:
    """Steps marked by a plain TraceAnnotation(f"step {i}") (no StepTraceAnnotation)."""
    params, x, y, train_step, shape = _mlp(smoke)
    st = {"p": params}

    def run(n, annotate):
        for i in range(n):
            with jax.profiler.TraceAnnotation(f"step {i}") if annotate else _Null():
                st["p"], loss = train_step(st["p"], x, y)
                jax.block_until_ready(loss)

    return Probe(run, f"jitted donated {shape} train step, blocked each step, each step in a "
                      "TraceAnnotation(f'step {i}') (no step_num)", None,
                 annotation_prefix="step ")


def probe_thread_loader(smoke: bool) -> Probe:
    """Batches gathered by numpy (random rows of a host pool, a few ms) on a background thread
    into a queue.Queue(maxsize=2); the main thread device_puts each, runs the step and reads
    float(loss). The thread is joined at the end of every run."""
    params, x, y, train_step, shape = _mlp(smoke)
    rng = np.random.default_rng(1)
    (batch, d), rows = x.shape, 4 * x.shape[0]
    pool = [rng.standard_normal((rows, d), dtype=np.float32).astype(jnp.bfloat16)
            for _ in range(2)]
    st = {"p": params}

    def run(n, annotate):
        q, stop = queue.Queue(maxsize=2), threading.Event()

        def load():
            for _ in range(n):
                b = tuple(a[rng.integers(0, rows, batch)] for a in pool)
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        pass

        t = threading.Thread(target=load, name="loader", daemon=True)
        t.start()
        try:
            for i in range(n):
                bx, by = q.get(timeout=60)
                with _step_ctx("train", i, annotate):
                    st["p"], loss = train_step(st["p"], jax.device_put(bx), jax.device_put(by))
                    float(loss)
        finally:
            stop.set()
            t.join()

    return Probe(run, f"{shape}: batches gathered by numpy (random rows of a {rows}-row bf16 "
                      "pool) on a background thread into a Queue(maxsize=2); the main thread "
                      "device_puts each, float(loss) each step, annotated 'train'", "train",
                 captured=12, timed=32, chunk=16)


def probe_cond_switch(smoke: bool) -> Probe:
    """lax.switch(i % 3) among branches of 1, 4 and 16 chained bf16 matmuls: step times that
    differ step to step by design; the index a device int each step."""
    n = 64 if smoke else 2048
    k = jax.random.split(jax.random.key(17), 2)
    x = _normal(k[0], (n, n), jnp.bfloat16, 1.0)
    w = _normal(k[1], (n, n), jnp.bfloat16, 1 / math.sqrt(n))

    def chain(m):
        return lambda x, w: jax.lax.fori_loop(0, m, lambda _, h: h @ w, x)

    @jax.jit
    def step(i, x, w):
        return jnp.sum(jax.lax.switch(i % 3, [chain(1), chain(4), chain(16)], x, w)
                       .astype(jnp.float32))

    st = {"i": 0}

    def run(n_steps, annotate):
        for i in range(n_steps):
            with _step_ctx("train", i, annotate):
                jax.block_until_ready(step(jax.device_put(np.int32(st["i"])), x, w))
            st["i"] += 1

    return Probe(run, f"jitted lax.switch(i % 3) among 1, 4 and 16 chained {n}x{n} bf16 "
                      "matmuls, the index a device int each step, blocked each step, "
                      "annotated 'train'", "train", captured=9, timed=30, chunk=3)


def probe_few_big_steps(smoke: bool) -> Probe:
    """A few long device-bound steps: 8 chained 8192x8192 bf16 matmuls in a fori_loop."""
    n, m = (128, 2) if smoke else (8192, 8)
    k = jax.random.split(jax.random.key(18), 2)
    x = _normal(k[0], (n, n), jnp.bfloat16, 1.0)
    w = _normal(k[1], (n, n), jnp.bfloat16, 1 / math.sqrt(n))
    step = jax.jit(lambda x, w: jax.lax.fori_loop(0, m, lambda _, h: h @ w, x))

    def run(n_steps, annotate):
        for i in range(n_steps):
            with _step_ctx("train", i, annotate):
                jax.block_until_ready(step(x, w))

    return Probe(run, f"jitted fori_loop of {m} chained {n}x{n} bf16 matmuls, blocked each "
                      "step, annotated 'train': few long steps", "train", captured=3, timed=5)


def probe_compile_in_capture(smoke: bool) -> Probe:
    """The blocked "train" step with no warmup: step 0 of the capture holds the train step's
    tracing and compilation; the timed steps after it are the compiled steady state."""
    pr = probe_options_train(smoke)
    pr.warmup = 0
    pr.what = pr.what.split(";")[0] + "; no warmup: step 0 of the capture compiles"
    return pr


def probe_mid_start(smoke: bool) -> Probe:
    """Steps dispatched without a block; 32 more dispatched just before the capture starts, so
    it opens with the chip still busy on them (the truth's busy time leaves their runs out)."""
    params, x, y, train_step, shape = _mlp(smoke)
    st = {"p": params}

    def dispatch(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], _ = train_step(st["p"], x, y)

    def run(n, annotate):
        dispatch(n, annotate)
        jax.block_until_ready(st["p"])

    return Probe(run, f"jitted donated {shape} train step, annotated 'train', no block but at "
                      "the loop's end; 32 steps dispatched unblocked just before the capture "
                      "starts", "train", captured=12, timed=48, chunk=24,
                 pre_capture=partial(dispatch, 32, False))


def _xent(logits, y):
    logits = logits.astype(jnp.float32)
    return jnp.mean(jax.nn.logsumexp(logits, -1)
                    - jnp.take_along_axis(logits, y[:, None], 1)[:, 0])


def probe_decode_scan(smoke: bool) -> Probe:
    """Greedy decoding of a whole sequence in one jitted call: lax.scan over the positions with
    the KV cache in the carry; a call a "generate" step, its tokens read with np.asarray."""
    b, d, heads, vocab, layers, t = ((2, 32, 2, 64, 2, 8) if smoke
                                     else (8, 1024, 8, 32000, 4, 64))
    dh, bf = d // heads, jnp.bfloat16
    k = jax.random.split(jax.random.key(19), layers + 2)
    shapes = {"qkv": (d, 3 * d), "o": (d, d), "up": (d, 4 * d), "down": (4 * d, d)}
    p = {"emb": _normal(k[-2], (vocab, d), bf, 0.02), "head": _normal(k[-1], (d, vocab), bf, .03),
         "layers": [{n: _normal(kk, s, bf, s[0] ** -.5) for kk, (n, s)
                     in zip(jax.random.split(k[i], 4), shapes.items(), strict=True)}
                    for i in range(layers)]}

    @jax.jit
    def generate(p, tok):
        def position(carry, pos):
            tok, ck, cv = carry
            x = p["emb"][tok]  # (b, d)
            for i, w in enumerate(p["layers"]):
                q, kk, vv = (a.reshape(b, heads, dh) for a in jnp.split(x @ w["qkv"], 3, -1))
                ck = jax.lax.dynamic_update_slice(ck, kk[None, :, None], (i, 0, pos, 0, 0))
                cv = jax.lax.dynamic_update_slice(cv, vv[None, :, None], (i, 0, pos, 0, 0))
                s = jnp.einsum("bhd,bthd->bht", q, ck[i]).astype(jnp.float32) / math.sqrt(dh)
                s = jnp.where(jnp.arange(t) <= pos, s, -1e9)
                o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1).astype(bf), cv[i])
                x = x + o.reshape(b, d) @ w["o"]
                x = x + jax.nn.gelu(x @ w["up"]) @ w["down"]
            nxt = jnp.argmax(x @ p["head"], -1).astype(jnp.int32)
            return (nxt, ck, cv), nxt

        cache = jnp.zeros((layers, b, t, heads, dh), bf)
        (last, _, _), toks = jax.lax.scan(position, (tok, cache, cache), jnp.arange(t))
        return toks.T, last

    st = {"tok": jnp.arange(b, dtype=jnp.int32)}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("generate", i, annotate):
                toks, st["tok"] = generate(p, st["tok"])  # the last tokens start the next call
                np.asarray(toks)

    return Probe(run, f"jitted greedy generate of {t} tokens (lax.scan, KV cache in the carry), "
                      f"{layers} layers, d {d}, {heads} heads, vocab {vocab}, batch {b}, bf16; "
                      "np.asarray(tokens) each call, annotated 'generate'", "generate")


def probe_resnet_bn(smoke: bool) -> Probe:
    """A ResNet-style train step: three basic blocks (conv3x3, batch norm on the batch's
    statistics, relu, twice, and the skip), global pool, dense head, softmax cross-entropy;
    SGD with momentum by hand (jax.tree.map), params and momentum donated."""
    b, hw, c, blocks = (4, 8, 8, 3) if smoke else (64, 56, 64, 3)
    k = jax.random.split(jax.random.key(20), 2 * blocks + 2)
    bf = jnp.bfloat16
    p = {"conv": [_normal(k[i], (3, 3, c, c), bf, (9 * c) ** -.5) for i in range(2 * blocks)],
         "bn": [{"g": jnp.ones(c), "b": jnp.zeros(c)} for _ in range(2 * blocks)],
         "fc": _normal(k[-2], (c, 1000), bf, c ** -.5)}
    x = _normal(k[-1], (b, hw, hw, c), bf, 1.0)
    y = jnp.arange(b) % 1000

    def conv_bn(h, w, bn):
        h = jax.lax.conv_general_dilated(h, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        hf = h.astype(jnp.float32)
        mean, var = jnp.mean(hf, (0, 1, 2)), jnp.var(hf, (0, 1, 2))
        return ((hf - mean) * jax.lax.rsqrt(var + 1e-5) * bn["g"] + bn["b"]).astype(bf)

    def loss_fn(p, x, y):
        h = x
        for i in range(0, 2 * blocks, 2):
            r = jax.nn.relu(conv_bn(h, p["conv"][i], p["bn"][i]))
            h = jax.nn.relu(h + conv_bn(r, p["conv"][i + 1], p["bn"][i + 1]))
        return _xent(jnp.mean(h, (1, 2)) @ p["fc"], y)

    @partial(jax.jit, donate_argnums=(0, 1))
    def train_step(p, m, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        m = jax.tree.map(lambda v, gg: 0.9 * v + gg.astype(v.dtype), m, g)
        return jax.tree.map(lambda a, v: a - 1e-2 * v, p, m), m, loss

    st = {"p": p, "m": jax.tree.map(jnp.zeros_like, p)}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], st["m"], loss = train_step(st["p"], st["m"], x, y)
                jax.block_until_ready(loss)

    return Probe(run, f"jitted ResNet-style train step: {blocks} blocks of conv3x3 + batch norm "
                      f"+ relu, NHWC bf16 {hw}x{hw}x{c}, batch {b}; SGD momentum by hand, "
                      "params and momentum donated, annotated 'train'", "train")


def probe_embedding_scatter(smoke: bool) -> Probe:
    """A recommender step: ids drawn on the device (a key folded with the step number) look up
    an f32 embedding table; bags of 8 mean-pooled into a small MLP; the table's gradient a
    scatter-add, the table updated in place (donated)."""
    rows, dim, n_ids, bag = (1000, 16, 256, 8) if smoke else (1_000_000, 128, 65536, 8)
    k = jax.random.split(jax.random.key(21), 4)
    p = {"table": _normal(k[0], (rows, dim), jnp.float32, 0.01),
         "w1": _normal(k[1], (dim, 256), jnp.float32, dim ** -.5),
         "w2": _normal(k[2], (256, 1), jnp.float32, 1 / 16)}

    def loss_fn(p, ids, y):
        e = p["table"][ids].reshape(-1, bag, dim).mean(1)
        logit = (jax.nn.relu(e @ p["w1"]) @ p["w2"])[:, 0]
        return jnp.mean(jax.nn.softplus(logit) - y * logit)  # logistic loss

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, key, step):
        ids = jax.random.randint(jax.random.fold_in(key, step), (n_ids,), 0, rows)
        y = (ids[::bag] % 2).astype(jnp.float32)
        loss, g = jax.value_and_grad(loss_fn)(p, ids, y)
        return jax.tree.map(lambda a, gg: a - 0.1 * gg, p, g), loss

    st = {"p": p, "step": 0}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], k[3], st["step"])
                jax.block_until_ready(loss)
            st["step"] += 1

    return Probe(run, f"jitted embedding train step: {rows:,} x {dim} f32 table, {n_ids:,} ids "
                      f"a step drawn on the device, bags of {bag} mean-pooled into an MLP; the "
                      "table's gradient a scatter-add, table donated, annotated 'train'", "train")


def probe_xent_large_vocab(smoke: bool) -> Probe:
    """A language-model head: hidden @ W to a vocabulary not a multiple of 128, softmax
    cross-entropy in f32, gradients of W (updated, donated) and of the hidden states."""
    n, d, vocab = (64, 32, 257) if smoke else (8192, 1024, 50257)
    k = jax.random.split(jax.random.key(23), 3)
    h = _normal(k[0], (n, d), jnp.bfloat16, 1.0)
    w = _normal(k[1], (d, vocab), jnp.bfloat16, d ** -.5)
    y = jax.random.randint(k[2], (n,), 0, vocab)

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(w, h, y):
        loss, (gw, gh) = jax.value_and_grad(lambda w, h: _xent(h @ w, y), (0, 1))(w, h)
        return w - 1e-2 * gw, gh, loss

    st = {"w": w}

    def run(n_steps, annotate):
        for i in range(n_steps):
            with _step_ctx("train", i, annotate):
                st["w"], _, loss = train_step(st["w"], h, y)
                jax.block_until_ready(loss)

    return Probe(run, f"jitted LM head: hidden ({n} x {d} bf16) @ W ({d} x {vocab} bf16), "
                      "softmax cross-entropy in f32 and its gradients, W donated, annotated "
                      "'train'", "train")


def probe_eager_metrics(smoke: bool) -> Probe:
    """The train step returning its predictions, then eager (un-jitted) jnp metrics on them
    each step: accuracy, each param's norm, a few statistics; float() of the loss and accuracy."""
    params, x, y, _, shape = _mlp(smoke)
    labels = jnp.argmax(y, -1)

    def loss_pred(p, x, y):
        out = jax.nn.relu(x @ p["w1"]) @ p["w2"]
        return jnp.mean(jnp.square((out - y).astype(jnp.float32))), out

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        (loss, pred), g = jax.value_and_grad(loss_pred, has_aux=True)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g), loss, pred

    st = {"p": params, "ema": 0.0}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss, pred = train_step(st["p"], x, y)
                acc = jnp.mean((jnp.argmax(pred, -1) == labels).astype(jnp.float32))
                st["norms"] = [jnp.linalg.norm(v.astype(jnp.float32)) for v in st["p"].values()]
                st["stats"] = (jnp.mean(pred), jnp.std(pred), jnp.max(jnp.abs(pred)))
                st["ema"] = 0.9 * st["ema"] + 0.1 * loss
                float(loss), float(acc)

    return Probe(run, f"jitted donated {shape} train step returning its predictions, then eager "
                      "jnp metrics (accuracy, param norms, prediction statistics, a loss EMA); "
                      "float(loss), float(acc) each step, annotated 'train'", "train")


def probe_remat_policy(smoke: bool, policy: str = "nothing_saveable") -> Probe:
    """A 6-layer bf16 MLP, each layer under jax.checkpoint with a policy: `nothing_saveable`
    (the backward pass recomputes every matmul) or `dots_saveable` (the matmuls kept)."""
    d, b, layers = (64, 32, 6) if smoke else (4096, 4096, 6)
    k = jax.random.split(jax.random.key(24), layers + 1)
    ws = [_normal(k[i], (d, d), jnp.bfloat16, d ** -.5) for i in range(layers)]
    x = _normal(k[-1], (b, d), jnp.bfloat16, 1.0)
    layer = jax.checkpoint(lambda w, h: h + jax.nn.gelu(h @ w),
                           policy=getattr(jax.checkpoint_policies, policy))

    return Probe(_layers_run(layer, ws, x),
                 f"jitted {layers}-layer {d}x{d} bf16 MLP train step, batch {b}, each layer "
                 f"under jax.checkpoint(policy={policy}), annotated 'train'", "train")


def probe_lax_map_examples(smoke: bool, vmap: bool = False, batch: int = 1024,
                           captured: int = 4, per_dispatch: int = 1) -> Probe:
    """DP-SGD-style per-example gradients of an f32 MLP, each clipped to norm 1, averaged: by
    jax.lax.map over the batch inside the jitted step (a loop of one-example bodies on the
    chip), or, `vmap`, by jax.vmap. (`batch` 128, `captured` 3: a capture small enough to
    commit for the tests; `per_dispatch` steps in one jitted fori_loop a dispatch, each
    annotation around one dispatch, the step time a dispatch's over its steps: the other
    change for a step too small for the chip.)"""
    d, h, batch = (16, 32, 8) if smoke else (128, 256, batch)
    k = jax.random.split(jax.random.key(25), 4)
    f32 = jnp.float32
    p = {"w1": _normal(k[0], (d, h), f32, d ** -.5), "w2": _normal(k[1], (h, d), f32, h ** -.5)}
    x, y = _normal(k[2], (batch, d), f32, 1.0), _normal(k[3], (batch, d), f32, 1.0)

    def clipped(p, x, y):  # one example's gradient, clipped to norm 1
        g = jax.grad(_mlp_loss)(p, x[None], y[None])
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(g)))
        return jax.tree.map(lambda v: v / jnp.maximum(1.0, norm), g)

    @partial(jax.jit, donate_argnums=(0,))
    def step(p, x, y):
        if vmap:
            gs = jax.vmap(clipped, in_axes=(None, 0, 0))(p, x, y)
        else:
            gs = jax.lax.map(lambda xy: clipped(p, *xy), (x, y))
        return (jax.tree.map(lambda a, g: a - 1e-2 * jnp.mean(g, 0), p, gs),
                _mlp_loss(p, x, y))

    if per_dispatch > 1:
        one = step.__wrapped__

        @partial(jax.jit, donate_argnums=(0,))
        def step(p, x, y):  # noqa: F811 - per_dispatch steps in one program
            return jax.lax.fori_loop(0, per_dispatch, lambda _, c: one(c[0], x, y),
                                     one(p, x, y))

    st = {"p": p}

    def run(n, annotate):
        for i in range(max(1, n // per_dispatch)):
            with _step_ctx("train", i, annotate):
                st["p"], loss = step(st["p"], x, y)
                jax.block_until_ready(loss)

    how = "jax.vmap" if vmap else "jax.lax.map over the examples (a loop on the chip)"
    many = (f", {per_dispatch} steps a dispatch in one jitted fori_loop (an annotation a "
            "dispatch)") if per_dispatch > 1 else ""
    return Probe(run, f"jitted DP-SGD step of a {d}->{h}->{d} f32 MLP, batch {batch}: per-example "
                      f"gradients by {how}, each clipped to norm 1, averaged; params donated, "
                      f"blocked each step, annotated 'train'{many}", "train",
                 captured=captured * per_dispatch, timed=16 * per_dispatch, chunk=per_dispatch)


def probe_fori_rows(smoke: bool, vmap: bool = False) -> Probe:
    """An inference step that scores rows one at a time: a jitted lax.fori_loop over the rows
    of a batch, each row through a two-layer tanh MLP written into its own row of the output
    (`out.at[i].set`): a loop of independent iterations on the chip; or, `vmap`, jax.vmap
    over the rows. No step annotation of the usual name: TraceAnnotation "infer" steps."""
    rows, d = (8, 16) if smoke else (256, 512)
    k = jax.random.split(jax.random.key(31), 3)
    w1 = _normal(k[0], (d, d), jnp.float32, d ** -.5)
    w2 = _normal(k[1], (d, d), jnp.float32, d ** -.5)
    x = _normal(k[2], (rows, d), jnp.float32, 1.0)

    def score(r):
        return jnp.tanh(jnp.tanh(r @ w1) @ w2)

    @jax.jit
    def infer(x):
        if vmap:
            return jax.vmap(score)(x)
        return jax.lax.fori_loop(0, rows, lambda i, out: out.at[i].set(score(x[i])),
                                 jnp.zeros_like(x))

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("infer", i, annotate):
                jax.block_until_ready(infer(x))

    how = "jax.vmap over the rows" if vmap else "a lax.fori_loop writing each row's result"
    return Probe(run, f"jitted inference of {rows} rows of {d} through a two-layer tanh MLP by "
                      f"{how}; blocked each step, annotated 'infer'", "infer", captured=3)


def probe_f32_highest_matmul(smoke: bool, bf16: bool = False) -> Probe:
    """The MLP train step on f32 params and data with every matmul at
    precision=Precision.HIGHEST; or, `bf16`, the f32 params' matmuls on bf16 inputs at the
    default precision (f32 results)."""
    params, x, y, _, shape = _mlp(smoke)
    f32, bf = jnp.float32, jnp.bfloat16
    params, x, y = jax.tree.map(lambda a: a.astype(f32), (params, x, y))

    def mm(a, b):
        if bf16:
            return jnp.dot(a.astype(bf), b.astype(bf), preferred_element_type=f32)
        return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)

    def loss_fn(p, x, y):
        return jnp.mean(jnp.square(mm(jax.nn.relu(mm(x, p["w1"])), p["w2"]) - y))

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), loss

    st = {"p": params}

    def run(n, annotate):
        for _ in range(n):
            st["p"], loss = train_step(st["p"], x, y)
            jax.block_until_ready(loss)

    how = ("bf16 inputs at the default precision (f32 results)" if bf16
           else "precision=Precision.HIGHEST")
    return Probe(run, f"jitted donated {shape.replace('bf16', 'f32')} train step, the params and "
                      f"data f32, every matmul on {how}; blocked each step, no annotation", None)


def probe_sort_topk(smoke: bool, top_k: bool = False) -> Probe:
    """Retrieval: each query's 64 best keys of a bank by jnp.argsort of its whole score row,
    then a slice (or, `top_k`, jax.lax.top_k); indices and scores read to the host."""
    nq, nk, d, kk = (16, 512, 32, 8) if smoke else (1024, 65536, 128, 64)
    k = jax.random.split(jax.random.key(26), 2)
    q = _normal(k[0], (nq, d), jnp.bfloat16, 1.0)
    bank = _normal(k[1], (nk, d), jnp.bfloat16, d ** -.5)

    @jax.jit
    def search(q, bank):
        s = jnp.einsum("qd,nd->qn", q, bank, preferred_element_type=jnp.float32)
        if top_k:
            return jax.lax.top_k(s, kk)
        idx = jnp.argsort(-s, axis=-1)[:, :kk]
        return jnp.take_along_axis(s, idx, -1), idx

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("search", i, annotate):
                vals, idx = search(q, bank)
                np.asarray(vals), np.asarray(idx)

    how = ("jax.lax.top_k" if top_k
           else "jnp.argsort(-scores) of each whole row, then [:, :k] and take_along_axis")
    return Probe(run, f"jitted top-{kk} search: {nq} queries x {nk:,} keys (d {d}, bf16, f32 "
                      f"scores), the top {kk} by {how}; values and indices read with np.asarray "
                      "each call, annotated StepTraceAnnotation('search')", "search")


def probe_ragged_recompile(smoke: bool, padded: bool = False) -> Probe:
    """Token batches as long as their longest sequence rounded up to 64: every 8th step brings
    a length the jitted train step has not seen, and a compile (the steps between repeat seen
    lengths); or, `padded`, each batch padded (with a mask) to the one bucket of the longest."""
    b, d, vocab, unit = (4, 16, 64, 8) if smoke else (64, 256, 8192, 64)
    rng = np.random.default_rng(2)
    lens = [int(v) * unit for v in rng.permutation(np.arange(1, 9))]  # in order of first use
    top, every = max(lens), 8
    k = jax.random.split(jax.random.key(27), 4)
    bf = jnp.bfloat16
    p = {"emb": _normal(k[0], (vocab, d), bf, 0.02),
         "up": [_normal(kk, (d, 4 * d), bf, d ** -.5) for kk in jax.random.split(k[1], 2)],
         "down": [_normal(kk, (4 * d, d), bf, (4 * d) ** -.5) for kk in jax.random.split(k[2], 2)],
         "head": _normal(k[3], (d, 16), bf, d ** -.5)}

    def loss_fn(p, tok, mask, y):
        h = p["emb"][tok]
        for up, down in zip(p["up"], p["down"], strict=True):
            h = h + jax.nn.gelu(h @ up) @ down
        m = mask[..., None].astype(jnp.float32)
        pooled = (jnp.sum(h.astype(jnp.float32) * m, 1) / jnp.sum(m, 1)).astype(bf)
        return _xent(pooled @ p["head"], y)

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, tok, mask, y):
        loss, g = jax.value_and_grad(loss_fn)(p, tok, mask, y)
        return jax.tree.map(lambda a, gg: a - 1e-2 * gg, p, g), loss

    st = {"p": p, "i": 0}
    y = np.arange(b, dtype=np.int32) % 16

    def run(n, annotate):
        for i in range(n):
            seen = lens[:min(st["i"] // every, len(lens) - 1) + 1]
            length = seen[-1] if st["i"] % every == 0 else int(rng.choice(seen))
            tok = rng.integers(1, vocab, (b, length), dtype=np.int32)
            mask = np.ones((b, length), np.int32)
            if padded:
                tok, mask = (np.pad(a, ((0, 0), (0, top - length))) for a in (tok, mask))
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], tok, mask, y)
                float(loss)
            st["i"] += 1

    how = (f"each batch padded with a mask to one bucket of {top}: one compile" if padded
           else f"not padded: every {every}th step a new shape, and a compile")
    return Probe(run, f"jitted donated train step of a token MLP (vocab {vocab}, d {d}, 2 "
                      f"residual layers, masked mean pool), batch {b}, each batch as long as its "
                      f"longest sequence rounded up to {unit} ({unit}..{top}), a length not seen "
                      f"before every {every}th step; {how}; tokens from numpy, float(loss) each "
                      "step, annotated 'train'", "train", timed=every, chunk=every)


def probe_h2d_each_step(smoke: bool, prefetch: bool = False) -> Probe:
    """A dataset in host memory as float32 numpy batches, each step's batch (x and y) made a
    device array by jnp.asarray in the loop; or, `prefetch`, jax.device_put two batches ahead
    of the step that uses them. The step casts to bf16; float(loss) each step."""
    params, x, y, train_step, shape = _mlp(smoke)
    rows, d = 2 * x.shape[0], x.shape[1]
    rng = np.random.default_rng(3)
    pool = [tuple(rng.standard_normal((rows, d), dtype=np.float32) for _ in range(2))
            for _ in range(3)]
    step = jax.jit(lambda p, x, y: train_step(p, x.astype(jnp.bfloat16), y.astype(jnp.bfloat16)),
                   donate_argnums=(0,))
    st = {"p": params, "i": 0, "ahead": []}

    def put(i):
        st["ahead"].append(jax.device_put(pool[i % len(pool)]))

    def run(n, annotate):
        for _ in range(n):
            i = st["i"]
            if prefetch:
                while len(st["ahead"]) < 2:
                    put(i + len(st["ahead"]))
                bx, by = st["ahead"].pop(0)
            else:
                bx, by = (jnp.asarray(a) for a in pool[i % len(pool)])
            st["p"], loss = step(st["p"], bx, by)
            if prefetch:
                put(i + 2)
            float(loss)
            st["i"] += 1

    mb = 2 * rows * d * 4 / 2 ** 20
    how = ("jax.device_put two batches ahead of the step (issued after the step's dispatch)"
           if prefetch else "jnp.asarray of each in the loop before the step")
    return Probe(run, f"{shape.rsplit('batch', 1)[0]}batch {rows} train step on float32 numpy "
                      f"batches from host memory (x and y, {mb:.3g} MB a step, cast to bf16 in "
                      f"the step), {how}; float(loss) each step, no annotation", None)


def probe_scan_tiny_body(smoke: bool, unroll: int = 1) -> Probe:
    """An RNN trained on a long sequence: lax.scan of a tanh cell (a small state) over 2,048
    steps, the gradient through the scan; `unroll` the scan's unroll."""
    t, b, d, hd = (16, 2, 8, 16) if smoke else (2048, 16, 64, 128)
    k = jax.random.split(jax.random.key(28), 5)
    f32 = jnp.float32
    p = {"wx": _normal(k[0], (d, hd), f32, d ** -.5), "wh": _normal(k[1], (hd, hd), f32, hd ** -.5),
         "b": jnp.zeros(hd), "out": _normal(k[2], (hd, 1), f32, hd ** -.5)}
    xs, y = _normal(k[3], (t, b, d), f32, 1.0), _normal(k[4], (b, 1), f32, 1.0)

    def loss_fn(p, xs, y):
        def cell(h, x):
            return jnp.tanh(x @ p["wx"] + h @ p["wh"] + p["b"]), None

        h, _ = jax.lax.scan(cell, jnp.zeros((b, hd)), xs, unroll=unroll)
        return jnp.mean(jnp.square(h @ p["out"] - y))

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, xs, y):
        loss, g = jax.value_and_grad(loss_fn)(p, xs, y)
        return jax.tree.map(lambda a, gg: a - 1e-3 * gg, p, g), loss

    st = {"p": p}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], xs, y)
                jax.block_until_ready(loss)

    return Probe(run, f"jitted donated RNN train step: lax.scan(unroll={unroll}) of a tanh cell "
                      f"(batch {b}, input {d}, state {hd}, f32) over {t} steps, the gradient "
                      "through the scan; blocked each step, annotated 'train'", "train",
                 captured=3)


def probe_naive_attention_long(smoke: bool, dpa: bool = False) -> Probe:
    """One causal self-attention layer trained at a long sequence, the scores (batch, heads,
    seq, seq) written out by hand (einsum, jnp.where mask, f32 softmax); or, `dpa`,
    jax.nn.dot_product_attention(is_causal=True) with no implementation named."""
    b, t, d, heads = (1, 64, 32, 2) if smoke else (2, 4096, 1024, 8)
    dh, bf = d // heads, jnp.bfloat16
    k = jax.random.split(jax.random.key(29), 3)
    ps = [{"qkv": _normal(k[0], (d, 3 * d), bf, d ** -.5),
           "o": _normal(k[1], (d, d), bf, d ** -.5)}]
    x = _normal(k[2], (b, t, d), bf, 1.0)

    def attend(q, kk, v):
        if dpa:
            return jax.nn.dot_product_attention(q, kk, v, is_causal=True)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(dh)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        w = jax.nn.softmax(s.astype(jnp.float32), -1).astype(bf)
        return jnp.einsum("bhqk,bkhd->bqhd", w, v)

    def layer(p, h):
        q, kk, v = (a.reshape(b, t, heads, dh) for a in jnp.split(h @ p["qkv"], 3, axis=-1))
        return h + attend(q, kk, v).reshape(b, t, d) @ p["o"]

    notes = None
    if dpa:
        hlo = jax.jit(layer).lower(ps[0], x).as_text()
        impl = "cudnn" if "cudnn" in hlo.lower() else "xla"
        notes = (f"jax.nn.dot_product_attention(implementation=None) lowered to its '{impl}' "
                 f"path on {jax.devices()[0].platform} (jax {jax.__version__})"
                 + ("; the xla path also writes out the scores, in f32" if impl == "xla" else ""))
    how = ("jax.nn.dot_product_attention(is_causal=True), no implementation named" if dpa
           else "the scores written out (bf16 einsum, jnp.where causal mask, softmax in f32)")
    return Probe(_layers_run(layer, ps, x),
                 f"jitted donated train step of one causal self-attention layer, batch {b}, seq "
                 f"{t}, d {d}, {heads} heads, bf16: {how}; blocked each step, annotated 'train'",
                 "train", notes=notes)


def probe_python_loop_layers(smoke: bool, fused: bool = False) -> Probe:
    """A residual MLP of 48 small layers evaluated from a Python loop, each layer a call of one
    jitted function; or, `fused`, the whole stack in one jitted call. Blocked each step."""
    d, b, layers = (32, 8, 4) if smoke else (512, 256, 48)
    k = jax.random.split(jax.random.key(30), layers + 1)
    ws = [_normal(kk, (d, d), jnp.bfloat16, d ** -.5) for kk in k[:-1]]
    x = _normal(k[-1], (b, d), jnp.bfloat16, 1.0)
    layer = jax.jit(lambda w, h: h + jax.nn.gelu(h @ w))

    def stack(ws, h):
        for w in ws:
            h = layer(w, h)
        return h

    fwd = jax.jit(stack) if fused else stack

    def run(n, annotate):
        for _ in range(n):
            jax.block_until_ready(fwd(ws, x))

    how = ("one jitted call of the whole stack" if fused
           else "a Python loop calling one jitted layer function per layer")
    return Probe(run, f"forward of a {layers}-layer residual bf16 MLP ({d}x{d}, batch {b}) by "
                      f"{how}; blocked each step, no annotation", None, captured=16, timed=64,
                 chunk=8)


def probe_dropout_prng(smoke: bool, impl: str = "threefry2x32", sync: bool = True) -> Probe:
    """A bf16 MLP train step with dropout (rate 0.1) on its input and both hidden layers, the
    masks drawn in the step from a key folded with the step number: by the default PRNG
    (threefry) or, `impl` "rbg", a key made with jax.random.key(..., impl="rbg")."""
    d, h, batch = (64, 128, 32) if smoke else (1024, 4096, 4096)
    k = jax.random.split(jax.random.key(31), 5)
    bf = jnp.bfloat16
    p = {"w1": _normal(k[0], (d, h), bf, d ** -.5), "w2": _normal(k[1], (h, h), bf, h ** -.5),
         "w3": _normal(k[2], (h, d), bf, h ** -.5)}
    x = _normal(k[3], (batch, d), bf, 1.0)
    y = _normal(k[4], (batch, d), bf, 1.0)

    def drop(key, a, rate=0.1):
        keep = jax.random.bernoulli(key, 1 - rate, a.shape)
        return jnp.where(keep, a / (1 - rate), 0).astype(a.dtype)

    def loss_fn(p, key, x, y):
        ks = jax.random.split(key, 3)
        h1 = drop(ks[1], jax.nn.relu(drop(ks[0], x) @ p["w1"]))
        h2 = drop(ks[2], jax.nn.relu(h1 @ p["w2"]))
        return jnp.mean(jnp.square((h2 @ p["w3"] - y).astype(jnp.float32)))

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, key, i, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, jax.random.fold_in(key, i), x, y)
        return jax.tree.map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g), loss

    st = {"p": p, "i": 0, "key": jax.random.key(7, impl=impl)}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], st["key"], jnp.int32(st["i"]), x, y)
                if sync:
                    float(loss)
            st["i"] += 1
        float(loss)

    return Probe(run, f"jitted donated train step of a {d}->{h}->{h}->{d} bf16 MLP, batch "
                      f"{batch}, dropout 0.1 on the input and both hidden layers by "
                      f"jax.random.bernoulli with a {impl} key folded with the step number; "
                      f"float(loss) {'each step' if sync else 'after the last step'}, "
                      "annotated 'train'", "train", chunk=1 if sync else 16)


def probe_cache_update(smoke: bool, donate: bool = False, seq_major: bool = False) -> Probe:
    """A decode step over a per-layer KV cache (4 layers, batch 16, 4,096 positions, 512
    wide, bf16; 512 MiB): each layer attends over its whole cache and writes the new
    position's keys and values with .at[pos].set, jitted without donating the cache (XLA
    copies it each step to write the new position) or, `donate`, with donate_argnums; the
    cache (layers, batch, positions, width), or, `seq_major`, (layers, positions, batch,
    width)."""
    layers, b, s, d = (2, 2, 64, 32) if smoke else (4, 16, 4096, 512)
    k = jax.random.split(jax.random.key(32), 4)
    bf = jnp.bfloat16
    p = {n: _normal(kk, (layers, d, d), bf, d ** -.5)
         for n, kk in zip(("wq", "wk", "wv", "wo"), k, strict=True)}

    def step(p, cache, h, pos):
        ck, cv = cache
        for li in range(layers):
            q, kn, vn = h @ p["wq"][li], h @ p["wk"][li], h @ p["wv"][li]
            if seq_major:
                ck, cv = ck.at[li, pos].set(kn), cv.at[li, pos].set(vn)
            else:
                ck, cv = ck.at[li, :, pos].set(kn), cv.at[li, :, pos].set(vn)
            sc = jnp.einsum("bd,sbd->bs" if seq_major else "bd,bsd->bs", q,
                            ck[li]).astype(jnp.float32) / math.sqrt(d)
            sc = jnp.where(jnp.arange(s)[None] <= pos, sc, -1e9)
            o = jnp.einsum("bs,sbd->bd" if seq_major else "bs,bsd->bd",
                           jax.nn.softmax(sc, -1).astype(bf), cv[li])
            h = h + o @ p["wo"][li]
        return (ck, cv), h, (pos + 1) % s

    decode = jax.jit(step, donate_argnums=(1,) if donate else ())
    shape = (layers, s, b, d) if seq_major else (layers, b, s, d)
    st = {"cache": (jnp.zeros(shape, bf), jnp.zeros(shape, bf)),
          "h": _normal(k[0], (b, d), bf, 1.0), "pos": jnp.int32(0)}

    def run(n, annotate):
        for _ in range(n):
            st["cache"], st["h"], st["pos"] = decode(p, st["cache"], st["h"], st["pos"])
            st["h"].block_until_ready()

    how = "donate_argnums=(1,) (the cache updated in place)" if donate else "no donation"
    mib = 2 * layers * b * s * d * 2 / 2 ** 20
    dims = f"{s} positions x batch {b}" if seq_major else f"batch {b} x {s} positions"
    return Probe(run, f"jitted decode step over a KV cache of {layers} layers x {dims} x "
                      f"{d} (bf16, K and V {mib:.0f} MiB): attention over the "
                      f"whole cache, the new position written with .at[pos].set, {how}; "
                      "block_until_ready each step, no annotation", None, captured=8, timed=32)


def probe_logits_to_host(smoke: bool, on_device: bool = False) -> Probe:
    """An evaluation loop: a jitted forward returns f32 logits (batch 4,096 x 8,192 classes,
    128 MiB) and the host computes accuracy with numpy (np.asarray(logits).argmax); or,
    `on_device`, the jitted function returns the accuracy, read by float()."""
    d, h, batch, classes = (32, 64, 16, 64) if smoke else (1024, 4096, 4096, 8192)
    k = jax.random.split(jax.random.key(33), 3)
    bf = jnp.bfloat16
    p = {"w1": _normal(k[0], (d, h), bf, d ** -.5), "w2": _normal(k[1], (h, classes), bf,
                                                                  h ** -.5)}
    xs = [_normal(kk, (batch, d), bf, 1.0) for kk in jax.random.split(k[2], 4)]
    labels = [np.random.default_rng(i).integers(0, classes, batch) for i in range(4)]
    dev_labels = [jnp.asarray(a) for a in labels]

    @jax.jit
    def forward(p, x):
        return (jax.nn.relu(x @ p["w1"]) @ p["w2"]).astype(jnp.float32)

    @jax.jit
    def accuracy(p, x, y):
        return jnp.mean(jnp.argmax(forward(p, x), -1) == y)

    st = {"i": 0}

    def run(n, annotate):
        for i in range(n):
            j = st["i"] % len(xs)
            with _step_ctx("eval", i, annotate):
                if on_device:
                    float(accuracy(p, xs[j], dev_labels[j]))
                else:
                    float(np.mean(np.asarray(forward(p, xs[j])).argmax(-1) == labels[j]))
            st["i"] += 1

    how = ("the accuracy computed in the jitted function, float() of it" if on_device else
           f"the logits ({batch * classes * 4 / 2 ** 20:.0f} MiB f32) to the host by "
           "np.asarray, accuracy by numpy")
    return Probe(run, f"evaluation of a {d}->{h}->{classes} bf16 MLP, batch {batch}: {how}; "
                      "annotated 'eval'", "eval")


def probe_static_lr(smoke: bool, traced: bool = False) -> Probe:
    """The MLP train step with a decaying learning rate passed as a Python float marked static
    (static_argnums): a new value, and a compile, every step; or, `traced`, passed as an
    array (one compile)."""
    params, x, y, _, shape = _mlp(smoke)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(_mlp_loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - lr * b.astype(a.dtype), p, g), loss

    train_step = (jax.jit(step, donate_argnums=(0,)) if traced
                  else jax.jit(step, donate_argnums=(0,), static_argnums=(3,)))
    st = {"p": params, "i": 0}

    def run(n, annotate):
        for i in range(n):
            lr = 1e-3 * 0.999 ** st["i"]
            with _step_ctx("train", i, annotate):
                st["p"], loss = train_step(st["p"], x, y, jnp.float32(lr) if traced else lr)
                float(loss)
            st["i"] += 1

    how = ("passed as a jnp.float32 array (traced)" if traced
           else "a Python float marked static_argnums=(3,): a new value every step")
    return Probe(run, f"jitted donated train step of the {shape} with a learning rate "
                      f"1e-3 * 0.999**step {how}; float(loss) each step, annotated 'train'",
                 "train", timed=8)


def probe_x64_mlp(smoke: bool, f32: bool = False) -> Probe:
    """An MLP train step under jax.enable_x64(True) with its params and data float64 (as code
    ported from numpy keeps them); or, `f32`, the same step in float32."""
    d, h, batch = (32, 64, 16) if smoke else (512, 2048, 512)
    dt = np.float32 if f32 else np.float64
    rng = np.random.default_rng(34)
    p = {"w1": (rng.standard_normal((d, h)) / math.sqrt(d)).astype(dt),
         "w2": (rng.standard_normal((h, d)) / math.sqrt(h)).astype(dt)}
    x = rng.standard_normal((batch, d)).astype(dt)
    y = rng.standard_normal((batch, d)).astype(dt)

    def loss_fn(p, x, y):
        return jnp.mean(jnp.square(jnp.tanh(x @ p["w1"]) @ p["w2"] - y))

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-2 * b, p, g), loss

    with jax.enable_x64(True):
        st = {"p": jax.device_put(p), "x": jax.device_put(x), "y": jax.device_put(y)}

    def run(n, annotate):
        with jax.enable_x64(True):
            for i in range(n):
                with _step_ctx("train", i, annotate):
                    st["p"], loss = train_step(st["p"], st["x"], st["y"])
                    float(loss)

    return Probe(run, f"jitted donated train step of a {d}->{h}->{d} tanh MLP, batch {batch}, "
                      f"under jax.enable_x64(True) with params and data {np.dtype(dt).name}; "
                      "float(loss) each step, annotated 'train'", "train", captured=3)


def probe_many_leaves(smoke: bool, stacked: bool = False) -> Probe:
    """An Adam update under jit of 512 separate 128x128 f32 parameter arrays (a model kept as
    many small leaves), the gradients given; or, `stacked`, the same numbers as one
    (512, 128, 128) array."""
    n, w = (8, 16) if smoke else (512, 128)
    k = jax.random.split(jax.random.key(35), 2)
    one = jax.random.normal(k[0], (n, w, w), jnp.float32)
    g1 = jax.random.normal(k[1], (n, w, w), jnp.float32) * 1e-3
    if stacked:
        p, g = {"w": one}, {"w": g1}
    else:
        p = {f"w{i}": one[i] for i in range(n)}
        g = {f"w{i}": g1[i] for i in range(n)}
    zeros = jax.tree.map(jnp.zeros_like, p)

    @partial(jax.jit, donate_argnums=(0, 1, 2))
    def adam(p, m, v, g, t):
        m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
        p = jax.tree.map(lambda a, mm, vv: a - 1e-3 * (mm / c1) / (jnp.sqrt(vv / c2) + 1e-8),
                         p, m, v)
        return p, m, v

    st = {"p": p, "m": zeros, "v": jax.tree.map(jnp.zeros_like, p), "t": 0}

    def run(n_, annotate):
        for i in range(n_):
            st["t"] += 1
            with _step_ctx("update", i, annotate):
                st["p"], st["m"], st["v"] = adam(st["p"], st["m"], st["v"], g,
                                                 jnp.float32(st["t"]))
                jax.block_until_ready(st["p"])

    how = f"one ({n}, {w}, {w}) array" if stacked else f"{n} separate ({w}, {w}) arrays"
    return Probe(run, f"jitted donated Adam update of {n * w * w:,} f32 parameters kept as "
                      f"{how}, the gradients given; blocked each step, annotated 'update'",
                 "update", captured=3)


def probe_concat_decode(smoke: bool, prealloc: bool = False) -> Probe:
    """Greedy decoding that keeps the generated tokens by jnp.concatenate: the jitted step
    takes the whole history (its length one more each step, so a new shape and a compile every
    step), scores the next token from the mean of the history's embeddings and returns the
    history with it appended; or, `prealloc`, a history buffer of the final length written by
    lax.dynamic_update_slice at a traced position, the unwritten positions masked (one
    compile)."""
    vocab, d, start, cap = (64, 16, 4, 64) if smoke else (8192, 1024, 256, 1024)
    emb = _normal(jax.random.key(36), (vocab, d), jnp.bfloat16, d ** -.5)
    proj = _normal(jax.random.key(37), (d, d), jnp.bfloat16, d ** -.5)

    def logits_of(h):
        return (jnp.tanh(h @ proj) @ emb.T).astype(jnp.float32)

    @jax.jit
    def grow(hist):
        h = jnp.mean(emb[hist].astype(jnp.float32), 0).astype(jnp.bfloat16)
        tok = jnp.argmax(logits_of(h[None]), -1).astype(jnp.int32)
        return jnp.concatenate([hist, tok])

    @partial(jax.jit, donate_argnums=(0,))
    def write(buf, pos):
        w = (jnp.arange(cap) < pos).astype(jnp.float32)
        h = (w @ emb[buf].astype(jnp.float32) / pos).astype(jnp.bfloat16)
        tok = jnp.argmax(logits_of(h[None]), -1).astype(jnp.int32)
        return jax.lax.dynamic_update_slice(buf, tok, (pos,)), pos + 1

    first = jax.random.randint(jax.random.key(38), (start,), 0, vocab, jnp.int32)
    st = {"hist": first, "buf": jnp.zeros((cap,), jnp.int32).at[:start].set(first),
          "pos": jnp.int32(start)}

    def run(n, annotate):
        for _ in range(n):
            if prealloc:
                st["buf"], st["pos"] = write(st["buf"], st["pos"])
                st["pos"].block_until_ready()
            else:
                st["hist"] = grow(st["hist"]).block_until_ready()

    how = (f"a {cap}-token buffer written by lax.dynamic_update_slice at a traced position "
           "(one compile)" if prealloc else
           f"the history grown by jnp.concatenate from {start} tokens (a new shape every step)")
    return Probe(run, f"greedy decode over a {vocab}-word bf16 embedding ({d} wide): the next "
                      f"token from the mean of the history's embeddings; {how}; "
                      "block_until_ready each step, no annotation", None, captured=8, timed=24)


def probe_jit_in_loop(smoke: bool, hoisted: bool = False) -> Probe:
    """The MLP train step jitted inside the loop, jax.jit(lambda p: step(p, x, y)) each step
    (a new function each time: traced, lowered and compiled again, the shapes unchanged);
    or, `hoisted`, jitted once before the loop."""
    params, x, y, _, shape = _mlp(smoke)

    def step(p, x, y):
        loss, g = jax.value_and_grad(_mlp_loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g), loss

    once = jax.jit(step, donate_argnums=(0,))
    st = {"p": params}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                f = once if hoisted else jax.jit(lambda p, x, y: step(p, x, y),  # noqa: PLW0108
                                                 donate_argnums=(0,))
                st["p"], loss = f(st["p"], x, y)
                float(loss)

    how = ("jitted once before the loop" if hoisted else
           "jax.jit(lambda ...) called inside the loop: a new function every step")
    return Probe(run, f"train step of the {shape}, {how}; float(loss) each step, annotated "
                      "'train'", "train", timed=8)


def probe_host_noise(smoke: bool, on_device: bool = False) -> Probe:
    """A denoising train step whose Gaussian noise (batch 256 x 64 x 64 x 4, f32, 16 MiB) numpy
    draws on the host each step and the step takes as an argument; or, `on_device`, drawn by
    jax.random inside the jitted step from a key folded with the step number."""
    b, hw, c, d = (4, 8, 4, 32) if smoke else (256, 64, 4, 512)
    k = jax.random.split(jax.random.key(39), 3)
    bf = jnp.bfloat16
    p = {"w1": _normal(k[0], (hw * hw * c, d), bf, (hw * hw * c) ** -.5),
         "w2": _normal(k[1], (d, hw * hw * c), bf, d ** -.5)}
    x0 = _normal(k[2], (b, hw, hw, c), jnp.float32, 1.0)
    rng = np.random.default_rng(40)

    def loss_fn(p, x0, noise):
        xt = (0.7 * x0 + 0.7 * noise).reshape(b, -1).astype(bf)
        pred = (jax.nn.gelu(xt @ p["w1"]) @ p["w2"]).astype(jnp.float32)
        return jnp.mean(jnp.square(pred - noise.reshape(b, -1)))

    def update(p, x0, noise):
        loss, g = jax.value_and_grad(loss_fn)(p, x0, noise)
        return jax.tree.map(lambda a, gg: a - 1e-3 * gg.astype(a.dtype), p, g), loss

    given = jax.jit(update, donate_argnums=(0,))

    @partial(jax.jit, donate_argnums=(0,))
    def drawn(p, x0, i):
        noise = jax.random.normal(jax.random.fold_in(jax.random.key(41), i), x0.shape)
        return update(p, x0, noise)

    st = {"p": p, "i": 0}

    def run(n, annotate):
        for i in range(n):
            with _step_ctx("train", i, annotate):
                if on_device:
                    st["p"], loss = drawn(st["p"], x0, jnp.int32(st["i"]))
                else:
                    noise = rng.standard_normal((b, hw, hw, c), dtype=np.float32)
                    st["p"], loss = given(st["p"], x0, noise)
                float(loss)
            st["i"] += 1

    how = ("drawn by jax.random inside the jitted step" if on_device else
           f"drawn by numpy on the host ({b * hw * hw * c * 4 / 2 ** 20:.0f} MiB f32) and "
           "passed to the step")
    return Probe(run, f"denoising train step of a {hw * hw * c}->{d}->{hw * hw * c} bf16 MLP, "
                      f"batch {b}, its noise {how}; float(loss) each step, annotated 'train'",
                 "train")


def probe_tiny_eager_ops(smoke: bool) -> Probe:
    """A capture at size for the robustness round: 4 steps of 62,500 tiny eager ops each (a
    scalar's multiply, adds, compare and select, each op its own dispatch), 250,000 op runs
    captured, the Python tracer off (ProfileOptions python_tracer_level=0) so that the capture
    stays a few tens of MB."""
    ops = 6 if smoke else 12_500
    x = jnp.float32(1.0)

    def run(n, annotate):
        v = x
        for i in range(n):
            with _step_ctx("train", i, annotate):
                for _ in range(ops):
                    v = jnp.where(v * 0.5 + 1.0 > 3.0, v, v + 1.0)
                v.block_until_ready()

    return Probe(run, f"{5 * ops:,} tiny eager ops a step (a scalar's multiply, adds, compare "
                      "and select), blocked each step, annotated 'train'; captured with "
                      "ProfileOptions(python_tracer_level=0)", "train", captured=4, timed=2,
                 warmup=1, options={"python_tracer_level": 0})


AFTER = {"callback_step": "callback_step_outside", "decode_kv": "decode_kv_on_device",
         "two_programs": ("two_programs_jitted_norm", "two_programs_no_sync"),
         "remat_policy": "remat_policy_saved",
         "lax_map_examples": "lax_map_examples_vmap",
         "lax_map_small": ("lax_map_small_vmap", "lax_map_small_fori8"),
         "fori_rows": "fori_rows_vmap",
         "f32_highest_matmul": "f32_highest_matmul_bf16", "sort_topk": "sort_topk_lax_top_k",
         "ragged_recompile": "ragged_recompile_padded", "h2d_each_step": "h2d_each_step_prefetch",
         "scan_tiny_body": "scan_tiny_body_unroll8",
         "naive_attention_long": "naive_attention_long_dpa",
         "python_loop_layers": "python_loop_layers_jitted",
         "dropout_threefry": ("dropout_rbg", "dropout_threefry_no_sync"),
         "cache_no_donate": ("cache_donated", "cache_seq_major", "cache_seq_major_donated"),
         "logits_to_host": "logits_accuracy_on_device", "static_lr": "static_lr_traced",
         "x64_mlp": "x64_mlp_f32", "many_leaves": "many_leaves_stacked",
         "concat_decode": "concat_decode_prealloc", "jit_in_loop": "jit_in_loop_hoisted",
         "host_noise": "host_noise_on_device"}

PROBES: dict[str, Callable[[bool], Probe]] = {
    "async_train": probe_async_train,
    "unannotated_train": probe_unannotated_train,
    "two_programs": probe_two_programs,
    "two_programs_jitted_norm": partial(probe_two_programs, jit_norm=True),
    "two_programs_no_sync": partial(probe_two_programs, sync=False),
    "decode_kv": probe_decode_kv,
    "conv_train": probe_conv_train,
    "while_solver": probe_while_solver,
    "callback_step": probe_callback_step,
    "callback_step_outside": partial(probe_callback_step, outside=True),
    "decode_kv_on_device": partial(probe_decode_kv, on_device=True),
    "int8_matmul": probe_int8_matmul,
    "remat_attention": probe_remat_attention,
    "grad_accum": probe_grad_accum,
    "debug_print": probe_debug_print,
    "host_batches": probe_host_batches,
    "pmap_step": probe_pmap_step,
    "no_python_tracer": partial(probe_options_train, python_tracer_level=0),
    "host_tracer_off": partial(probe_options_train, host_tracer_level=0, python_tracer_level=0),
    "named_steps": probe_named_steps,
    "thread_loader": probe_thread_loader,
    "cond_switch": probe_cond_switch,
    "few_big_steps": probe_few_big_steps,
    "compile_in_capture": probe_compile_in_capture,
    "mid_start": probe_mid_start,
    "decode_scan": probe_decode_scan,
    "resnet_bn": probe_resnet_bn,
    "embedding_scatter": probe_embedding_scatter,
    "xent_large_vocab": probe_xent_large_vocab,
    "eager_metrics": probe_eager_metrics,
    "remat_policy": probe_remat_policy,
    "remat_policy_saved": partial(probe_remat_policy, policy="dots_saveable"),
    "lax_map_examples": probe_lax_map_examples,
    "lax_map_examples_vmap": partial(probe_lax_map_examples, vmap=True),
    "lax_map_small": partial(probe_lax_map_examples, batch=128, captured=3),
    "lax_map_small_vmap": partial(probe_lax_map_examples, vmap=True, batch=128, captured=3),
    "lax_map_small_fori8": partial(probe_lax_map_examples, batch=128, captured=3,
                                   per_dispatch=8),
    "fori_rows": probe_fori_rows,
    "fori_rows_vmap": partial(probe_fori_rows, vmap=True),
    "f32_highest_matmul": probe_f32_highest_matmul,
    "f32_highest_matmul_bf16": partial(probe_f32_highest_matmul, bf16=True),
    "sort_topk": probe_sort_topk,
    "sort_topk_lax_top_k": partial(probe_sort_topk, top_k=True),
    "ragged_recompile": probe_ragged_recompile,
    "ragged_recompile_padded": partial(probe_ragged_recompile, padded=True),
    "h2d_each_step": probe_h2d_each_step,
    "h2d_each_step_prefetch": partial(probe_h2d_each_step, prefetch=True),
    "scan_tiny_body": probe_scan_tiny_body,
    "scan_tiny_body_unroll8": partial(probe_scan_tiny_body, unroll=8),
    "naive_attention_long": probe_naive_attention_long,
    "naive_attention_long_dpa": partial(probe_naive_attention_long, dpa=True),
    "python_loop_layers": probe_python_loop_layers,
    "python_loop_layers_jitted": partial(probe_python_loop_layers, fused=True),
    "dropout_threefry": probe_dropout_prng,
    "dropout_rbg": partial(probe_dropout_prng, impl="rbg"),
    "cache_no_donate": probe_cache_update,
    "cache_donated": partial(probe_cache_update, donate=True),
    "cache_seq_major": partial(probe_cache_update, seq_major=True),
    "cache_seq_major_donated": partial(probe_cache_update, donate=True, seq_major=True),
    "dropout_threefry_no_sync": partial(probe_dropout_prng, sync=False),
    "logits_to_host": probe_logits_to_host,
    "logits_accuracy_on_device": partial(probe_logits_to_host, on_device=True),
    "static_lr": probe_static_lr,
    "static_lr_traced": partial(probe_static_lr, traced=True),
    "x64_mlp": probe_x64_mlp,
    "x64_mlp_f32": partial(probe_x64_mlp, f32=True),
    "many_leaves": probe_many_leaves,
    "many_leaves_stacked": partial(probe_many_leaves, stacked=True),
    "concat_decode": probe_concat_decode,
    "concat_decode_prealloc": partial(probe_concat_decode, prealloc=True),
    "jit_in_loop": probe_jit_in_loop,
    "jit_in_loop_hoisted": partial(probe_jit_in_loop, hoisted=True),
    "host_noise": probe_host_noise,
    "host_noise_on_device": partial(probe_host_noise, on_device=True),
    "tiny_eager_ops": probe_tiny_eager_ops,
}


def _chip_busy(trace: Path, annotation: str | None, prefix: str | None = None,
               last: int | None = None) -> tuple[float, int, float, list]:
    """(union ms of the chip's program runs over their span (given `last`, of the last runs
    only), runs, span ms, annotation starts: `annotation`'s with a step_num, or, given
    `prefix`, those of names so starting without one)."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    pname, tname = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pname[e["pid"]] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            tname[(e["pid"], e.get("tid"))] = e.get("args", {}).get("name", "")
    dev = {p for p, n in pname.items() if n == "/device:TPU:0"}
    lines = {k for k, n in tname.items() if k[0] in dev and n == "XLA Modules"}
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                  if e.get("ph") == "X" and (e["pid"], e.get("tid")) in lines)

    def start(e):
        name, num = e.get("name", ""), "step_num" in (e.get("args") or {})
        return ((annotation and name == annotation and num)
                or (prefix and name.startswith(prefix) and not num))

    starts = sorted(float(e["ts"]) for e in events if e.get("ph") == "X" and start(e))
    counted = runs[-last:] if last else runs
    busy, hi = 0.0, None
    for a, b in counted:
        if hi is None or a > hi:
            busy += b - a
            hi = b
        elif b > hi:
            busy += b - hi
            hi = b
    span = (counted[-1][1] - counted[0][0]) if counted else 0.0
    return busy / 1e3, len(runs), span / 1e3, starts


def run_probe(name: str, smoke: bool, outdir: Path) -> dict:
    case_dir = outdir / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    pr = PROBES[name](smoke)
    captured = 2 if smoke else pr.captured
    timed = 2 if smoke else pr.timed
    if pr.warmup:
        pr.run(pr.warmup, False)
    opts = None
    if pr.options:
        opts = jax.profiler.ProfileOptions()
        for k, v in pr.options.items():
            setattr(opts, k, v)
    if pr.pre_capture:
        pr.pre_capture()
    jax.profiler.start_trace(str(case_dir), profiler_options=opts)
    try:
        pr.run(captured, True)
    finally:
        jax.profiler.stop_trace()
    chunk = pr.chunk
    times = []
    for _ in range(max(1, timed // chunk)):
        t = time.perf_counter()
        pr.run(chunk, False)
        times.append((time.perf_counter() - t) * 1e3 / chunk)
    (trace,) = sorted((case_dir / "plugins" / "profile").glob("*/*.trace.json.gz"))[-1:]
    busy_ms, runs, span_ms, starts = _chip_busy(trace, pr.annotation, pr.annotation_prefix,
                                                captured if pr.pre_capture else None)
    step_ms = statistics.median(times)
    dev_ms = busy_ms / captured
    share = dev_ms / step_ms if step_ms > 0 else None
    bound = ("unmeasured" if not runs or share is None else "device" if share >= BOUND[0]
             else "host" if share < BOUND[1] else "mixed")
    truth = {"probe": name, "workload": pr.what, "annotation": pr.annotation,
             "bound": bound, "busy_share": round(share, 4) if share is not None else None,
             "bound_rule": "busy_share = (union of /device:TPU:0 XLA Modules runs in the "
                           "capture / captured steps) / unprofiled step ms; device >= 0.8, "
                           "host < 0.5, mixed between",
             "device_ms_per_step": round(dev_ms, 4), "program_runs": runs,
             "programs_per_step": round(runs / captured, 2), "captured_steps": captured,
             "chip_span_ms": round(span_ms, 3),
             "step_ms_unprofiled": [round(t, 4) for t in times],
             "step_ms_unprofiled_median": round(step_ms, 4),
             "jax": jax.__version__, "device": jax.devices()[0].device_kind}
    if len(starts) > 1:
        truth["step_ms_profiled_median"] = round(
            statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False)) / 1e3, 4)
    if pr.annotation_prefix:
        truth["annotation_prefix"] = pr.annotation_prefix
    if pr.options:
        truth["profile_options"] = pr.options
    if pr.pre_capture:
        truth["device_runs_counted"] = captured  # the last runs; the earlier: pre-capture steps
    if pr.warmup != WARMUP:
        truth["warmup_steps"] = pr.warmup
    if pr.notes:
        truth["notes"] = pr.notes
    if smoke:
        truth["smoke"] = True
    (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--probes", help="comma-separated probe names (default: all)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, 2 steps (a CPU)")
    args = ap.parse_args(argv)
    names = [s.strip() for s in (args.probes or ",".join(PROBES)).split(",") if s.strip()]
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        print(f"tpu_probe: unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBES)}",
              file=sys.stderr)
        return 2
    outdir = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"tpu_probe: jax {jax.__version__}, {jax.devices()[0].device_kind}", flush=True)
    failed, truths = [], {}
    for name in names:
        t = time.perf_counter()
        try:
            tr = run_probe(name, args.smoke, outdir)
        except Exception:
            failed.append(name)
            (outdir / name).mkdir(parents=True, exist_ok=True)
            (outdir / name / "error.txt").write_text(traceback.format_exc())
            print(f"{name:<20} FAILED\n{traceback.format_exc()}", flush=True)
            continue
        truths[name] = tr
        before = next((b for b, a in AFTER.items() if name in ((a,) if isinstance(a, str)
                                                                else a) and b in truths), None)
        if before:  # the first change is the after that the chip ran fastest
            b = truths[before]
            b.setdefault("afters", {})[name] = round(
                b["step_ms_unprofiled_median"] / tr["step_ms_unprofiled_median"], 3)
            b["after"], b["after_speedup"] = max(b["afters"].items(), key=lambda kv: kv[1])
            (outdir / before / "truth.json").write_text(json.dumps(b, indent=1) + "\n")
            print(f"{before} -> {name}: {b['afters'][name]}x", flush=True)
        print(f"{name:<20} step {tr['step_ms_unprofiled_median']:9.3f} ms  chip "
              f"{tr['device_ms_per_step']:8.3f} ms  share {tr['busy_share'] or 0:6.1%}  "
              f"{tr['bound']:<8} runs/step {tr['programs_per_step']:g}"
              f"  profiled {tr.get('step_ms_profiled_median', '-')}"
              f"  ({time.perf_counter() - t:.0f} s)", flush=True)
    with tarfile.open(outdir / "probes.tar.gz", "w:gz") as tar:
        for name in names:
            if (outdir / name).is_dir():
                tar.add(outdir / name, arcname=name)
    print(f"tpu_probe: {len(names) - len(failed)} of {len(names)} in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
