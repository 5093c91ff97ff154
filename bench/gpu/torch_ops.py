"""PyTorch CUDA's seconds per operation on bench/gpu/kernels.dp's shapes, for reading its
figures beside: each operation 200 times after 10 warm-ups, synchronised before and after
(float32, TF32 off). Run: python3 bench/gpu/torch_ops.py (needs torch built for CUDA)."""
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
d = torch.device("cuda")
a = torch.randn(1024, 1024, device=d); b = torch.randn(1024, 1024, device=d)
x = torch.randn(128, 784, device=d); w = torch.randn(784, 256, device=d)
def per_op(f, reps=200):
    for _ in range(10): f()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(reps): f()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / reps
for name, f in [("matmul_1024", lambda: a @ b), ("matmul_128x784x256", lambda: x @ w),
                ("add_1m", lambda: a + b), ("tanh_1m", lambda: torch.tanh(a)),
                ("add_small", lambda: x + x), ("sum_rows_1m", lambda: a.sum(1))]:
    print(f"torch {name} seconds={per_op(f):.3e}")
def rt():
    return (x + 1.0).sum().item()
print(f"torch readback_roundtrip seconds={per_op(rt, 100):.3e}")
