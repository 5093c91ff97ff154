//! dp's tensor library (DESIGN.md principle 6): one front (`Tensor`: a shape and a storage)
//! and a backend per device behind `Storage` — the CPU (ndarray and dp's own kernels, `cpu/`)
//! and the GPU (wgpu compute shaders, `gpu/`). The operations are data (`op`: `Un`, `Bin`,
//! `TOp`, each with its name and shape rule) and dispatch on their operands' storage once
//! (`ops::forward`); operands on two devices are an error.
//!
//! This crate knows nothing of the interpreter — no values, no machine, no differentiation —
//! and reports `TensorError`s, which the interpreter turns into its run-time faults. A test in
//! the `dp` crate (tests/layers.rs) holds the line.

pub mod chain;
pub mod cpu;
mod dtype;
mod error;
pub mod gpu;
pub mod npy;
pub mod npz;
pub mod op;
pub mod ops;
pub mod random;
pub mod safetensors;

pub use dtype::{DType, Real};
pub use error::{TResult, TensorError};
pub use op::{Bin, Cmp, TOp, Un};

use cpu::elementwise;
use ndarray::{ArrayD, IxDyn};

/// A tensor's data: on the CPU, one ndarray per dtype; on the GPU, a float32 buffer.
#[derive(Clone, Debug)]
pub enum Storage {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I64(ArrayD<i64>),
    Bool(ArrayD<bool>),
    /// A float32 buffer on the GPU; read back only to print, convert, compare or save.
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

pub fn fmt_shape(s: &[usize]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

/// Applies `$body` to the CPU array of any dtype bound to `$a` (GPU storage is not matched).
macro_rules! each_cpu {
    ($storage:expr, $a:ident => $body:expr, gpu $g:ident => $gpu:expr) => {
        match $storage {
            Storage::F32($a) => $body,
            Storage::F64($a) => $body,
            Storage::I64($a) => $body,
            Storage::Bool($a) => $body,
            Storage::Gpu($g) => $gpu,
        }
    };
}

impl Tensor {
    #[inline]
    pub fn from_array(a: ArrayD<f32>) -> Tensor {
        Tensor { storage: Storage::F32(a) }
    }
    #[inline]
    pub fn from_real<T: Real>(a: ArrayD<T>) -> Tensor {
        Tensor { storage: T::storage(a) }
    }
    #[inline]
    pub fn from_gpu(g: gpu::GpuTensor) -> Tensor {
        Tensor { storage: Storage::Gpu(g) }
    }
    pub fn from_i64s(shape: &[usize], data: Vec<i64>) -> TResult<Tensor> {
        let a = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?;
        Ok(Tensor { storage: Storage::I64(a) })
    }
    pub fn from_bools(shape: &[usize], data: Vec<bool>) -> TResult<Tensor> {
        let a = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?;
        Ok(Tensor { storage: Storage::Bool(a) })
    }
    pub fn from_f64s(shape: &[usize], data: Vec<f64>) -> TResult<Tensor> {
        let a = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?;
        Ok(Tensor { storage: Storage::F64(a) })
    }
    #[inline]
    pub fn dtype(&self) -> DType {
        match self.storage {
            Storage::F32(_) | Storage::Gpu(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::I64(_) => DType::I64,
            Storage::Bool(_) => DType::Bool,
        }
    }
    /// The float32 data as an ndarray (a GPU tensor is read back once; the copy is kept), or
    /// None for another dtype; an error only when a GPU read-back fails.
    #[inline]
    pub fn f32s(&self) -> TResult<Option<&ArrayD<f32>>> {
        Ok(match &self.storage {
            Storage::F32(a) => Some(a),
            Storage::Gpu(g) => Some(g.host()?),
            _ => None,
        })
    }
    /// Every element as an f64, row-major (exact for every dtype but int64 beyond 2^53); an
    /// error only when a GPU read-back fails.
    pub fn to_f64s(&self) -> TResult<Vec<f64>> {
        Ok(each_cpu!(&self.storage, a => a.iter().map(|x| cast::to_f64(*x)).collect(),
                  gpu g => g.host()?.iter().map(|&x| f64::from(x)).collect()))
    }
    /// The int64 data, or None for another dtype.
    pub fn i64s(&self) -> Option<&ArrayD<i64>> {
        match &self.storage {
            Storage::I64(a) => Some(a),
            _ => None,
        }
    }
    /// The bool data, or None for another dtype.
    pub fn bools(&self) -> Option<&ArrayD<bool>> {
        match &self.storage {
            Storage::Bool(a) => Some(a),
            _ => None,
        }
    }
    /// The same values as `dtype` (floats to integers truncate toward zero, as NumPy's
    /// `astype`; NaN and infinities to int64 are an error; nonzero is `true`). A GPU tensor
    /// is read back for any dtype but float32.
    pub fn astype(&self, dtype: DType) -> TResult<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let storage = match dtype {
            DType::F32 => Storage::F32(each_cpu!(&self.storage, a => a.mapv(|x| cast::to_f64(x) as f32),
                gpu g => g.host()?.clone())),
            DType::F64 => Storage::F64(each_cpu!(&self.storage, a => a.mapv(cast::to_f64),
                gpu g => g.host()?.mapv(f64::from))),
            DType::Bool => Storage::Bool(each_cpu!(&self.storage, a => a.mapv(|x| cast::to_f64(x) != 0.0),
                gpu g => g.host()?.mapv(|x| x != 0.0))),
            DType::I64 => {
                let xs = self.to_f64s()?;
                if let Some(i) = xs.iter().position(|x| !x.is_finite() || x.abs() >= 9.223372036854776e18) {
                    return Err(TensorError::new(format!(
                        "astype \"int64\": element {i} is {}, which no int64 holds",
                        xs[i]
                    )));
                }
                match &self.storage {
                    Storage::Bool(a) => Storage::I64(a.mapv(i64::from)),
                    _ => Storage::I64(
                        ArrayD::from_shape_vec(IxDyn(self.shape()), xs.iter().map(|&x| x as i64).collect())
                            .map_err(|e| e.to_string())?,
                    ),
                }
            }
        };
        Ok(Tensor { storage })
    }
    /// The tensor as `T`'s dtype: itself when it already is, else converted (a floating
    /// computation's operand).
    pub fn as_real<T: Real>(t: std::rc::Rc<Tensor>) -> TResult<std::rc::Rc<Tensor>> {
        if t.dtype() == T::DTYPE && !t.is_gpu() {
            return Ok(t);
        }
        Ok(std::rc::Rc::new(t.astype(T::DTYPE)?.to_device(Device::Cpu)?))
    }
    /// Mutable float32 host data, or None for another dtype. A GPU tensor is moved to the CPU
    /// first (GPU code paths never call this; in-place accumulation goes through `add_assign`).
    pub fn f32s_mut(&mut self) -> TResult<Option<&mut ArrayD<f32>>> {
        if let Storage::Gpu(g) = &self.storage {
            self.storage = Storage::F32(g.host()?.clone());
        }
        Ok(match &mut self.storage {
            Storage::F32(a) => Some(a),
            _ => None,
        })
    }
    #[inline]
    pub fn device(&self) -> Device {
        match self.storage {
            Storage::Gpu(_) => Device::Gpu,
            _ => Device::Cpu,
        }
    }
    #[inline]
    pub fn gpu(&self) -> Option<&gpu::GpuTensor> {
        match &self.storage {
            Storage::Gpu(g) => Some(g),
            _ => None,
        }
    }
    /// The float32 CPU data, or None (another dtype, or on the GPU).
    #[inline]
    pub fn cpu(&self) -> Option<&ArrayD<f32>> {
        match &self.storage {
            Storage::F32(a) => Some(a),
            _ => None,
        }
    }
    #[inline]
    pub fn is_gpu(&self) -> bool {
        self.gpu().is_some()
    }
    /// The same tensor on `d` (a copy across devices, or itself). The GPU holds float32 only.
    pub fn to_device(&self, d: Device) -> TResult<Tensor> {
        Ok(match (&self.storage, d) {
            (Storage::F32(a), Device::Gpu) => Tensor::from_gpu(gpu::upload(a)?),
            (Storage::Gpu(g), Device::Cpu) => Tensor::from_array(g.host()?.clone()),
            (Storage::Gpu(_), Device::Gpu) => self.clone(),
            (_, Device::Gpu) => {
                return Err(TensorError::new(format!(
                    "the GPU backend holds float32 tensors only; this one is {}",
                    self.dtype().name()
                ))
                .help("convert it first with `astype \"float32\" t`, or keep it on the CPU"))
            }
            (_, Device::Cpu) => self.clone(),
        })
    }
    /// Where construction builtins put a new tensor: on the default device (`--device`).
    pub fn place(self) -> TResult<Tensor> {
        // int64 and bool tensors stay on the CPU: the GPU holds float32 only (its comparisons
        // give float32 0s and 1s), int64's use there is as `gather`'s indices, which are read
        // on the host, and either reaches the GPU through `astype "float32"`.
        if !self.is_gpu() && !matches!(self.dtype(), DType::I64 | DType::Bool) && gpu::default_is_gpu()? {
            return self.to_device(Device::Gpu);
        }
        Ok(self)
    }
    #[inline]
    pub fn shape(&self) -> &[usize] {
        each_cpu!(&self.storage, a => a.shape(), gpu g => &g.shape)
    }
    #[inline]
    pub fn len(&self) -> usize {
        each_cpu!(&self.storage, a => a.len(), gpu g => g.len())
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::from_array(ArrayD::zeros(IxDyn(shape)))
    }
    pub fn full(shape: &[usize], v: f32) -> Tensor {
        Tensor::from_array(ArrayD::from_elem(IxDyn(shape), v))
    }
    /// A float32 tensor of `shape` filled with `v` on device `d`.
    pub fn full_on(d: Device, shape: &[usize], v: f32) -> TResult<Tensor> {
        match d {
            Device::Cpu => Ok(Tensor::full(shape, v)),
            Device::Gpu => Ok(Tensor::from_gpu(gpu::kernels::full(shape, v)?)),
        }
    }
    /// A tensor of `shape` filled with `v`, of this tensor's floating dtype (an integer or
    /// boolean one gives float32) on its device: the constants of derivative rules.
    pub fn full_like(&self, shape: &[usize], v: f64) -> TResult<Tensor> {
        match self.dtype() {
            DType::F64 => Ok(Tensor::from_real(ArrayD::from_elem(IxDyn(shape), v))),
            _ => Tensor::full_on(self.device(), shape, v as f32),
        }
    }
    /// Zeros of this tensor's shape, floating dtype and device.
    pub fn zeros_like(&self) -> TResult<Tensor> {
        self.full_like(self.shape(), 0.0)
    }
    pub fn from_vec(shape: &[usize], data: Vec<f32>) -> TResult<Tensor> {
        Ok(ArrayD::from_shape_vec(IxDyn(shape), data).map(Tensor::from_array).map_err(|e| e.to_string())?)
    }
    /// An elementwise math function (`sin`, `exp`, `tanh`, ...), on the tensor's device.
    pub fn unary(&self, op: Un) -> TResult<Tensor> {
        match &self.storage {
            Storage::Gpu(g) => gpu::ops::unary(op, g).map(Tensor::from_gpu),
            _ => elementwise::unary(op, std::rc::Rc::new(self.clone())),
        }
    }
    /// Elements clamped to [lo, hi], on the tensor's device.
    pub fn clamp(&self, lo: f32, hi: f32) -> TResult<Tensor> {
        match &self.storage {
            Storage::Gpu(g) => gpu::kernels::unary(gpu::kernels::UnOp::Clamp, g, lo, hi).map(Tensor::from_gpu),
            Storage::F64(a) => Ok(Tensor::from_real(a.mapv(|x| x.clamp(f64::from(lo), f64::from(hi))))),
            Storage::F32(a) => Ok(Tensor::from_array(a.mapv(|x| x.clamp(lo, hi)))),
            _ => {
                let a = Tensor::as_real::<f32>(std::rc::Rc::new(self.clone()))?;
                let a = a.cpu().ok_or_else(|| TensorError::internal("clamp: not float32"))?;
                Ok(Tensor::from_array(a.mapv(|x| x.clamp(lo, hi))))
            }
        }
    }
    /// ln x where x > 0, else 0 (in the derivative of `**` with respect to the exponent), on
    /// the tensor's device.
    pub fn log_or_zero(&self) -> TResult<Tensor> {
        match &self.storage {
            Storage::Gpu(g) => gpu::ops::log_or_zero(g).map(Tensor::from_gpu),
            Storage::F64(a) => Ok(Tensor::from_real(a.mapv(|v| if v > 0.0 { v.ln() } else { 0.0 }))),
            Storage::F32(a) => Ok(Tensor::from_array(a.mapv(|v| if v > 0.0 { v.ln() } else { 0.0 }))),
            _ => {
                let a = Tensor::as_real::<f32>(std::rc::Rc::new(self.clone()))?;
                let a = a.cpu().ok_or_else(|| TensorError::internal("log_or_zero: not float32"))?;
                Ok(Tensor::from_array(a.mapv(|v| if v > 0.0 { v.ln() } else { 0.0 })))
            }
        }
    }
    /// Whether every element is positive (NaN is not); a GPU tensor reads back one value.
    pub fn all_positive(&self) -> TResult<bool> {
        match &self.storage {
            Storage::Gpu(g) => gpu::ops::all_positive(g),
            other => Ok(each_cpu!(other, a => a.iter().all(|&v| cast::to_f64(v) > 0.0), gpu _g => false)),
        }
    }
    /// `self += other` for equal shapes: in place when this tensor owns its data alone and the
    /// dtypes agree (adjoint accumulation), else into a new buffer of the promoted dtype.
    pub fn add_assign(&mut self, other: &Tensor) -> TResult<()> {
        if self.device() != other.device() {
            return Err(TensorError::new(format!(
                "`+`: the operands are on two devices ({} and {}); move one with `to_device`",
                self.device().name(),
                other.device().name()
            )));
        }
        match (&mut self.storage, &other.storage) {
            (Storage::F32(a), Storage::F32(b)) if a.shape() == b.shape() => cpu::elementwise::add_in_place(a, b),
            (Storage::F64(a), Storage::F64(b)) if a.shape() == b.shape() => cpu::elementwise::add_in_place(a, b),
            (Storage::Gpu(g), Storage::Gpu(src)) => match g.unique_mut() {
                Some(dst) => gpu::kernels::accumulate(dst, src)?,
                None => *g = gpu::kernels::binary(Bin::Add, g, src)?,
            },
            _ => {
                let sum = ops::binary(Bin::Add, std::rc::Rc::new(self.clone()), std::rc::Rc::new(other.clone()))?;
                *self = sum;
            }
        }
        Ok(())
    }
    /// `self[…, lo..lo + n, …] += g` along `axis` (n = g's length there), in place: the
    /// reverse rule of `slice` adds into an adjoint buffer this way. False, with nothing
    /// written, unless both are CPU tensors of one floating dtype and `g` fits there.
    pub fn add_into_slice(&mut self, axis: usize, lo: usize, g: &Tensor) -> bool {
        match (&mut self.storage, &g.storage) {
            (Storage::F32(a), Storage::F32(b)) => cpu::layout::add_into_slice(a, axis, lo, b),
            (Storage::F64(a), Storage::F64(b)) => cpu::layout::add_into_slice(a, axis, lo, b),
            _ => false,
        }
    }
    /// The position of the first largest element (row-major), None when empty; a GPU tensor
    /// reads back only the index. NaN is the largest (as NumPy's `argmax`).
    pub fn argmax(&self) -> TResult<Option<usize>> {
        match &self.storage {
            Storage::Gpu(g) => gpu::kernels::argmax_index(g),
            Storage::F32(a) => Ok(cpu::argmax(a)),
            Storage::F64(a) => Ok(cpu::argmax(a)),
            _ => Ok(cpu::argmax(
                &ArrayD::from_shape_vec(IxDyn(self.shape()), self.to_f64s()?).map_err(|e| e.to_string())?,
            )),
        }
    }
    /// Whether some element is nonzero (true; NaN counts, as NumPy's `any`); false when
    /// empty. A GPU tensor reads back one value.
    pub fn any(&self) -> TResult<bool> {
        match &self.storage {
            Storage::Gpu(g) => gpu::ops::any_nonzero(g, false),
            other => Ok(each_cpu!(other, a => a.iter().any(|&v| cast::to_f64(v) != 0.0), gpu _g => false)),
        }
    }
    /// Whether every element is nonzero (true); true when empty.
    pub fn all(&self) -> TResult<bool> {
        match &self.storage {
            Storage::Gpu(g) => gpu::ops::any_nonzero(g, true).map(|zero| !zero),
            other => Ok(each_cpu!(other, a => a.iter().all(|&v| cast::to_f64(v) != 0.0), gpu _g => true)),
        }
    }
    /// The elements as float32 values, row-major (the crate's tests).
    #[cfg(test)]
    pub(crate) fn data(&self) -> Vec<f32> {
        self.to_f64s().expect("a CPU tensor's values").into_iter().map(|x| x as f32).collect()
    }
}

/// Conversions of any element type to f64.
pub(crate) mod cast {
    pub trait ToF64: Copy {
        fn to_f64(self) -> f64;
    }
    impl ToF64 for f32 {
        #[inline]
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
    }
    impl ToF64 for f64 {
        #[inline]
        fn to_f64(self) -> f64 {
            self
        }
    }
    impl ToF64 for i64 {
        #[inline]
        fn to_f64(self) -> f64 {
            self as f64
        }
    }
    impl ToF64 for bool {
        #[inline]
        fn to_f64(self) -> f64 {
            f64::from(u8::from(self))
        }
    }
    #[inline]
    pub fn to_f64<T: ToF64>(x: T) -> f64 {
        x.to_f64()
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
            _ => {
                return Err(TensorError::new(format!(
                    "shapes {} and {} cannot be broadcast together",
                    fmt_shape(a),
                    fmt_shape(b)
                )))
            }
        };
    }
    Ok(out)
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
