//! Element types. A tensor's dtype is a run-time property (LANGUAGE.md, "Element types"):
//! `float32` (every constructor's default, and the only one the GPU holds), `float64`, `int64`
//! and `bool`. The floating dtypes share one set of CPU kernels, generic over `Real`; the
//! integer and boolean ones have their own arithmetic and the layout operations (reshape,
//! slicing, …), and the other operations compute in a floating dtype (`DType::float_for`).

use crate::cpu::gemm;
use crate::op::Un;
use crate::{Storage, Tensor};
use ndarray::{ArrayD, ArrayView1, ArrayView2, ArrayViewMut1, ArrayViewMut2};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I64,
    Bool,
}

impl DType {
    /// The name a program uses (`dtype t`, `astype "float64" t`), as NumPy's.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::Bool => "bool",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "float32" => DType::F32,
            "float64" => DType::F64,
            "int64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// The dtype of arithmetic between tensors of these dtypes, as JAX promotes: a floating
    /// dtype wins over `int64` and `bool`, `float64` over `float32`, `int64` over `bool`.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        match (a, b) {
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (I64, _) | (_, I64) => I64,
            (Bool, Bool) => Bool,
        }
    }

    /// The floating dtype an operation defined on reals computes in for this dtype: a floating
    /// dtype is kept, an integer or boolean one becomes the default, `float32` (as `jnp.sin`
    /// of an integer array is float32).
    pub fn float_for(self) -> DType {
        if self == DType::F64 {
            DType::F64
        } else {
            DType::F32
        }
    }
}

/// A floating element type: the CPU kernels are written once over it.
pub trait Real:
    num_traits::Float
    + num_traits::FromPrimitive
    + ndarray::LinalgScalar
    + ndarray::ScalarOperand
    + std::ops::AddAssign
    + std::fmt::Debug
    + Default
    + Send
    + Sync
    + 'static
{
    const DTYPE: DType;
    /// This dtype's CPU storage of `t`, if it is stored so.
    fn of(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn storage(a: ArrayD<Self>) -> Storage;
    /// The storage's array when it is this dtype's, else the storage back.
    fn take(s: Storage) -> Result<ArrayD<Self>, Storage>;
    /// `op` on one element (f32 uses `vmath`'s vectorizable exp/tanh/sigmoid).
    fn un(op: Un, x: Self) -> Self;
    /// c = alpha · a b + beta · c (any strides).
    fn gemm(alpha: Self, a: ArrayView2<Self>, b: ArrayView2<Self>, beta: Self, c: ArrayViewMut2<Self>);
    /// `gemm` on this thread only (a product of a batch spread over the threads).
    fn gemm_serial(alpha: Self, a: ArrayView2<Self>, b: ArrayView2<Self>, beta: Self, c: ArrayViewMut2<Self>);
    /// y = alpha · a x + beta · y.
    fn gemv(alpha: Self, a: ArrayView2<Self>, x: ArrayView1<Self>, beta: Self, y: ArrayViewMut1<Self>);
    fn of_f64(x: f64) -> Self;
}

impl Real for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn of(t: &Tensor) -> Option<&ArrayD<f32>> {
        match &t.storage {
            Storage::F32(a) => Some(a),
            _ => None,
        }
    }
    #[inline]
    fn storage(a: ArrayD<f32>) -> Storage {
        Storage::F32(a)
    }
    #[inline]
    fn take(s: Storage) -> Result<ArrayD<f32>, Storage> {
        match s {
            Storage::F32(a) => Ok(a),
            other => Err(other),
        }
    }
    #[inline(always)]
    fn un(op: Un, x: f32) -> f32 {
        match op {
            Un::Exp => crate::cpu::vmath::exp(x),
            Un::Tanh => crate::cpu::vmath::tanh(x),
            Un::Sigmoid => crate::cpu::vmath::sigmoid(x),
            // Float32's own (musl's erff, under an ulp), not f64's rounded: no f64 round trip.
            Un::Erf => libm::erff(x),
            Un::Gelu | Un::GeluGrad => {
                let s = crate::cpu::vmath::sigmoid(2.0 * crate::op::gelu_arg(x));
                crate::op::gelu_by_sigmoid(x, s, op == Un::GeluGrad)
            }
            _ => op.eval(x),
        }
    }
    fn gemm(alpha: f32, a: ArrayView2<f32>, b: ArrayView2<f32>, beta: f32, c: ArrayViewMut2<f32>) {
        gemm::gemm(alpha, a, b, beta, c)
    }
    fn gemm_serial(alpha: f32, a: ArrayView2<f32>, b: ArrayView2<f32>, beta: f32, c: ArrayViewMut2<f32>) {
        gemm::gemm_serial(alpha, a, b, beta, c)
    }
    fn gemv(alpha: f32, a: ArrayView2<f32>, x: ArrayView1<f32>, beta: f32, y: ArrayViewMut1<f32>) {
        gemm::gemv(alpha, a, x, beta, y)
    }
    #[inline]
    fn of_f64(x: f64) -> f32 {
        x as f32
    }
}

impl Real for f64 {
    const DTYPE: DType = DType::F64;
    #[inline]
    fn of(t: &Tensor) -> Option<&ArrayD<f64>> {
        match &t.storage {
            Storage::F64(a) => Some(a),
            _ => None,
        }
    }
    #[inline]
    fn storage(a: ArrayD<f64>) -> Storage {
        Storage::F64(a)
    }
    #[inline]
    fn take(s: Storage) -> Result<ArrayD<f64>, Storage> {
        match s {
            Storage::F64(a) => Ok(a),
            other => Err(other),
        }
    }
    #[inline(always)]
    fn un(op: Un, x: f64) -> f64 {
        match op {
            Un::Exp => crate::cpu::vmath::f64s::exp(x),
            Un::Tanh => crate::cpu::vmath::f64s::tanh(x),
            _ => op.eval(x),
        }
    }
    // float64 products go through ndarray's (matrixmultiply's) dgemm: dp's own micro-kernels
    // are float32's, the dtype of every model's weights; float64 is for accuracy checks. An
    // outer product (inner dimension 1) is a direct loop instead (cpu/direct.rs).
    //
    // With beta ≠ 0 (a staged gradient's `acc + x @ y`, one call), the product is computed on
    // its own and then added: matrixmultiply adds each block of the inner dimension into c as
    // it goes, so for an inner dimension longer than one block (256) it would compute
    // (acc + p₁) + p₂ where the operations one by one compute acc + (p₁ + p₂).
    fn gemm(alpha: f64, a: ArrayView2<f64>, b: ArrayView2<f64>, beta: f64, mut c: ArrayViewMut2<f64>) {
        if crate::cpu::direct::rank1(alpha, &a, &b, beta, &mut c) {
            return;
        }
        if beta == 0.0 {
            ndarray::linalg::general_mat_mul(alpha, &a, &b, beta, &mut c)
        } else {
            let mut p = ndarray::Array2::<f64>::zeros(c.dim());
            ndarray::linalg::general_mat_mul(alpha, &a, &b, 0.0, &mut p);
            c.zip_mut_with(&p, |c, &p| *c = beta * *c + p);
        }
    }
    // matrixmultiply runs on the calling thread already.
    fn gemm_serial(alpha: f64, a: ArrayView2<f64>, b: ArrayView2<f64>, beta: f64, c: ArrayViewMut2<f64>) {
        Self::gemm(alpha, a, b, beta, c)
    }
    fn gemv(alpha: f64, a: ArrayView2<f64>, x: ArrayView1<f64>, beta: f64, mut y: ArrayViewMut1<f64>) {
        if !crate::cpu::direct::gemv(alpha, &a, &x, beta, &mut y) {
            ndarray::linalg::general_mat_vec_mul(alpha, &a, &x, beta, &mut y)
        }
    }
    #[inline]
    fn of_f64(x: f64) -> f64 {
        x
    }
}
