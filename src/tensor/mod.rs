//! Tensors: one front (shape + storage) and backends behind `Storage` (DESIGN.md principle 6).
//! The CPU backend is ndarray; the GPU backend (`gpu/`) keeps wgpu buffers on the device.
//! Every operation dispatches on the storage of its operands (`ops::forward`,
//! `ops::elementwise`); operands on two devices are an error.

pub mod builtins;
pub mod elementwise;
pub mod gemm;
pub mod gpu;
pub mod npy;
pub mod ops;
pub mod tree;
pub mod vmath;

use ndarray::{ArrayD, Axis, IxDyn};

#[derive(Clone, Debug)]
pub enum Storage {
    Cpu(ArrayD<f32>),
    /// A buffer on the GPU; read back only to print, convert, compare or save.
    Gpu(gpu::GpuTensor),
}

#[derive(Clone, Debug)]
pub struct Tensor {
    pub storage: Storage,
}

/// The two devices a tensor can live on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

pub type TResult<T> = Result<T, String>;

pub fn fmt_shape(s: &[usize]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl Tensor {
    pub fn from_array(a: ArrayD<f32>) -> Tensor {
        Tensor { storage: Storage::Cpu(a) }
    }
    pub fn from_gpu(g: gpu::GpuTensor) -> Tensor {
        Tensor { storage: Storage::Gpu(g) }
    }
    /// The data as an ndarray: a GPU tensor is read back (once; the copy is kept).
    pub fn array(&self) -> &ArrayD<f32> {
        match &self.storage {
            Storage::Cpu(a) => a,
            Storage::Gpu(g) => g.host(),
        }
    }
    /// Mutable host data. A GPU tensor is moved to the CPU first (GPU code paths never call
    /// this; in-place accumulation goes through `add_assign`).
    pub fn array_mut(&mut self) -> &mut ArrayD<f32> {
        if let Storage::Gpu(g) = &self.storage {
            self.storage = Storage::Cpu(g.host().clone());
        }
        match &mut self.storage {
            Storage::Cpu(a) => a,
            Storage::Gpu(_) => unreachable!("moved to the CPU above"),
        }
    }
    pub fn device(&self) -> Device {
        match self.storage {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Gpu(_) => Device::Gpu,
        }
    }
    pub fn gpu(&self) -> Option<&gpu::GpuTensor> {
        match &self.storage {
            Storage::Gpu(g) => Some(g),
            Storage::Cpu(_) => None,
        }
    }
    pub fn is_gpu(&self) -> bool {
        self.gpu().is_some()
    }
    /// The same tensor on `d` (a copy across devices, or itself).
    pub fn to_device(&self, d: Device) -> TResult<Tensor> {
        Ok(match (&self.storage, d) {
            (Storage::Cpu(a), Device::Gpu) => Tensor::from_gpu(gpu::upload(a)?),
            (Storage::Gpu(g), Device::Cpu) => Tensor::from_array(g.host().clone()),
            _ => self.clone(),
        })
    }
    /// Where construction builtins put a new tensor: on the default device (`--device`).
    pub fn place(self) -> TResult<Tensor> {
        if !self.is_gpu() && gpu::default_is_gpu()? {
            return self.to_device(Device::Gpu);
        }
        Ok(self)
    }
    pub fn shape(&self) -> &[usize] {
        match &self.storage {
            Storage::Cpu(a) => a.shape(),
            Storage::Gpu(g) => &g.shape,
        }
    }
    pub fn len(&self) -> usize {
        match &self.storage {
            Storage::Cpu(a) => a.len(),
            Storage::Gpu(g) => g.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::from_array(ArrayD::zeros(IxDyn(shape)))
    }
    pub fn full(shape: &[usize], v: f32) -> Tensor {
        Tensor::from_array(ArrayD::from_elem(IxDyn(shape), v))
    }
    /// A tensor of `shape` filled with `v` on device `d`.
    pub fn full_on(d: Device, shape: &[usize], v: f32) -> TResult<Tensor> {
        match d {
            Device::Cpu => Ok(Tensor::full(shape, v)),
            Device::Gpu => Ok(Tensor::from_gpu(gpu::kernels::full(shape, v)?)),
        }
    }
    /// Zeros of this tensor's shape, on its device.
    pub fn zeros_like(&self) -> TResult<Tensor> {
        Tensor::full_on(self.device(), self.shape(), 0.0)
    }
    pub fn from_vec(shape: &[usize], data: Vec<f32>) -> TResult<Tensor> {
        ArrayD::from_shape_vec(IxDyn(shape), data).map(Tensor::from_array).map_err(|e| e.to_string())
    }
    /// Applies `f` to every element. GPU tensors have no kernel for an arbitrary closure: this
    /// is an explicit CPU fallback (read back, map, upload); GPU code paths use `unary`.
    pub fn map(&self, f: impl Fn(f32) -> f32) -> Tensor {
        match &self.storage {
            Storage::Cpu(a) => Tensor::from_array(a.mapv(f)),
            Storage::Gpu(g) => {
                gpu::trace(|| "CPU fallback for a mapped function".to_string());
                let a = g.host().mapv(f);
                match gpu::upload(&a) {
                    Ok(t) => Tensor::from_gpu(t),
                    Err(_) => Tensor::from_array(a),
                }
            }
        }
    }
    /// An elementwise math function (`sin`, `exp`, `tanh`, ...), on the tensor's device.
    pub fn unary(&self, op: crate::ad::rules::Un) -> TResult<Tensor> {
        match &self.storage {
            Storage::Cpu(a) => Ok(Tensor::from_array(elementwise::map_un(op, a))),
            Storage::Gpu(g) => gpu::ops::unary(op, g).map(Tensor::from_gpu),
        }
    }
    /// Elements clamped to [lo, hi], on the tensor's device.
    pub fn clamp(&self, lo: f32, hi: f32) -> TResult<Tensor> {
        match &self.storage {
            Storage::Cpu(a) => Ok(Tensor::from_array(a.mapv(|x| x.clamp(lo, hi)))),
            Storage::Gpu(g) => gpu::kernels::unary(gpu::kernels::UnOp::Clamp, g, lo, hi).map(Tensor::from_gpu),
        }
    }
    /// ln x where x > 0, else 0 (in the derivative of `**` with respect to the exponent), on
    /// the tensor's device.
    pub fn log_or_zero(&self) -> TResult<Tensor> {
        match &self.storage {
            Storage::Cpu(a) => Ok(Tensor::from_array(a.mapv(|v| if v > 0.0 { v.ln() } else { 0.0 }))),
            Storage::Gpu(g) => gpu::ops::log_or_zero(g).map(Tensor::from_gpu),
        }
    }
    /// Whether every element is positive (NaN is not); a GPU tensor reads back one value.
    pub fn all_positive(&self) -> TResult<bool> {
        match &self.storage {
            Storage::Cpu(a) => Ok(a.iter().all(|&v| v > 0.0)),
            Storage::Gpu(g) => gpu::ops::all_positive(g),
        }
    }
    /// `self += other` for equal shapes: in place when this tensor owns its data alone (adjoint
    /// accumulation), else into a new buffer.
    pub fn add_assign(&mut self, other: &Tensor) -> TResult<()> {
        if self.device() != other.device() {
            return Err(format!(
                "`+`: the operands are on two devices ({} and {}); move one with `to_device`",
                self.device().name(),
                other.device().name()
            ));
        }
        match &mut self.storage {
            Storage::Cpu(a) => *a += other.array(),
            Storage::Gpu(g) => {
                let src = other.gpu().ok_or("internal: device mismatch")?;
                match g.unique_mut() {
                    Some(dst) => gpu::kernels::accumulate(dst, src)?,
                    None => *g = gpu::kernels::binary(gpu::kernels::BinOp::Add, g, src)?,
                }
            }
        }
        Ok(())
    }
    pub fn data(&self) -> Vec<f32> {
        self.array().iter().copied().collect()
    }
}

/// The NumPy broadcast of two shapes, or an error naming both.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> TResult<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {} and {} cannot be broadcast together", fmt_shape(a), fmt_shape(b))),
        };
    }
    Ok(out)
}

/// Sums `g` down to `shape` (the adjoint of broadcasting).
pub fn sum_to(g: &Tensor, shape: &[usize]) -> TResult<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let mut a = g.array().clone();
    while a.ndim() > shape.len() {
        a = a.sum_axis(Axis(0));
    }
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 && a.shape()[i] != 1 {
            a = a.sum_axis(Axis(i)).insert_axis(Axis(i));
        }
    }
    if a.shape() != shape {
        return Err(format!("cannot reduce a gradient of shape {} to {}", fmt_shape(g.shape()), fmt_shape(shape)));
    }
    Ok(Tensor::from_array(a))
}

/// Matrix product for 2-D × 2-D and 2-D × 1-D (and 1-D × 2-D, 1-D × 1-D).
pub fn matmul(a: &Tensor, b: &Tensor) -> TResult<Tensor> {
    let (x, y) = (a.array(), b.array());
    let (xs, ys) = (x.shape(), y.shape());
    if !(1..=2).contains(&xs.len()) || !(1..=2).contains(&ys.len()) {
        return Err(format!("`@` multiplies matrices and vectors; got shapes {} and {}", fmt_shape(xs), fmt_shape(ys)));
    }
    // The contracted axis: the last of the left operand, the first of the right.
    if xs[xs.len() - 1] != ys[0] {
        return Err(format!(
            "matrix product of shapes {} and {}: inner dimensions differ",
            fmt_shape(xs),
            fmt_shape(ys)
        ));
    }
    let shape: Vec<usize> = xs[..xs.len() - 1].iter().chain(&ys[1..]).copied().collect();
    let mut out = ArrayD::zeros(IxDyn(&shape));
    product_into(&mut out, x, false, y, false, 0.0)?;
    Ok(Tensor::from_array(out))
}

/// out = x' @ y' + beta · out, where x' is x or (with `tx`) its transpose, likewise y' — the
/// transposes are strided views, never copies. Vectors act as a column on the right and a row
/// on the left; a vector-by-vector product with a matrix `out` is their outer product.
pub fn product_into(
    out: &mut ArrayD<f32>,
    x: &ArrayD<f32>,
    tx: bool,
    y: &ArrayD<f32>,
    ty: bool,
    beta: f32,
) -> TResult<()> {
    use ndarray::{Ix1, Ix2};
    fn m2(t: &ArrayD<f32>, transposed: bool) -> TResult<ndarray::ArrayView2<'_, f32>> {
        let v = t.view().into_dimensionality::<Ix2>().map_err(|e| e.to_string())?;
        Ok(if transposed { v.reversed_axes() } else { v })
    }
    fn v1(t: &ArrayD<f32>) -> TResult<ndarray::ArrayView1<'_, f32>> {
        t.view().into_dimensionality::<Ix1>().map_err(|e| e.to_string())
    }
    let out_shape = out.shape().to_vec();
    let bad = || {
        format!(
            "internal: product of shapes {} and {} into {}",
            fmt_shape(x.shape()),
            fmt_shape(y.shape()),
            fmt_shape(&out_shape)
        )
    };
    match (x.ndim(), y.ndim(), out.ndim()) {
        (2, 2, 2) | (1, 1, 2) => {
            let (a, b) = if x.ndim() == 2 {
                (m2(x, tx)?, m2(y, ty)?)
            } else {
                (v1(x)?.insert_axis(ndarray::Axis(1)), v1(y)?.insert_axis(ndarray::Axis(0)))
            };
            let c = out.view_mut().into_dimensionality::<Ix2>().map_err(|e| e.to_string())?;
            if a.ncols() != b.nrows() || c.dim() != (a.nrows(), b.ncols()) {
                return Err(bad());
            }
            gemm::gemm(1.0, a, b, beta, c);
        }
        (2, 1, 1) | (1, 2, 1) => {
            // A row vector on the left is the transposed matrix on the right.
            let (a, v) = if x.ndim() == 2 { (m2(x, tx)?, v1(y)?) } else { (m2(y, !ty)?, v1(x)?) };
            let c = out.view_mut().into_dimensionality::<Ix1>().map_err(|e| e.to_string())?;
            if a.ncols() != v.len() || c.len() != a.nrows() {
                return Err(bad());
            }
            gemm::gemv(1.0, a, v, beta, c);
        }
        (1, 1, 0) => {
            let d = v1(x)?.dot(&v1(y)?);
            let o = out.first_mut().ok_or_else(bad)?;
            *o = d + beta * *o;
        }
        _ => return Err(bad()),
    }
    Ok(())
}

/// Reverses the axes (the usual transpose for matrices).
pub fn transpose(a: &Tensor) -> Tensor {
    Tensor::from_array(a.array().t().as_standard_layout().into_owned())
}

/// A small deterministic generator (SplitMix64) so `randn seed` is the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Dimensions of a 2-D convolution, checked.
pub struct ConvDims {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
}

pub fn conv_dims(x: &[usize], k: &[usize]) -> TResult<ConvDims> {
    if x.len() != 4 || k.len() != 4 {
        return Err(format!(
            "conv2d takes an input [N, C, H, W] and weights [O, C, KH, KW]; got shapes {} and {}",
            fmt_shape(x),
            fmt_shape(k)
        ));
    }
    if x[1] != k[1] || k[2] > x[2] || k[3] > x[3] {
        return Err(format!("conv2d: input {} and weights {} do not fit", fmt_shape(x), fmt_shape(k)));
    }
    Ok(ConvDims {
        n: x[0],
        c: x[1],
        h: x[2],
        w: x[3],
        o: k[0],
        kh: k[2],
        kw: k[3],
        oh: x[2] - k[2] + 1,
        ow: x[3] - k[3] + 1,
    })
}

/// im2col of one image: [C*KH*KW, OH*OW].
fn im2col(x: &[f32], d: &ConvDims) -> ndarray::Array2<f32> {
    let mut cols = ndarray::Array2::<f32>::zeros((d.c * d.kh * d.kw, d.oh * d.ow));
    for c in 0..d.c {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let r = (c * d.kh + i) * d.kw + j;
                let mut row = cols.row_mut(r);
                for y in 0..d.oh {
                    for xx in 0..d.ow {
                        row[y * d.ow + xx] = x[(c * d.h + y + i) * d.w + xx + j];
                    }
                }
            }
        }
    }
    cols
}

/// A convolution's sizes, its input as row-major data and its weights as an O × (C·KH·KW)
/// matrix (the form im2col multiplies).
fn conv_operands(x: &Tensor, k: &Tensor) -> TResult<(ConvDims, Vec<f32>, ndarray::Array2<f32>)> {
    let d = conv_dims(x.shape(), k.shape())?;
    let xs = x.array().as_standard_layout().to_owned().into_raw_vec_and_offset().0;
    let wm = k
        .array()
        .as_standard_layout()
        .to_owned()
        .into_shape_with_order((d.o, d.c * d.kh * d.kw))
        .map_err(|e| e.to_string())?;
    Ok((d, xs, wm))
}

/// Valid (unpadded), stride-1 convolution, NCHW.
pub fn conv2d(x: &Tensor, k: &Tensor) -> TResult<Tensor> {
    let (d, xs, wm) = conv_operands(x, k)?;
    let img = d.c * d.h * d.w;
    let mut out = ndarray::Array3::<f32>::zeros((d.n, d.o, d.oh * d.ow));
    for (n, out_n) in out.outer_iter_mut().enumerate() {
        let cols = im2col(&xs[n * img..(n + 1) * img], &d);
        gemm::gemm(1.0, wm.view(), cols.view(), 0.0, out_n);
    }
    Tensor::from_vec(&[d.n, d.o, d.oh, d.ow], out.into_raw_vec_and_offset().0)
}

/// The adjoints of `conv2d` with respect to its input and its weights.
pub fn conv2d_grads(x: &Tensor, k: &Tensor, g: &Tensor) -> TResult<(Tensor, Tensor)> {
    let (d, xs, wm) = conv_operands(x, k)?;
    let gs = g.array().as_standard_layout().to_owned().into_raw_vec_and_offset().0;
    let img = d.c * d.h * d.w;
    let gimg = d.o * d.oh * d.ow;
    let mut dw = ndarray::Array2::<f32>::zeros((d.o, d.c * d.kh * d.kw));
    let mut dx = vec![0f32; d.n * img];
    for n in 0..d.n {
        let cols = im2col(&xs[n * img..(n + 1) * img], &d);
        let gn = ndarray::ArrayView2::from_shape((d.o, d.oh * d.ow), &gs[n * gimg..(n + 1) * gimg])
            .map_err(|e| e.to_string())?;
        gemm::gemm(1.0, gn, cols.t(), 1.0, dw.view_mut());
        let mut dcols = ndarray::Array2::<f32>::zeros((d.c * d.kh * d.kw, d.oh * d.ow));
        gemm::gemm(1.0, wm.t(), gn, 0.0, dcols.view_mut());
        let dxn = &mut dx[n * img..(n + 1) * img];
        for c in 0..d.c {
            for i in 0..d.kh {
                for j in 0..d.kw {
                    let row = dcols.row((c * d.kh + i) * d.kw + j);
                    for y in 0..d.oh {
                        for xx in 0..d.ow {
                            dxn[(c * d.h + y + i) * d.w + xx + j] += row[y * d.ow + xx];
                        }
                    }
                }
            }
        }
    }
    Ok((Tensor::from_vec(x.shape(), dx)?, Tensor::from_vec(k.shape(), dw.into_raw_vec_and_offset().0)?))
}

/// k×k max pooling with stride k over the last two axes of [N, C, H, W]; with `g`, routes the
/// adjoint back to each window's maximum instead.
pub fn max_pool2d(x: &Tensor, k: usize, g: Option<&Tensor>) -> TResult<Tensor> {
    pool(x, k, g, false)
}

/// For each k×k window of `x`, the element of `t` at the position of the window's maximum
/// (max pooling's forward-mode rule).
pub fn max_pool2d_pick(x: &Tensor, k: usize, t: &Tensor) -> TResult<Tensor> {
    pool(x, k, Some(t), true)
}

fn pool(x: &Tensor, k: usize, g: Option<&Tensor>, pick: bool) -> TResult<Tensor> {
    let s = x.shape();
    if s.len() != 4 || k == 0 || s[2] < k || s[3] < k {
        return Err(format!("max_pool2d {k} needs an input [N, C, H, W] with H, W ≥ {k}; got shape {}", fmt_shape(s)));
    }
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let (oh, ow) = (h / k, w / k);
    let xs = x.array().as_standard_layout().to_owned().into_raw_vec_and_offset().0;
    let gs = g.map(|g| g.array().as_standard_layout().to_owned().into_raw_vec_and_offset().0);
    let scatter = gs.is_some() && !pick;
    let mut out = vec![0f32; if scatter { n * c * h * w } else { n * c * oh * ow }];
    for plane in 0..n * c {
        for y in 0..oh {
            for xx in 0..ow {
                let mut best = (f32::NEG_INFINITY, 0usize);
                for i in 0..k {
                    for j in 0..k {
                        let idx = plane * h * w + (y * k + i) * w + xx * k + j;
                        if xs[idx] > best.0 {
                            best = (xs[idx], idx);
                        }
                    }
                }
                let o = plane * oh * ow + y * ow + xx;
                match &gs {
                    Some(gs) if pick => out[o] = gs[best.1],
                    Some(gs) => out[best.1] += gs[o],
                    None => out[o] = best.0,
                }
            }
        }
    }
    if scatter {
        Tensor::from_vec(s, out)
    } else {
        Tensor::from_vec(&[n, c, oh, ow], out)
    }
}
