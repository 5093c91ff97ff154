"""W5 and W2 on PyTorch CUDA, for bench/gpu/run.sh: the computations of
shared/bench/reference/w5_matmul_grad.py and w2_mlp.py (torch eager), on the GPU.

  python torch_cuda.py w5 DATA_DIR [REPEATS]   median seconds per iteration of 10 (after 2
                                              warm-ups): loss = sum(tanh(A @ B)), dA, dB
  python torch_cuda.py w2 DATA_DIR [REPEATS]   median seconds per epoch 2 of 5 repeats (after
                                              the warm-up epoch 1), mean batch loss

Timed regions end with torch.cuda.synchronize(). TF32 is off: float32 products, as dp computes.
Prints one line like the references: `W5 torch cuda seconds=... value=... dA_sum=... dB_sum=...`.
"""

import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = torch.device("cuda")


def load(data, name):
    return torch.from_numpy(np.load(os.path.join(data, name + ".npy"))).to(DEV)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def w5(data, repeats):
    A = load(data, "w5_A").requires_grad_(True)
    B = load(data, "w5_B").requires_grad_(True)

    def it():
        loss = torch.tanh(A @ B).sum()
        dA, dB = torch.autograd.grad(loss, (A, B))
        return loss.detach(), dA, dB

    it()
    it()
    times = []
    for _ in range(repeats or 10):
        t, out = timed(it)
        times.append(t)
    loss, dA, dB = out
    s = statistics.median(times)
    print(f"W5 torch cuda seconds={s:.6g} value={loss.item():.10g} "
          f"gflops={3 * 2 * 1024 ** 3 / s / 1e9:.1f} "
          f"dA_sum={dA.double().sum().item():.10g} dB_sum={dB.double().sum().item():.10g}", flush=True)


def w2(data, repeats):
    X, y = load(data, "w2_X"), load(data, "w2_y")
    params = [load(data, n) for n in ("w2_W1", "w2_b1", "w2_W2", "w2_b2")]
    batches = [(X[k:k + 128], y[k:k + 128]) for k in range(0, X.shape[0], 128)]

    def epoch(p):
        W1, b1, W2, b2 = p
        losses = []
        for xb, yb in batches:
            logits = torch.tanh(xb @ W1 + b1) @ W2 + b2
            loss = F.cross_entropy(logits, yb)
            grads = torch.autograd.grad(loss, p)
            with torch.no_grad():
                for q, g in zip(p, grads):
                    q.sub_(0.05 * g)
            losses.append(loss.detach())
        return torch.stack(losses).mean().item()

    p = [a.clone().requires_grad_(True) for a in params]
    _, warm = timed(lambda: epoch(p))
    times = []
    for _ in range(repeats or 5):
        q = [a.detach().clone().requires_grad_(True) for a in p]
        t, loss = timed(lambda: epoch(q))
        times.append(t)
    print(f"W2 torch cuda seconds={statistics.median(times):.6g} value={loss:.10g} warmup={warm:.10g}",
          flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("w5", "w2"):
        sys.exit(__doc__)
    if not torch.cuda.is_available():
        sys.exit("torch_cuda.py: torch.cuda.is_available() is False")
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr)
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else None
    (w5 if sys.argv[1] == "w5" else w2)(sys.argv[2], reps)
