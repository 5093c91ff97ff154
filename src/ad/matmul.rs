//! The reverse rule of `@` on the CPU, done where the data is: adjoints of matrix products go
//! straight into the adjoint buffers, and outer products wait to be summed as one product.
//! `backward` tries this first for a `MatMul` frame; the generic rule (`tensor::vjp`) covers every
//! other case (GPU operands, higher-order derivatives, shared adjoint buffers).

use super::Host;
use super::{accumulate, Tracked};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::Tensor;
use std::rc::Rc;

/// The matrix product's adjoint for input `i` without temporaries: dA += G Bᵀ and dB += Aᵀ G go
/// straight into the adjoint buffer (transposes are strided views), and outer products
/// (matrix-vector products) wait in `outer` to be summed in one go. Only the first-order case
/// on the CPU qualifies (plain operands, an adjoint buffer nobody else holds, a host that
/// multiplies in place); false leaves the input to the generic rule.
pub(super) fn adjoint_into<H: Host>(
    m: &mut H,
    primals: &[Value],
    g: &Value,
    i: usize,
    cell: &Rc<Tracked>,
    outer: &mut OuterSums,
) -> FResult<bool> {
    let (Value::Tensor(a), Value::Tensor(b), Value::Tensor(g)) = (&primals[0], &primals[1], g) else {
        return Ok(false);
    };
    // Only float32 CPU operands qualify (the fused kernels are float32's).
    if a.cpu().is_none() || b.cpu().is_none() || g.cpu().is_none() {
        return Ok(false);
    }
    match (i, a.shape().len(), b.shape().len()) {
        // A @ b with b a vector: dA += g ⊗ b.  a @ B with a a vector: dB += a ⊗ g.
        (0, 2, 1) => return Ok(outer.push(cell, g.clone(), b.clone())),
        (1, 1, 2) => return Ok(outer.push(cell, a.clone(), g.clone())),
        _ => {}
    }
    // The contribution x' @ y' (x' = x, or its transpose with tx; likewise y').
    let (x, tx, y, ty) = match (i, a.shape().len(), b.shape().len()) {
        (0, 2, 2) => (g, false, b, true),
        (1, 2, 2) => (a, true, g, false),
        // A @ b: db += Aᵀ g (g as a row times A).  a @ B: da += B g.
        (1, 2, 1) => (g, false, a, false),
        (0, 1, 2) => (b, false, g, false),
        // Stacks of matrices with the same batch axes (broadcast ones are left to the
        // generic rule, which sums over the broadcast axes): the transposes are read in place.
        (0, r, s) if r > 2 && r == s => (g, false, b, true),
        (1, r, s) if r > 2 && r == s => (a, true, g, false),
        _ => return Ok(false),
    };
    let shape = if i == 0 { a.shape() } else { b.shape() };
    let mut slot = cell.adj.borrow_mut();
    match slot.take() {
        // The first contribution is the adjoint: a new product, not one added to zeros.
        None => match m.product(shape, x, tx, y, ty)? {
            Some(t) => {
                *slot = Some(Value::Tensor(Rc::new(t)));
                Ok(true)
            }
            None => Ok(false),
        },
        Some(Value::Tensor(mut target)) if target.cpu().is_some() && target.shape() == shape => {
            let done = match Rc::get_mut(&mut target) {
                Some(buf) => m.product_into(buf, x, tx, y, ty, 1.0),
                None => Ok(false),
            };
            // A refusal writes nothing (shapes are checked first), so the buffer goes back as is.
            *slot = Some(Value::Tensor(target));
            done
        }
        other => {
            *slot = other;
            Ok(false)
        }
    }
}

/// Outer-product adjoints (dW += u ⊗ v, from matrix-vector products), collected per input
/// during one backward pass and summed as a single matrix product (Uᵀ V) when that input's
/// adjoint is next needed. A recursive model applies the same weights at every node: one
/// compute-bound product replaces a memory-bound rank-1 update of the whole matrix per node.
type OuterPair = (Rc<Tensor>, Rc<Tensor>);

#[derive(Default)]
pub(super) struct OuterSums {
    /// The few distinct weight cells of a model, each with its pending (u, v) pairs.
    cells: Vec<(Rc<Tracked>, Vec<OuterPair>)>,
}

impl OuterSums {
    pub(super) fn push(&mut self, cell: &Rc<Tracked>, u: Rc<Tensor>, v: Rc<Tensor>) -> bool {
        match self.cells.iter_mut().find(|(c, _)| Rc::ptr_eq(c, cell)) {
            Some((_, pairs)) => pairs.push((u, v)),
            None => self.cells.push((cell.clone(), vec![(u, v)])),
        }
        true
    }

    /// Adds `cell`'s pending products to its adjoint (before the adjoint is read).
    pub(super) fn flush<H: Host>(&mut self, m: &mut H, cell: &Tracked) -> FResult<()> {
        if self.cells.is_empty() {
            return Ok(());
        }
        match self.cells.iter().position(|(c, _)| std::ptr::eq(&**c, cell)) {
            Some(k) => {
                let (cell, pairs) = self.cells.swap_remove(k);
                let sum = outer_sum(m, &pairs)?;
                accumulate(m, &cell, sum)
            }
            None => Ok(()),
        }
    }

    pub(super) fn flush_all<H: Host>(&mut self, m: &mut H) -> FResult<()> {
        for (cell, pairs) in std::mem::take(&mut self.cells) {
            let sum = outer_sum(m, &pairs)?;
            accumulate(m, &cell, sum)?;
        }
        Ok(())
    }
}

/// Σ uₖ ⊗ vₖ as Uᵀ V, with the vectors stacked as the rows of U and V.
fn outer_sum<H: Host>(m: &mut H, pairs: &[OuterPair]) -> FResult<Value> {
    let stack = |pick: fn(&OuterPair) -> &Rc<Tensor>| -> FResult<Tensor> {
        let n = pick(&pairs[0]).len();
        let mut data = Vec::with_capacity(n * pairs.len());
        for p in pairs {
            let a = pick(p).cpu().ok_or_else(|| Fault::internal("an outer product of a non-float32 tensor"))?;
            if a.len() != n {
                return Err(Fault::internal("outer products of different shapes"));
            }
            match a.as_slice() {
                Some(s) => data.extend_from_slice(s),
                None => data.extend(a.iter().copied()),
            }
        }
        Ok(Tensor::from_vec(&[pairs.len(), n], data)?)
    };
    let (u, v) = (stack(|p| &p.0)?, stack(|p| &p.1)?);
    let mut out = Tensor::zeros(&[u.shape()[1], v.shape()[1]]);
    if m.product_into(&mut out, &u, true, &v, false, 0.0)? {
        return Ok(Value::Tensor(Rc::new(out)));
    }
    // A host that cannot multiply in place gets the same sum as an ordinary product.
    let ut = m.forward(&crate::tensor::TOp::Transpose, &[Value::Tensor(Rc::new(u))])?;
    m.forward(&crate::tensor::TOp::MatMul, &[ut, Value::Tensor(Rc::new(v))])
}
