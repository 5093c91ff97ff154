//! Indexing by an int64 tensor (`TOp::Gather`, NumPy's `take` along an axis) and its
//! adjoint, the scatter-add (`TOp::ScatterAdd`). Indices count from the end when negative,
//! as NumPy's; one out of range is the program's error. The indices stay on the CPU (no GPU
//! holds int64): they are checked here, and a GPU tensor is gathered from (or scattered into)
//! by the GPU's kernels at the positions they name.

use crate::op::TOp;
use crate::{fmt_shape, Real, Storage, TResult, Tensor, TensorError};
use ndarray::{ArrayD, IxDyn};

/// The positions along an axis of length `n` that `indices` name, checked.
fn positions(indices: &ArrayD<i64>, n: usize, shape: &[usize], axis: usize) -> TResult<Vec<usize>> {
    indices
        .iter()
        .map(|&i| {
            let p = if i < 0 { i + n as i64 } else { i };
            usize::try_from(p).ok().filter(|&p| p < n).ok_or_else(|| {
                TensorError::new(format!(
                    "gather: index {i} is out of range for axis {axis} of a tensor of shape {}",
                    fmt_shape(shape)
                ))
            })
        })
        .collect()
}

/// `t`'s slices along `axis` at `pos`, that axis replaced by the indices' shape: for each
/// position before the axis, the picked runs of `inner` contiguous elements (an embedding's
/// rows) copied whole.
fn take<T: Copy>(t: &ArrayD<T>, axis: usize, pos: &[usize], ishape: &[usize]) -> TResult<ArrayD<T>> {
    let shape: Vec<usize> = t.shape()[..axis].iter().chain(ishape).chain(&t.shape()[axis + 1..]).copied().collect();
    let t = t.as_standard_layout();
    let data = t.as_slice().ok_or_else(|| TensorError::internal("gather: a standard layout is not contiguous"))?;
    let (n, inner) = (t.shape()[axis], t.shape()[axis + 1..].iter().product::<usize>());
    let mut out = Vec::with_capacity(shape.iter().product());
    for block in data.chunks_exact((n * inner).max(1)) {
        for &p in pos {
            out.extend_from_slice(&block[p * inner..(p + 1) * inner]);
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?)
}

/// Zeros of `shape` with `g`'s slices (g laid out as `take`'s result) added at `pos`: each
/// output element takes its additions in the order of the positions that name it.
fn scatter_add<T: Real>(g: &ArrayD<T>, axis: usize, pos: &[usize], shape: &[usize]) -> TResult<ArrayD<T>> {
    let g = g.as_standard_layout();
    let gs = g.as_slice().ok_or_else(|| TensorError::internal("scatter-add: a standard layout is not contiguous"))?;
    let (n, inner) = (shape[axis], shape[axis + 1..].iter().product::<usize>());
    let mut out = vec![T::zero(); shape.iter().product()];
    let picked = pos.len() * inner;
    if n * inner > 0 && picked > 0 {
        for (block, from) in out.chunks_exact_mut(n * inner).zip(gs.chunks_exact(picked)) {
            for (&p, src) in pos.iter().zip(from.chunks_exact(inner)) {
                for (d, &x) in block[p * inner..(p + 1) * inner].iter_mut().zip(src) {
                    *d += x;
                }
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| e.to_string())?)
}

/// `Gather` or `ScatterAdd` of (t, indices) along `axis`.
pub fn forward(op: &TOp, axis: usize, args: &[&Tensor]) -> TResult<Storage> {
    let [t, indices] = args else {
        return Err(TensorError::internal(format!("{} takes two operands", op.name())));
    };
    if indices.is_gpu() {
        return Err(TensorError::new(
            "gather: the indices must be an int64 tensor, which stays on the CPU; these are a float32 GPU tensor",
        )
        .help("convert them with `astype \"int64\" (to_device \"cpu\" i)`"));
    }
    let Some(ix) = indices.i64s() else {
        return Err(TensorError::new(format!(
            "gather: the indices must be an int64 tensor, got {}",
            indices.dtype().name()
        ))
        .help("make them with `tensor [0, 2]`, or convert with `astype \"int64\" i`"));
    };
    match op {
        TOp::Gather(_) => {
            let pos = positions(ix, t.shape()[axis], t.shape(), axis)?;
            Ok(match &t.storage {
                Storage::F32(a) => Storage::F32(take(a, axis, &pos, ix.shape())?),
                Storage::F64(a) => Storage::F64(take(a, axis, &pos, ix.shape())?),
                Storage::I64(a) => Storage::I64(take(a, axis, &pos, ix.shape())?),
                Storage::Bool(a) => Storage::Bool(take(a, axis, &pos, ix.shape())?),
                Storage::Gpu(g) => Storage::Gpu(crate::gpu::kernels::gather(g, axis, &pos, ix.shape())?),
            })
        }
        TOp::ScatterAdd(_, shape) => {
            let pos = positions(ix, shape[axis], shape, axis)?;
            Ok(match &t.storage {
                Storage::F64(a) => Storage::F64(scatter_add(a, axis, &pos, shape)?),
                Storage::Gpu(g) => Storage::Gpu(crate::gpu::kernels::scatter_add(g, axis, &pos, shape)?),
                _ => {
                    let g = t.astype(crate::DType::F32)?;
                    let a = g.cpu().ok_or_else(|| TensorError::internal("scatter-add: not float32"))?;
                    Storage::F32(scatter_add(a, axis, &pos, shape)?)
                }
            })
        }
        other => Err(TensorError::internal(format!("{} is not an indexing operation", other.name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_its_adjoint_as_numpy() {
        // np.take(np.arange(6).reshape(2, 3), [[2, -3]], axis=1) is [[[2, 0]], [[5, 3]]].
        let t = ArrayD::from_shape_vec(IxDyn(&[2, 3]), (0..6).collect::<Vec<i64>>()).unwrap();
        let ix = ArrayD::from_shape_vec(IxDyn(&[1, 2]), vec![2i64, -3]).unwrap();
        let pos = positions(&ix, 3, &[2, 3], 1).unwrap();
        let r = take(&t, 1, &pos, ix.shape()).unwrap();
        assert_eq!(r.shape(), &[2, 1, 2]);
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), vec![2, 0, 5, 3]);
        let g = ArrayD::from_elem(IxDyn(&[2, 1, 2]), 1.0f64);
        let s = scatter_add(&g, 1, &[0, 0], &[2, 3]).unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![2.0, 0.0, 0.0, 2.0, 0.0, 0.0]);
        assert!(positions(&ix, 2, &[2, 2], 1).is_err());
    }

    #[test]
    fn take_copies_whole_runs_and_its_adjoint_adds_them_back_in_order() {
        // An axis between others: [2, 3, 4] at positions [2, 0, 2] of axis 1, against
        // ndarray's `select`; the scatter-add of ones counts how often each slice was picked.
        let t = ArrayD::from_shape_vec(IxDyn(&[2, 3, 4]), (0..24).map(|i| i as f32).collect()).unwrap();
        let pos = [2, 0, 2];
        let r = take(&t, 1, &pos, &[3]).unwrap();
        assert_eq!(r, t.select(ndarray::Axis(1), &pos));
        let s = scatter_add(&r.mapv(|_| 1.0f32), 1, &pos, &[2, 3, 4]).unwrap();
        let counts: Vec<f32> = s.iter().step_by(4).copied().collect();
        assert_eq!(counts, vec![1.0, 0.0, 2.0, 1.0, 0.0, 2.0]);
        // Empty index tensors and empty slices.
        assert_eq!(take(&t, 1, &[], &[0]).unwrap().shape(), &[2, 0, 4]);
        let e = ArrayD::<f32>::zeros(IxDyn(&[2, 3, 0]));
        assert_eq!(take(&e, 1, &pos, &[3]).unwrap().shape(), &[2, 3, 0]);
        let none = scatter_add(&ArrayD::<f32>::zeros(IxDyn(&[2, 0, 4])), 1, &[], &[2, 3, 4]).unwrap();
        assert_eq!(none, ArrayD::<f32>::zeros(IxDyn(&[2, 3, 4])));
    }
}
