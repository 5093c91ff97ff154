"""Data for bench/vmap: one W2-shaped batch (128 x 784, N(0, 1)), labels from a random
teacher, and W2's initialisation (uniform(-0.05, 0.05)), as .npy files in DIR."""
import sys
import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(15)
x = rng.standard_normal((128, 784), dtype=np.float32)
teacher = rng.standard_normal((784, 10), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[np.argmax(x @ teacher, axis=1)]
u = lambda *s: rng.uniform(-0.05, 0.05, s).astype(np.float32)
for name, a in [("X", x), ("Y", y), ("W1", u(784, 256)), ("b1", u(256)), ("W2", u(256, 10)), ("b2", u(10))]:
    np.save(f"{out}/{name}.npy", a)
