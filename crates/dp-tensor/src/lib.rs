//! dp's tensor library (DESIGN.md principle 6): one front (`Tensor`: a shape and a storage)
//! and a backend per device behind `Storage` — the CPU (ndarray and dp's own kernels, `cpu/`)
//! and the GPU (wgpu compute shaders, `gpu/`). The operations are data (`op`: `Un`, `Bin`,
//! `TOp`, each with its name and shape rule) and dispatch on their operands' storage once
//! (`ops::forward`); operands on two devices are an error.
//!
//! This crate knows nothing of the interpreter — no values, no machine, no differentiation —
//! and reports `TensorError`s, which the interpreter turns into its run-time faults. A test in
//! the `dp` crate (tests/layers.rs) holds the line.

pub mod cpu;
mod error;
pub mod gpu;
pub mod npy;
pub mod npz;
pub mod op;
pub mod ops;
pub mod safetensors;

pub use error::{TResult, TensorError};
pub use op::{Bin, TOp, Un};

use cpu::elementwise;
use ndarray::{ArrayD, IxDyn};

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

pub fn fmt_shape(s: &[usize]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl Tensor {
    #[inline]
    pub fn from_array(a: ArrayD<f32>) -> Tensor {
        Tensor { storage: Storage::Cpu(a) }
    }
    #[inline]
    pub fn from_gpu(g: gpu::GpuTensor) -> Tensor {
        Tensor { storage: Storage::Gpu(g) }
    }
    /// The data as an ndarray: a GPU tensor is read back (once; the copy is kept).
    #[inline]
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
    #[inline]
    pub fn device(&self) -> Device {
        match self.storage {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Gpu(_) => Device::Gpu,
        }
    }
    #[inline]
    pub fn gpu(&self) -> Option<&gpu::GpuTensor> {
        match &self.storage {
            Storage::Gpu(g) => Some(g),
            Storage::Cpu(_) => None,
        }
    }
    #[inline]
    pub fn cpu(&self) -> Option<&ArrayD<f32>> {
        match &self.storage {
            Storage::Cpu(a) => Some(a),
            Storage::Gpu(_) => None,
        }
    }
    #[inline]
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
    #[inline]
    pub fn shape(&self) -> &[usize] {
        match &self.storage {
            Storage::Cpu(a) => a.shape(),
            Storage::Gpu(g) => &g.shape,
        }
    }
    #[inline]
    pub fn len(&self) -> usize {
        match &self.storage {
            Storage::Cpu(a) => a.len(),
            Storage::Gpu(g) => g.len(),
        }
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
        Ok(ArrayD::from_shape_vec(IxDyn(shape), data).map(Tensor::from_array).map_err(|e| e.to_string())?)
    }
    /// An elementwise math function (`sin`, `exp`, `tanh`, ...), on the tensor's device.
    pub fn unary(&self, op: Un) -> TResult<Tensor> {
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
            return Err(TensorError::new(format!(
                "`+`: the operands are on two devices ({} and {}); move one with `to_device`",
                self.device().name(),
                other.device().name()
            )));
        }
        match &mut self.storage {
            Storage::Cpu(a) => *a += other.array(),
            Storage::Gpu(g) => {
                let src = other.gpu().ok_or_else(|| TensorError::internal("device mismatch"))?;
                match g.unique_mut() {
                    Some(dst) => gpu::kernels::accumulate(dst, src)?,
                    None => *g = gpu::kernels::binary(Bin::Add, g, src)?,
                }
            }
        }
        Ok(())
    }
    /// The position of the first largest element (row-major), None when empty; a GPU tensor
    /// reads back only the index.
    pub fn argmax(&self) -> TResult<Option<usize>> {
        match &self.storage {
            Storage::Cpu(a) => Ok(cpu::argmax(a)),
            Storage::Gpu(g) => gpu::kernels::argmax_index(g),
        }
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
