//! The GPU kernels, one function per operation: each allocates its output (shapes have passed
//! the op table's rule, `TOp::check`; what is checked here is internal) and
//! records a dispatch of the family's shader (`shaders/*.wgsl`). Nothing here waits for the
//! GPU except `reduce_all` (its Float result is read back); `argmax_mask` reduces on the
//! device and leaves the index there.

use super::{context, Gpu, GpuTensor};
use crate::op::{Bin, Cmp, Conv, Un};
use crate::{broadcast_shape, fmt_shape, TResult};

/// The element functions every elementwise shader shares (prepended to each).
pub(super) const ELEMENT_FNS: &str = include_str!("shaders/element.wgsl");
const ELEMENTWISE: (&str, &str) =
    ("elementwise.wgsl", concat!(include_str!("shaders/element.wgsl"), include_str!("shaders/elementwise.wgsl")));
const UNARY: (&str, &str) =
    ("unary.wgsl", concat!(include_str!("shaders/element.wgsl"), include_str!("shaders/unary.wgsl")));
const MATMUL: (&str, &str) = ("matmul.wgsl", include_str!("shaders/matmul.wgsl"));
const REDUCE: (&str, &str) = ("reduce.wgsl", include_str!("shaders/reduce.wgsl"));
const SOFTMAX: (&str, &str) = ("softmax.wgsl", include_str!("shaders/softmax.wgsl"));
const LAYOUT: (&str, &str) = ("layout.wgsl", include_str!("shaders/layout.wgsl"));
const CONV: (&str, &str) = ("conv.wgsl", include_str!("shaders/conv.wgsl"));

/// Every (shader, entry point) pair, for the test that compiles them all.
pub const ENTRY_POINTS: &[((&str, &str), &str)] = &[
    (ELEMENTWISE, "binary"),
    (ELEMENTWISE, "binary_same"),
    (ELEMENTWISE, "binary_scalar"),
    (ELEMENTWISE, "accumulate"),
    (UNARY, "unary"),
    (UNARY, "fill"),
    (MATMUL, "matmul"),
    (MATMUL, "matmul_32"),
    (REDUCE, "reduce_all"),
    (REDUCE, "reduce_groups"),
    (REDUCE, "reduce_groups_thread"),
    (REDUCE, "argmax_pairs"),
    (REDUCE, "argmax_mask"),
    (SOFTMAX, "softmax"),
    (LAYOUT, "strided_copy"),
    (LAYOUT, "cumsum"),
    (LAYOUT, "gather"),
    (LAYOUT, "scatter_add"),
    (CONV, "conv2d"),
    (CONV, "conv2d_dx"),
    (CONV, "conv2d_dw"),
    (CONV, "max_pool"),
    (CONV, "max_pool_grad"),
    (CONV, "max_pool_pick"),
];

/// Compiles every pipeline (a test that the WGSL is valid on this adapter).
pub fn compile_all() -> TResult<()> {
    let g = context()?;
    for ((file, src), entry) in ENTRY_POINTS {
        g.pipeline(file, src, entry)?;
    }
    Ok(())
}

fn pipe(g: &Gpu, shader: (&'static str, &'static str), entry: &'static str) -> TResult<wgpu::ComputePipeline> {
    g.pipeline(shader.0, shader.1, entry)
}

pub(super) fn u32_of(n: usize, what: &str) -> TResult<u32> {
    u32::try_from(n).map_err(|_| format!("{what} ({n}) is too large for the GPU backend").into())
}

fn words(xs: &[usize]) -> TResult<Vec<u32>> {
    xs.iter().map(|&x| u32_of(x, "a dimension")).collect()
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub(super) fn groups(n: usize, wg: usize) -> u64 {
    n.div_ceil(wg) as u64
}

pub(super) fn new_output(g: &Gpu, shape: Vec<usize>) -> TResult<GpuTensor> {
    let n: usize = shape.iter().product();
    Ok(GpuTensor::new(g.alloc(n)?, shape))
}

/// `a op b` with NumPy broadcasting.
pub fn binary(op: Bin, a: &GpuTensor, b: &GpuTensor) -> TResult<GpuTensor> {
    binary_code(op as u32, a, b)
}

/// A comparison, logic or `max_of`/`min_of` with NumPy broadcasting (truth values as 0/1).
pub fn compare(op: Cmp, a: &GpuTensor, b: &GpuTensor) -> TResult<GpuTensor> {
    binary_code(op as u32, a, b)
}

/// `x op s` for a Float s (truth values as 0/1).
pub fn compare_scalar(op: Cmp, x: &GpuTensor, s: f32) -> TResult<GpuTensor> {
    binary_scalar_code(op as u32, x, s, false)
}

/// 1 where the element is 0, else 0.
pub fn logical_not(x: &GpuTensor) -> TResult<GpuTensor> {
    binary_scalar_code(Cmp::Equal as u32, x, 0.0, false)
}

/// `a` where `c` is nonzero, else `b` (broadcast together), as two masks: a select, so the
/// unselected side's infinities and NaNs stay out.
pub fn select(c: &GpuTensor, a: &GpuTensor, b: &GpuTensor) -> TResult<GpuTensor> {
    let keep = binary_scalar_code(Cmp::NotEqual as u32, c, 0.0, false)?;
    let other = binary_scalar(Bin::Sub, &keep, 1.0, true)?;
    binary(Bin::Add, &binary(Bin::Mask, a, &keep)?, &binary(Bin::Mask, b, &other)?)
}

/// `a op b` for an `elementwise.wgsl` operation code (`Bin`'s and `Cmp`'s discriminants).
fn binary_code(op: u32, a: &GpuTensor, b: &GpuTensor) -> TResult<GpuTensor> {
    let g = context()?;
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let out = new_output(g, shape.clone())?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    if a.shape == b.shape {
        let p = pipe(g, ELEMENTWISE, "binary_same")?;
        let prm = g.meta(&[u32_of(n, "a tensor's size")?, op]);
        g.dispatch(&p, &[(0, &prm), (1, a.raw()), (2, b.raw()), (3, out.raw())], groups(n, 256))?;
        return Ok(out);
    }
    let rank = shape.len();
    let bstride = |s: &[usize]| -> Vec<usize> {
        let st = strides(s);
        (0..rank)
            .map(|d| {
                let pad = rank - s.len();
                if d < pad || s[d - pad] == 1 {
                    0
                } else {
                    st[d - pad]
                }
            })
            .collect()
    };
    let mut prm = vec![u32_of(n, "a tensor's size")?, op, rank as u32, 0];
    prm.extend(words(&shape)?);
    prm.extend(words(&bstride(&a.shape))?);
    prm.extend(words(&bstride(&b.shape))?);
    let p = pipe(g, ELEMENTWISE, "binary")?;
    let prm = g.meta(&prm);
    g.dispatch(&p, &[(0, &prm), (1, a.raw()), (2, b.raw()), (3, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// `a op s` (or `s op a` when `scalar_left`) for a Float s.
pub fn binary_scalar(op: Bin, a: &GpuTensor, s: f32, scalar_left: bool) -> TResult<GpuTensor> {
    binary_scalar_code(op as u32, a, s, scalar_left)
}

fn binary_scalar_code(op: u32, a: &GpuTensor, s: f32, scalar_left: bool) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, a.shape.clone())?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let p = pipe(g, ELEMENTWISE, "binary_scalar")?;
    let prm = g.meta(&[u32_of(n, "a tensor's size")?, op, s.to_bits(), scalar_left as u32]);
    g.dispatch(&p, &[(0, &prm), (1, a.raw()), (3, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// `dst += src` in place (same shapes; the caller owns `dst` alone).
pub fn accumulate(dst: &wgpu::Buffer, src: &GpuTensor) -> TResult<()> {
    let g = context()?;
    let n = src.len();
    if n == 0 {
        return Ok(());
    }
    let p = pipe(g, ELEMENTWISE, "accumulate")?;
    let prm = g.meta(&[u32_of(n, "a tensor's size")?]);
    g.dispatch(&p, &[(0, &prm), (1, src.raw()), (3, dst)], groups(n, 256))
}

/// What `unary.wgsl` computes: the math functions (codes 0–11, `Un`'s discriminants) and
/// four of the backend's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Math(Un),
    /// 1 where x > 0, else 0 (relu's derivative).
    Step,
    /// 1 where x ≥ 0, else -1 (abs's derivative).
    Sign,
    /// x clamped to [p0, p1].
    Clamp,
    /// ln x where x > 0, else 0.
    LogPos,
}

impl UnOp {
    /// The shader's `op` code.
    fn code(self) -> u32 {
        match self {
            UnOp::Math(u) => u as u32,
            UnOp::Step => 12,
            UnOp::Sign => 13,
            UnOp::Clamp => 14,
            UnOp::LogPos => 15,
        }
    }
}

pub fn unary(op: UnOp, x: &GpuTensor, p0: f32, p1: f32) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, x.shape.clone())?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let p = pipe(g, UNARY, "unary")?;
    let prm = g.meta(&[u32_of(n, "a tensor's size")?, op.code(), p0.to_bits(), p1.to_bits()]);
    g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// A new tensor of `shape` filled with `v`.
pub fn full(shape: &[usize], v: f32) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, shape.to_vec())?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    if v == 0.0 && v.is_sign_positive() {
        g.record(|enc| enc.clear_buffer(out.raw(), 0, None))?;
        return Ok(out);
    }
    let p = pipe(g, UNARY, "fill")?;
    let prm = g.meta(&[u32_of(n, "a tensor's size")?, 0, v.to_bits()]);
    g.dispatch(&p, &[(0, &prm), (2, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// A stack of products C_z = A_z · B_z (row-major [m, k] and [k, n] matrices; `a_stride` and
/// `b_stride` are the distance between consecutive operands, 0 for one matrix broadcast over
/// the stack), giving `batch` [m, n] matrices of shape `shape`.
struct Stack {
    m: usize,
    k: usize,
    n: usize,
    batch: usize,
    a_stride: usize,
    b_stride: usize,
}

fn gemm(a: &GpuTensor, b: &GpuTensor, p: Stack, shape: Vec<usize>) -> TResult<GpuTensor> {
    let Stack { m, k, n, batch, a_stride, b_stride } = p;
    let g = context()?;
    let out = new_output(g, shape)?;
    if m == 0 || n == 0 || batch == 0 {
        return Ok(out);
    }
    if k == 0 {
        g.record(|enc| enc.clear_buffer(out.raw(), 0, None))?;
        return Ok(out);
    }
    // 64×64 tiles when they make enough workgroups to fill a GPU, else 32×32 ones.
    let tile = if n.div_ceil(64) * m.div_ceil(64) * batch >= 128 { 64 } else { 32 };
    let p = pipe(g, MATMUL, if tile == 64 { "matmul" } else { "matmul_32" })?;
    let (x, y) = (u32_of(n.div_ceil(tile), "a grid dimension")?, u32_of(m.div_ceil(tile), "a grid dimension")?);
    let dim = |v: usize| u32_of(v, "a matrix dimension");
    let step = g.max_groups() as usize;
    for z0 in (0..batch).step_by(step) {
        let prm = g.meta(&[dim(m)?, dim(n)?, dim(k)?, dim(a_stride)?, dim(b_stride)?, dim(z0)?]);
        let z = u32_of((batch - z0).min(step), "a grid dimension")?;
        g.dispatch_xyz(&p, &[(0, &prm), (1, a.raw()), (2, b.raw()), (3, out.raw())], x, y, z)?;
    }
    Ok(out)
}

/// `@` with NumPy's `matmul` semantics, as on the CPU (the shapes have passed `TOp::MatMul`'s
/// rule): a rank-1 operand is a row on the left, a column on the right; axes before the last
/// two are batch axes that broadcast. An operand whose batch is all ones is read once for
/// every product (stride 0); one broadcast partly is copied out to the full batch first.
pub fn matmul(a: &GpuTensor, b: &GpuTensor) -> TResult<GpuTensor> {
    let (sa, sb) = (&a.shape, &b.shape);
    let shape = crate::op::matmul_shape(sa, sb)?;
    let ((ba, m, k), (bb, _, n)) = (crate::op::as_stack(sa, true), crate::op::as_stack(sb, false));
    let batch_shape = broadcast_shape(&ba, &bb)?;
    let batch: usize = batch_shape.iter().product();
    // Each operand as a stack of `batch` matrices, or one matrix for all (stride 0).
    let stacked = |t: &GpuTensor, own: &[usize], rows: usize, cols: usize| -> TResult<(GpuTensor, usize)> {
        if own.iter().product::<usize>() == 1 {
            Ok((t.clone(), 0))
        } else if own == &batch_shape[..] {
            Ok((t.clone(), rows * cols))
        } else {
            let full: Vec<usize> = batch_shape.iter().copied().chain([rows, cols]).collect();
            Ok((broadcast_to(&t.reshaped(own.iter().copied().chain([rows, cols]).collect()), &full)?, rows * cols))
        }
    };
    let (a, a_stride) = stacked(a, &ba, m, k)?;
    let (b, b_stride) = stacked(b, &bb, k, n)?;
    gemm(&a, &b, Stack { m, k, n, batch, a_stride, b_stride }, shape)
}

/// Axis i of the result is axis `perm[i]` of x (a permutation, checked by the op's rule).
pub fn permute(x: &GpuTensor, perm: &[usize]) -> TResult<GpuTensor> {
    let g = context()?;
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape[a]).collect();
    let out = new_output(g, shape.clone())?;
    let st = strides(&x.shape);
    let src_st: Vec<usize> = perm.iter().map(|&a| st[a]).collect();
    strided_copy(x.raw(), 0, &src_st, out.raw(), 0, &strides(&shape), &shape)?;
    Ok(out)
}

/// Reduction codes of `reduce.wgsl`'s `reduce_all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    Sum = 0,
    Max = 1,
    /// Σ exp(x − shift)
    SumExp = 2,
}

/// Workgroups of one folding pass over n values. Each thread first folds a grid-stride run, so
/// 1,024 workgroups of 256 cover any size in a 1-D grid and leave at most 1,024 partials.
fn fold_groups(n: usize) -> usize {
    n.div_ceil(256).min(1024)
}

/// Folds x down to one partial on the device: `pass(src, n, groups, first)` records one pass
/// over the n values of `src` into a new output of `groups` partials; passes repeat until one
/// is left.
fn fold_passes(
    x: &GpuTensor,
    mut pass: impl FnMut(&GpuTensor, usize, usize, bool) -> TResult<GpuTensor>,
) -> TResult<GpuTensor> {
    let (mut src, mut n, mut first) = (x.clone(), x.len(), true);
    loop {
        let wgs = fold_groups(n);
        src = pass(&src, n, wgs, first)?;
        (n, first) = (wgs, false);
        if n == 1 {
            return Ok(src);
        }
    }
}

/// Folds every element to one value (read back): a tree per workgroup, then again over the
/// workgroups' partials until one is left.
pub fn reduce_all(x: &GpuTensor, fold: Fold, shift: f32) -> TResult<f32> {
    let g = context()?;
    if x.is_empty() {
        return Ok(if fold == Fold::Max { f32::NEG_INFINITY } else { 0.0 });
    }
    let p = pipe(g, REDUCE, "reduce_all")?;
    let one = fold_passes(x, |src, n, wgs, first| {
        // Partials combine by sum (Σ exp is a sum of partial sums) or by max.
        let op = if first || fold == Fold::Max { fold } else { Fold::Sum };
        let out = new_output(g, vec![wgs])?;
        let prm = g.meta(&[u32_of(n, "a tensor's size")?, op as u32, shift.to_bits()]);
        g.dispatch(&p, &[(0, &prm), (1, src.raw()), (2, out.raw())], wgs as u64)?;
        Ok(out)
    })?;
    Ok(g.read(one.raw(), 1)?[0])
}

/// A zero tensor of x's shape with 1 at the first maximum in row-major order, as the CPU's
/// `argmax` picks it (max's derivative mask). The index never leaves the device: a fold of
/// (key, index) pairs finds it, then a thread per element writes the mask.
pub fn argmax_mask(x: &GpuTensor) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, x.shape.clone())?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let best = argmax_pair(x)?;
    let p = pipe(g, REDUCE, "argmax_mask")?;
    let prm = g.meta(&[u32_of(n, "a tensor's size")?]);
    g.dispatch(&p, &[(0, &prm), (2, out.raw()), (3, best.raw())], groups(n, 256))?;
    Ok(out)
}

/// The index of the first maximum in row-major order (the `argmax` builtin): the same fold as
/// `argmax_mask`, and only the winning index comes back to the host. None when empty.
pub fn argmax_index(x: &GpuTensor) -> TResult<Option<usize>> {
    if x.is_empty() {
        return Ok(None);
    }
    let best = argmax_pair(x)?;
    // The pair is (key, index), both u32 bit patterns in the f32 buffer.
    let pair = context()?.read(best.raw(), 2)?;
    Ok(pair.get(1).map(|i| i.to_bits() as usize))
}

/// A device buffer holding the (key, index) pair of the first maximum of a non-empty `x`.
fn argmax_pair(x: &GpuTensor) -> TResult<GpuTensor> {
    let g = context()?;
    let p = pipe(g, REDUCE, "argmax_pairs")?;
    fold_passes(x, |src, n, wgs, first| {
        let pairs = new_output(g, vec![2 * wgs])?;
        let prm = g.meta(&[u32_of(n, "a tensor's size")?, !first as u32]);
        g.dispatch(&p, &[(0, &prm), (3, src.raw()), (4, pairs.raw())], wgs as u64)?;
        Ok(pairs)
    })
}

/// The longest group one workgroup folds alone (`reduce_groups`): 256 elements a thread. (On
/// lavapipe a workgroup folding 1.4M elements came out wrong, 43690 for a sum of ones.)
pub(super) const GROUP_CHUNK: usize = 64 * 256;

/// Folds groups of elements: output `shape` (row-major over `kept`), where output element o
/// folds the elements at base(o) + Σ rcoord·rstride. `kept` and `red` are (size, stride)
/// pairs in input elements.
fn reduce_groups(
    x: &GpuTensor,
    kept: &[(usize, usize)],
    red: &[(usize, usize)],
    fold: Fold,
    scale: f32,
    shape: Vec<usize>,
) -> TResult<GpuTensor> {
    let g = context()?;
    let n_out: usize = shape.iter().product();
    let r: usize = red.iter().map(|p| p.0).product();
    if n_out == 0 {
        return new_output(g, shape);
    }
    let mut prm = vec![
        u32_of(n_out, "a tensor's size")?,
        fold as u32,
        u32_of(r, "a reduction's size")?,
        kept.len() as u32,
        red.len() as u32,
        scale.to_bits(),
    ];
    prm.extend(words(&kept.iter().map(|p| p.0).collect::<Vec<_>>())?);
    prm.extend(words(&kept.iter().map(|p| p.1).collect::<Vec<_>>())?);
    prm.extend(words(&red.iter().map(|p| p.0).collect::<Vec<_>>())?);
    prm.extend(words(&red.iter().map(|p| p.1).collect::<Vec<_>>())?);
    if r > GROUP_CHUNK {
        // Long groups: partials of chunks first, a workgroup each, then the partials folded
        // as groups (a workgroup's loop stays short, and a long group is spread over many).
        let nchunks = r.div_ceil(GROUP_CHUNK);
        prm.extend([u32_of(nchunks, "a reduction's size")?, GROUP_CHUNK as u32]);
        let partials = new_output(g, vec![n_out * nchunks])?;
        let p = pipe(g, REDUCE, "reduce_chunks")?;
        g.dispatch(&p, &[(0, &g.meta(&prm)), (1, x.raw()), (2, partials.raw())], (n_out * nchunks) as u64)?;
        return reduce_groups(&partials, &[(n_out, nchunks)], &[(nchunks, 1)], fold, scale, shape);
    }
    let out = new_output(g, shape)?;
    let prm = g.meta(&prm);
    // Small groups: a thread per output; large ones: a workgroup (tree) per output.
    if r <= 32 {
        let p = pipe(g, REDUCE, "reduce_groups_thread")?;
        g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw())], groups(n_out, 256))?;
    } else {
        let p = pipe(g, REDUCE, "reduce_groups")?;
        g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw())], n_out as u64)?;
    }
    Ok(out)
}

/// Sums (or maxes, times `scale`) along `axis`, dropping it.
pub fn reduce_axis(x: &GpuTensor, axis: usize, fold: Fold, scale: f32) -> TResult<GpuTensor> {
    let st = strides(&x.shape);
    let kept: Vec<(usize, usize)> = (0..x.shape.len()).filter(|&d| d != axis).map(|d| (x.shape[d], st[d])).collect();
    let mut shape = x.shape.clone();
    shape.remove(axis);
    reduce_groups(x, &kept, &[(x.shape[axis], st[axis])], fold, scale, shape)
}

/// Sums a broadcast result back down to `shape` (the adjoint of broadcasting).
pub fn sum_to(x: &GpuTensor, shape: &[usize]) -> TResult<GpuTensor> {
    let err = || format!("cannot reduce a gradient of shape {} to {}", fmt_shape(&x.shape), fmt_shape(shape));
    if shape.len() > x.shape.len() {
        return Err(err().into());
    }
    let pad = x.shape.len() - shape.len();
    let st = strides(&x.shape);
    let (mut kept, mut red) = (Vec::new(), Vec::new());
    for (d, (&size, &stride)) in x.shape.iter().zip(&st).enumerate() {
        let want = if d < pad { 1 } else { shape[d - pad] };
        if want == size {
            kept.push((size, stride));
        } else if want == 1 {
            red.push((size, stride));
        } else {
            return Err(err().into());
        }
    }
    reduce_groups(x, &kept, &red, Fold::Sum, 1.0, shape.to_vec())
}

/// softmax (or log_softmax) along the last axis.
pub fn softmax(x: &GpuTensor, log: bool) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, x.shape.clone())?;
    let len = *x.shape.last().ok_or("softmax of a scalar tensor (it needs at least one axis)")?;
    if out.is_empty() {
        return Ok(out);
    }
    let rows = x.len() / len;
    let p = pipe(g, SOFTMAX, "softmax")?;
    let prm = g.meta(&[u32_of(rows, "a row count")?, u32_of(len, "a row length")?, log as u32]);
    g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw())], rows as u64)?;
    Ok(out)
}

/// Copies the elements of an index space `shape` from `src` (offset, strides) to `dst`
/// (offset, strides).
fn strided_copy(
    src: &wgpu::Buffer,
    src_off: usize,
    src_st: &[usize],
    dst: &wgpu::Buffer,
    dst_off: usize,
    dst_st: &[usize],
    shape: &[usize],
) -> TResult<()> {
    let g = context()?;
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let mut prm = vec![
        u32_of(n, "a tensor's size")?,
        shape.len() as u32,
        u32_of(src_off, "an offset")?,
        u32_of(dst_off, "an offset")?,
    ];
    prm.extend(words(shape)?);
    prm.extend(words(src_st)?);
    prm.extend(words(dst_st)?);
    let p = pipe(g, LAYOUT, "strided_copy")?;
    let prm = g.meta(&prm);
    g.dispatch(&p, &[(0, &prm), (1, src), (2, dst)], groups(n, 256))
}

/// Reverses the axes.
pub fn transpose(x: &GpuTensor) -> TResult<GpuTensor> {
    let perm: Vec<usize> = (0..x.shape.len()).rev().collect();
    permute(x, &perm)
}

/// Broadcasts `x` up to `shape`.
pub fn broadcast_to(x: &GpuTensor, shape: &[usize]) -> TResult<GpuTensor> {
    let err = || format!("cannot broadcast shape {} to {}", fmt_shape(&x.shape), fmt_shape(shape));
    if x.shape.len() > shape.len() {
        return Err(err().into());
    }
    let pad = shape.len() - x.shape.len();
    let st = strides(&x.shape);
    let mut src_st = vec![0; shape.len()];
    for d in 0..x.shape.len() {
        if x.shape[d] == shape[d + pad] {
            src_st[d + pad] = if x.shape[d] == 1 { 0 } else { st[d] };
        } else if x.shape[d] == 1 {
            src_st[d + pad] = 0;
        } else {
            return Err(err().into());
        }
    }
    if x.shape == shape {
        return Ok(x.clone());
    }
    let g = context()?;
    let out = new_output(g, shape.to_vec())?;
    strided_copy(x.raw(), 0, &src_st, out.raw(), 0, &strides(shape), shape)?;
    Ok(out)
}

/// Elements lo..hi along `axis` (checked by the caller).
pub fn slice(x: &GpuTensor, axis: usize, lo: usize, hi: usize) -> TResult<GpuTensor> {
    let g = context()?;
    let mut shape = x.shape.clone();
    shape[axis] = hi - lo;
    let out = new_output(g, shape.clone())?;
    let st = strides(&x.shape);
    strided_copy(x.raw(), lo * st[axis], &st, out.raw(), 0, &strides(&shape), &shape)?;
    Ok(out)
}

/// A zero tensor of `shape` with `x` placed at offset `lo` along `axis` (slice's adjoint).
pub fn unslice(x: &GpuTensor, axis: usize, lo: usize, shape: &[usize]) -> TResult<GpuTensor> {
    let out = full(shape, 0.0)?;
    let st = strides(shape);
    strided_copy(x.raw(), 0, &strides(&x.shape), out.raw(), lo * st[axis], &st, &x.shape)?;
    Ok(out)
}

/// Running sums along `axis`.
pub fn cumsum(x: &GpuTensor, axis: usize) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, x.shape.clone())?;
    if out.is_empty() {
        return Ok(out);
    }
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer = out.len() / (n * inner);
    let nch = n.div_ceil(SCAN_CHUNK);
    let params = |count: usize| -> TResult<Vec<u32>> {
        Ok(vec![
            u32_of(count, "a tensor's size")?,
            u32_of(n, "a dimension")?,
            u32_of(inner, "a dimension")?,
            SCAN_CHUNK as u32,
        ])
    };
    // Each chunk's running sums and total, then (for lines of several chunks) the running sums
    // of the totals carried into the chunks after the first.
    let totals = new_output(g, vec![outer, nch, inner])?;
    let p = pipe(g, LAYOUT, "cumsum")?;
    let prm = g.meta(&params(outer * nch * inner)?);
    g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw()), (3, totals.raw())], groups(outer * nch * inner, 256))?;
    if nch > 1 {
        let carried = cumsum(&totals, 1)?;
        let p = pipe(g, LAYOUT, "cumsum_carry")?;
        let prm = g.meta(&params(out.len())?);
        g.dispatch(&p, &[(0, &prm), (1, carried.raw()), (2, out.raw())], groups(out.len(), 256))?;
    }
    Ok(out)
}

/// The longest run one thread of `cumsum` sums alone (a line longer is split into chunks whose
/// totals are carried; on lavapipe a loop of more than 65535 iterations stops short).
const SCAN_CHUNK: usize = 4096;

/// NumPy's `take(x, indices, axis)` at `pos`, the indices' positions along `axis` (checked in
/// range by the caller), `ishape` the indices' shape.
pub fn gather(x: &GpuTensor, axis: usize, pos: &[usize], ishape: &[usize]) -> TResult<GpuTensor> {
    let g = context()?;
    let shape: Vec<usize> = x.shape[..axis].iter().chain(ishape).chain(&x.shape[axis + 1..]).copied().collect();
    let out = new_output(g, shape)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut prm = Vec::with_capacity(4 + pos.len());
    prm.extend([
        u32_of(n, "a tensor's size")?,
        u32_of(pos.len(), "the number of indices")?,
        u32_of(inner, "a dimension")?,
        u32_of(x.shape[axis], "a dimension")?,
    ]);
    for &p in pos {
        prm.push(u32_of(p, "an index")?);
    }
    let p = pipe(g, LAYOUT, "gather")?;
    let prm = g.meta(&prm);
    g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// The adjoint of `gather`: zeros of `shape` with each slice of `gr` (laid out as gather's
/// result) added at its position in `pos` along `axis`.
pub fn scatter_add(gr: &GpuTensor, axis: usize, pos: &[usize], shape: &[usize]) -> TResult<GpuTensor> {
    let g = context()?;
    let dim = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    if gr.len() != outer * pos.len() * inner {
        return Err(crate::TensorError::internal(format!(
            "a scatter-add of {} into {} along axis {axis} at {} positions",
            fmt_shape(&gr.shape),
            fmt_shape(shape),
            pos.len()
        )));
    }
    let n: usize = shape.iter().product();
    if n == 0 || gr.is_empty() {
        return full(shape, 0.0);
    }
    let out = new_output(g, shape.to_vec())?;
    // The k of each position, grouped by position and increasing within a group (a counting
    // sort): `start[j]..start[j + 1]` of `ks` are position j's.
    let mut start = vec![0u32; dim + 1];
    for &p in pos {
        start[p + 1] += 1;
    }
    for j in 0..dim {
        start[j + 1] += start[j];
    }
    let mut next = start.clone();
    let mut ks = vec![0u32; pos.len()];
    for (k, &p) in pos.iter().enumerate() {
        ks[next[p] as usize] = u32_of(k, "an index")?;
        next[p] += 1;
    }
    let mut prm = Vec::with_capacity(5 + dim + pos.len());
    prm.extend([
        u32_of(n, "a tensor's size")?,
        u32_of(pos.len(), "the number of indices")?,
        u32_of(inner, "a dimension")?,
        u32_of(dim, "a dimension")?,
    ]);
    prm.extend(start);
    prm.extend(ks);
    let p = pipe(g, LAYOUT, "scatter_add")?;
    let prm = g.meta(&prm);
    g.dispatch(&p, &[(0, &prm), (1, gr.raw()), (2, out.raw())], groups(n, 256))?;
    Ok(out)
}

/// Joins tensors along `axis` (shapes checked by the caller).
pub fn concat(parts: &[&GpuTensor], axis: usize, shape: &[usize]) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, shape.to_vec())?;
    let st = strides(shape);
    let mut lo = 0;
    for p in parts {
        strided_copy(p.raw(), 0, &strides(&p.shape), out.raw(), lo * st[axis], &st, &p.shape)?;
        lo += p.shape[axis];
    }
    Ok(out)
}

/// Row i of x (a contiguous range: a buffer copy).
pub fn row(x: &GpuTensor, i: usize) -> TResult<GpuTensor> {
    let g = context()?;
    let shape = x.shape[1..].to_vec();
    let out = new_output(g, shape)?;
    let n = out.len() as u64 * 4;
    if n > 0 {
        g.record(|enc| enc.copy_buffer_to_buffer(x.raw(), i as u64 * n, out.raw(), 0, n))?;
    }
    Ok(out)
}

/// A zero tensor of `shape` whose row i is x (row's adjoint).
pub fn scatter_row(x: &GpuTensor, i: usize, shape: &[usize]) -> TResult<GpuTensor> {
    let out = full(shape, 0.0)?;
    let n = x.len() as u64 * 4;
    if n > 0 {
        context()?.record(|enc| enc.copy_buffer_to_buffer(x.raw(), 0, out.raw(), i as u64 * n, n))?;
    }
    Ok(out)
}

/// A copy of x (a fresh buffer).
pub fn copy(x: &GpuTensor) -> TResult<GpuTensor> {
    let g = context()?;
    let out = new_output(g, x.shape.clone())?;
    let n = x.len() as u64 * 4;
    if n > 0 {
        g.record(|enc| enc.copy_buffer_to_buffer(x.raw(), 0, out.raw(), 0, n))?;
    }
    Ok(out)
}

fn conv_prm(d: &crate::op::ConvDims) -> TResult<Vec<u32>> {
    words(&[d.n, d.c, d.h, d.w, d.o, d.kh, d.kw, d.oh, d.ow, d.stride, d.pad])
}

/// Convolution of x [N, C, H, W] with w [O, C, KH, KW], with a stride and zero padding.
pub fn conv2d(x: &GpuTensor, w: &GpuTensor, cv: Conv) -> TResult<GpuTensor> {
    let d = crate::op::conv_dims(&x.shape, &w.shape, cv)?;
    let g = context()?;
    let out = new_output(g, vec![d.n, d.o, d.oh, d.ow])?;
    if out.is_empty() {
        return Ok(out);
    }
    let p = pipe(g, CONV, "conv2d")?;
    let prm = g.meta(&conv_prm(&d)?);
    g.dispatch(&p, &[(0, &prm), (1, x.raw()), (2, w.raw()), (3, out.raw())], groups(out.len(), 256))?;
    Ok(out)
}

/// The adjoints of conv2d with respect to its input (`input` true) or its weights.
pub fn conv2d_grad(x: &GpuTensor, w: &GpuTensor, gr: &GpuTensor, cv: Conv, input: bool) -> TResult<GpuTensor> {
    let d = crate::op::conv_dims(&x.shape, &w.shape, cv)?;
    let g = context()?;
    let out = new_output(g, if input { x.shape.clone() } else { w.shape.clone() })?;
    if out.is_empty() {
        return Ok(out);
    }
    let prm = g.meta(&conv_prm(&d)?);
    if input {
        let p = pipe(g, CONV, "conv2d_dx")?;
        g.dispatch(&p, &[(0, &prm), (2, w.raw()), (3, out.raw()), (4, gr.raw())], groups(out.len(), 256))?;
    } else {
        let p = pipe(g, CONV, "conv2d_dw")?;
        g.dispatch(&p, &[(0, &prm), (1, x.raw()), (3, out.raw()), (4, gr.raw())], out.len() as u64)?;
    }
    Ok(out)
}

/// Max pooling (`mode` 0), its adjoint given g (1), or its forward-mode pick of t (2). The
/// shape has passed `TOp::MaxPool2d`'s rule.
pub fn max_pool(x: &GpuTensor, k: usize, other: Option<&GpuTensor>, pick: bool) -> TResult<GpuTensor> {
    let s = &x.shape;
    let (planes, h, w) = (s[0] * s[1], s[2], s[3]);
    let (oh, ow) = (h / k, w / k);
    let g = context()?;
    let prm = g.meta(&words(&[planes, h, w, k, oh, ow])?);
    let windows = planes * oh * ow;
    match other {
        None => {
            let out = new_output(g, vec![s[0], s[1], oh, ow])?;
            if windows > 0 {
                let p = pipe(g, CONV, "max_pool")?;
                g.dispatch(&p, &[(0, &prm), (1, x.raw()), (3, out.raw())], groups(windows, 256))?;
            }
            Ok(out)
        }
        Some(t) if pick => {
            let out = new_output(g, vec![s[0], s[1], oh, ow])?;
            if windows > 0 {
                let p = pipe(g, CONV, "max_pool_pick")?;
                g.dispatch(&p, &[(0, &prm), (1, x.raw()), (3, out.raw()), (4, t.raw())], groups(windows, 256))?;
            }
            Ok(out)
        }
        Some(gr) => {
            let out = full(s, 0.0)?;
            if windows > 0 {
                let p = pipe(g, CONV, "max_pool_grad")?;
                g.dispatch(&p, &[(0, &prm), (1, x.raw()), (3, out.raw()), (4, gr.raw())], groups(windows, 256))?;
            }
            Ok(out)
        }
    }
}
