"""W6 transformer: examples/transformer.dp's character-level causal Transformer in PyTorch
eager and JAX jit, from the same initial weights (the safetensors file dp writes with
`dp run examples/transformer.dp init FILE`), the same text and the same batches.

Model (d 64, 4 heads, 2 pre-layer-norm blocks, GELU MLP 64 -> 256 -> 64, tanh-form GELU,
layer-norm eps 1e-5), loss the mean cross-entropy of the next character over a batch of 16
windows of 64 characters, window i of step s starting at ((s * 16 + i) * 7919) % (N - 64).
AdamW (b1 0.9, b2 0.999, eps 1e-8, weight decay 0.01), lr 3e-3 warmed up linearly over 10
steps, then a cosine decay to 0 at step 200; all float32.

Seconds per training step (batch, forward, backward, AdamW update) are the median of steps
3 .. STEPS (the first two warm the caches and, for JAX, compile). The value is the loss of
step 1 (at the initial weights); loss10 and last (step STEPS) show the training agrees.

  --system torch  variant eager: torch.autograd on F.layer_norm, F.scaled_dot_product_attention
                  (is_causal), F.gelu(approximate="tanh"), F.cross_entropy; torch.optim.AdamW
  --system jax    variant jit:   one jax.jit of value_and_grad and the AdamW update (by hand,
                  torch's formulas), the lr an argument
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench", "reference"))
from common import info, median, parse_args, report, threads_info, timed  # noqa: E402

D, HEADS, LAYERS, B, T = 64, 4, 2, 16, 64
LR, WARMUP, TOTAL, B1, B2, EPS, WD = 3e-3, 10, 200, 0.9, 0.999, 1e-8, 0.01


def text_ids():
    with open(os.path.join(ROOT, "examples", "data", "sonnets.txt")) as f:
        text = f.read()
    alphabet = sorted(set(text))
    index = {c: i for i, c in enumerate(alphabet)}
    return np.array([index[c] for c in text], dtype=np.int64), len(alphabet)


def batch(ids, s):
    n = len(ids)
    starts = np.array([((s * B + i) * 7919) % (n - T) for i in range(B)], dtype=np.int64)
    pos = (starts[:, None] + np.arange(T)[None, :]).reshape(-1)
    return ids[pos], ids[pos + 1]


def schedule(s):
    """examples/transformer.dp's `schedule` (optim.linear_warmup, optim.cosine_schedule)."""
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    k, total = s - WARMUP, TOTAL - WARMUP
    return 0.0 if k >= total else LR * 0.5 * (1 + math.cos(math.pi * k / total))


def load_params(path):
    from safetensors.numpy import load_file
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in load_file(path).items()}


def torch_trainer(P0, ids):
    import torch
    import torch.nn.functional as F
    P = {k: torch.tensor(v, requires_grad=True) for k, v in P0.items()}
    opt = torch.optim.AdamW(list(P.values()), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
    hd = D // HEADS
    positions = torch.arange(T).repeat(B)

    def loss_fn(x, y):
        h = P["tok"][x] + P["pos"][positions]
        for i in range(LAYERS):
            p = lambda name: P[f"blocks.{i}.{name}"]
            a = F.layer_norm(h, (D,), p("ln1.g"), p("ln1.b"), eps=1e-5)
            qkv = a @ p("qkv.w") + p("qkv.b")
            q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(B, T, HEADS, hd).transpose(1, 2) for j in range(3))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + o.transpose(1, 2).reshape(B * T, D) @ p("proj.w") + p("proj.b")
            m = F.layer_norm(h, (D,), p("ln2.g"), p("ln2.b"), eps=1e-5)
            h = h + F.gelu(m @ p("fc.w") + p("fc.b"), approximate="tanh") @ p("out.w") + p("out.b")
        logits = F.layer_norm(h, (D,), P["ln_f.g"], P["ln_f.b"], eps=1e-5) @ P["head.w"] + P["head.b"]
        return F.cross_entropy(logits, y)

    def step(s):
        x, y = batch(ids, s)
        for g in opt.param_groups:
            g["lr"] = schedule(s)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def jax_trainer(P0, ids, vocab):
    import jax
    import jax.numpy as jnp
    hd = D // HEADS
    positions = jnp.tile(jnp.arange(T), B)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))

    def ln(h, g, b):
        mu = jnp.mean(h, -1, keepdims=True)
        c = h - mu
        return c / jnp.sqrt(jnp.mean(c * c, -1, keepdims=True) + 1e-5) * g + b

    def loss_fn(P, x, y):
        h = P["tok"][x] + P["pos"][positions]
        for i in range(LAYERS):
            p = lambda name: P[f"blocks.{i}.{name}"]
            qkv = ln(h, p("ln1.g"), p("ln1.b")) @ p("qkv.w") + p("qkv.b")
            q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(B, T, HEADS, hd).transpose(0, 2, 1, 3) for j in range(3))
            s = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd), -1e30)
            o = jax.nn.softmax(s, -1) @ v
            h = h + o.transpose(0, 2, 1, 3).reshape(B * T, D) @ p("proj.w") + p("proj.b")
            m = ln(h, p("ln2.g"), p("ln2.b"))
            h = h + jax.nn.gelu(m @ p("fc.w") + p("fc.b"), approximate=True) @ p("out.w") + p("out.b")
        logits = ln(h, P["ln_f.g"], P["ln_f.b"]) @ P["head.w"] + P["head.b"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), y[:, None], 1))

    @jax.jit
    def update(P, m, v, t, x, y, lr):
        loss, g = jax.value_and_grad(loss_fn)(P, x, y)
        t = t + 1
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, g)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, g)
        c1, c2 = 1 - B1 ** t, 1 - B2 ** t
        P = jax.tree.map(lambda p, m, v: p * (1 - lr * WD) - lr * (m / c1) / (jnp.sqrt(v / c2) + EPS), P, m, v)
        return loss, P, m, v, t

    state = {"P": {k: jnp.asarray(a) for k, a in P0.items()}}
    state["m"] = jax.tree.map(jnp.zeros_like, state["P"])
    state["v"] = jax.tree.map(jnp.zeros_like, state["P"])
    state["t"] = jnp.float32(0)

    def step(s):
        x, y = batch(ids, s)
        loss, state["P"], state["m"], state["v"], state["t"] = jax.block_until_ready(
            update(state["P"], state["m"], state["v"], state["t"], x, y, jnp.float32(schedule(s))))
        return float(loss)

    return step


def run(args):
    ids, vocab = text_ids()
    P0 = load_params(args.params)
    info(f"W6 {args.system}: {threads_info(args.system)}; vocab {vocab}, text {len(ids)}")
    step = torch_trainer(P0, ids) if args.system == "torch" else jax_trainer(P0, ids, vocab)
    name = "eager" if args.system == "torch" else "jit"
    losses, times = [], []
    for s in range(args.steps):
        t, loss = timed(lambda: step(s))
        losses.append(loss)
        times.append(t)
    report("W6", args.system, name, median(times[2:]), losses[0], loss10=losses[min(9, len(losses) - 1)],
           last=losses[-1], steps=args.steps)


def extra(p):
    p.add_argument("--params", required=True, help="initial weights written by examples/transformer.dp init")
    p.add_argument("--steps", type=int, default=30)


if __name__ == "__main__":
    run(parse_args("W6 transformer", ["torch", "jax"], extra))
