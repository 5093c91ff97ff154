"""bench/vmap's references: JAX jit(vmap(grad)) and PyTorch torch.func vmap(grad) (eager), the
same per-example gradients as per_example.dp. Prints one line per system: seconds per batch
(median of 7 after a warm-up) and the same checksums as dp."""
import os, sys, time, statistics
import numpy as np

# BENCH_ONE_THREAD=1 (run.sh's ONE_THREAD=1): one thread each, a fairer comparison on a loaded
# machine (XLA's flags must be set before jax is imported).
ONE = os.environ.get("BENCH_ONE_THREAD") == "1"
if ONE:
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
# BENCH_CPU_TIME=1 (run.sh's CPU_TIME=1): the process's CPU time (user + system) per call in
# place of wall time, which other processes on a busy machine disturb far less.
clock = time.process_time if os.environ.get("BENCH_CPU_TIME") == "1" else time.perf_counter

d = sys.argv[1]
load = lambda n: np.load(f"{d}/{n}.npy")
X, Y = load("X"), load("Y")
P = {k: load(k) for k in ["W1", "b1", "W2", "b2"]}

def timed(f):
    f()
    ts = []
    for _ in range(7):
        t = clock(); r = f(); ts.append(clock() - t)
    return statistics.median(ts), r

def report(name, secs, g):
    total = sum(float(np.sum(np.asarray(g[k], dtype=np.float64))) for k in g)
    first = float(np.sum(np.asarray(g["W1"][0], dtype=np.float64)))
    print(f"{name} seconds {secs:.6f} total {total:.6e} first {first:.6e}", flush=True)

try:
    import jax, jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    def loss(p, x, y):
        logits = jnp.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        return -jnp.sum(jax.nn.log_softmax(logits) * y)
    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    pj, xj, yj = {k: jnp.asarray(v) for k, v in P.items()}, jnp.asarray(X), jnp.asarray(Y)
    secs, g = timed(lambda: jax.block_until_ready(f(pj, xj, yj)))
    report("jax:jit(vmap(grad))", secs, g)
except ImportError:
    print("jax: not installed", flush=True)

try:
    import torch
    from torch.func import vmap, grad
    torch.set_grad_enabled(False)
    if ONE:
        torch.set_num_threads(1)
    def tloss(p, x, y):
        logits = torch.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        return -(torch.log_softmax(logits, -1) * y).sum()
    pt = {k: torch.from_numpy(v) for k, v in P.items()}
    xt, yt = torch.from_numpy(X), torch.from_numpy(Y)
    tf = vmap(grad(tloss), in_dims=(None, 0, 0))
    secs, g = timed(lambda: tf(pt, xt, yt))
    report("torch:func.vmap(grad)", secs, {k: v.numpy() for k, v in g.items()})
except ImportError:
    print("torch: not installed", flush=True)
