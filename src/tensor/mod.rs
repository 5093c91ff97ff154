//! Tensors: one front (shape + storage) and backends behind `Storage` (DESIGN.md principle 6).
//! Only the CPU backend (ndarray) exists so far; every operation dispatches on the storage of
//! its operands, so a GPU variant can be added without touching the front.

pub mod builtins;
pub mod npy;
pub mod ops;
pub mod tree;

use ndarray::{ArrayD, Axis, IxDyn};

#[derive(Clone, Debug)]
pub enum Storage {
    Cpu(ArrayD<f32>),
}

#[derive(Clone, Debug)]
pub struct Tensor {
    pub storage: Storage,
}

pub type TResult<T> = Result<T, String>;

pub fn fmt_shape(s: &[usize]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl Tensor {
    pub fn from_array(a: ArrayD<f32>) -> Tensor {
        Tensor { storage: Storage::Cpu(a) }
    }
    pub fn array(&self) -> &ArrayD<f32> {
        match &self.storage {
            Storage::Cpu(a) => a,
        }
    }
    pub fn array_mut(&mut self) -> &mut ArrayD<f32> {
        match &mut self.storage {
            Storage::Cpu(a) => a,
        }
    }
    pub fn shape(&self) -> &[usize] {
        self.array().shape()
    }
    pub fn len(&self) -> usize {
        self.array().len()
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
    pub fn from_vec(shape: &[usize], data: Vec<f32>) -> TResult<Tensor> {
        ArrayD::from_shape_vec(IxDyn(shape), data).map(Tensor::from_array).map_err(|e| e.to_string())
    }
    pub fn map(&self, f: impl Fn(f32) -> f32) -> Tensor {
        Tensor::from_array(self.array().mapv(f))
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

/// Elementwise binary operation with NumPy broadcasting.
pub fn zip_with(a: &Tensor, b: &Tensor, f: impl Fn(f32, f32) -> f32) -> TResult<Tensor> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    let (x, y) = (a.array(), b.array());
    if x.shape() == y.shape() {
        let mut out = x.clone();
        out.zip_mut_with(y, |p, q| *p = f(*p, *q));
        return Ok(Tensor::from_array(out));
    }
    let xb = x.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let yb = y.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let mut out = xb.to_owned();
    out.zip_mut_with(&yb, |p, q| *p = f(*p, *q));
    Ok(Tensor::from_array(out))
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
    use ndarray::{Ix1, Ix2};
    let (x, y) = (a.array(), b.array());
    let err = || {
        format!(
            "matrix product of shapes {} and {}: inner dimensions differ",
            fmt_shape(x.shape()),
            fmt_shape(y.shape())
        )
    };
    match (x.ndim(), y.ndim()) {
        (2, 2) => {
            let (p, q) =
                (x.view().into_dimensionality::<Ix2>().unwrap(), y.view().into_dimensionality::<Ix2>().unwrap());
            if p.ncols() != q.nrows() {
                return Err(err());
            }
            Ok(Tensor::from_array(p.dot(&q).into_dyn()))
        }
        (2, 1) => {
            let (p, q) =
                (x.view().into_dimensionality::<Ix2>().unwrap(), y.view().into_dimensionality::<Ix1>().unwrap());
            if p.ncols() != q.len() {
                return Err(err());
            }
            Ok(Tensor::from_array(p.dot(&q).into_dyn()))
        }
        (1, 2) => {
            let (p, q) =
                (x.view().into_dimensionality::<Ix1>().unwrap(), y.view().into_dimensionality::<Ix2>().unwrap());
            if p.len() != q.nrows() {
                return Err(err());
            }
            Ok(Tensor::from_array(p.dot(&q).into_dyn()))
        }
        (1, 1) => {
            let (p, q) =
                (x.view().into_dimensionality::<Ix1>().unwrap(), y.view().into_dimensionality::<Ix1>().unwrap());
            if p.len() != q.len() {
                return Err(err());
            }
            Ok(Tensor::from_array(ArrayD::from_elem(IxDyn(&[]), p.dot(&q))))
        }
        _ => Err(format!(
            "`@` multiplies matrices and vectors; got shapes {} and {}",
            fmt_shape(x.shape()),
            fmt_shape(y.shape())
        )),
    }
}

/// Reverses the axes (the usual transpose for matrices).
pub fn transpose(a: &Tensor) -> Tensor {
    Tensor::from_array(a.array().t().as_standard_layout().to_owned())
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
