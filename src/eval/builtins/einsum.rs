//! `einsum "spec" [a, b, …]` (LANGUAGE.md "Tensors, continued", Products): the spec is checked
//! against the operands' shapes at run time (`Spec::parse`), then lowered to operations that
//! already have derivative rules (`lower`): a diagonal is a product with an identity and a sum,
//! an index no one else needs is summed at once, each further operand is contracted into the
//! running result as one (batched) matrix product — or a broadcast product when nothing is
//! contracted — and the result's axes are put in the output's order. So `grad`, `jvp` and their
//! nestings through `einsum` need nothing of their own, on either device.

use crate::ad;
use crate::core::Prim;
use crate::eval::machine::Machine;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{fmt_shape, TOp, Tensor};
use std::collections::BTreeMap;

pub fn call(m: &mut Machine, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    let text = arg().as_str()?;
    let operands: Vec<Value> = arg().iter_list().cloned().collect();
    let shapes: Vec<Vec<usize>> = operands.iter().map(ad::shape_of).collect();
    let spec = Spec::parse(&text, &shapes).map_err(|e| Fault::new(format!("einsum \"{text}\": {e}")))?;
    lower(m, &spec, operands)
}

/// A checked spec: each operand's indices, the output's, and every index's size.
#[derive(Debug, PartialEq)]
pub struct Spec {
    pub inputs: Vec<Vec<char>>,
    pub output: Vec<char>,
    pub sizes: BTreeMap<char, usize>,
}

impl Spec {
    /// Parses `text` (letters, commas and one `->`; spaces ignored) against the operands'
    /// shapes. The error says what is wrong in the program's terms.
    pub fn parse(text: &str, shapes: &[Vec<usize>]) -> Result<Spec, String> {
        let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let Some((lhs, rhs)) = text.split_once("->") else {
            return Err("the spec needs an explicit output after `->` (as in \"ij,jk->ik\")".into());
        };
        if text.contains("...") {
            return Err("`...` (implicit broadcast axes) is not supported: name every axis".into());
        }
        let indices = |s: &str| -> Result<Vec<char>, String> {
            match s.chars().find(|c| !c.is_ascii_alphabetic()) {
                Some(c) => Err(format!("unexpected `{c}`: indices are letters, operands are separated by `,`")),
                None => Ok(s.chars().collect()),
            }
        };
        if shapes.is_empty() {
            return Err("einsum needs at least one tensor".into());
        }
        let inputs = lhs.split(',').map(indices).collect::<Result<Vec<_>, _>>()?;
        let output = indices(rhs)?;
        if inputs.len() != shapes.len() {
            return Err(format!(
                "the spec names {} operand{} but {} tensor{} given",
                inputs.len(),
                if inputs.len() == 1 { "" } else { "s" },
                shapes.len(),
                if shapes.len() == 1 { " is" } else { "s are" }
            ));
        }
        let mut sizes = BTreeMap::new();
        let mut first_seen: BTreeMap<char, usize> = BTreeMap::new();
        for (i, (idx, shape)) in inputs.iter().zip(shapes).enumerate() {
            if idx.len() != shape.len() {
                return Err(format!(
                    "operand {i} (`{}`) has {} ind{} but its tensor has shape {}",
                    idx.iter().collect::<String>(),
                    idx.len(),
                    if idx.len() == 1 { "ex" } else { "ices" },
                    fmt_shape(shape)
                ));
            }
            for (&c, &n) in idx.iter().zip(shape) {
                match sizes.insert(c, n) {
                    Some(prev) if prev != n => {
                        let j = first_seen[&c];
                        return Err(format!(
                            "index `{c}` is {prev} in operand {j} (shape {}) but {n} in operand {i} (shape {})",
                            fmt_shape(&shapes[j]),
                            fmt_shape(shape)
                        ));
                    }
                    _ => {
                        first_seen.entry(c).or_insert(i);
                    }
                }
            }
        }
        for (k, c) in output.iter().enumerate() {
            if output[..k].contains(c) {
                return Err(format!("index `{c}` appears twice in the output"));
            }
            if !sizes.contains_key(c) {
                return Err(format!("output index `{c}` appears in no operand"));
            }
        }
        Ok(Spec { inputs, output, sizes })
    }

    fn size(&self, c: char) -> usize {
        self.sizes.get(&c).copied().unwrap_or(1)
    }

    fn sizes_of(&self, cs: &[char]) -> Vec<usize> {
        cs.iter().map(|&c| self.size(c)).collect()
    }
}

/// A value with a letter for each of its axes.
struct Term {
    v: Value,
    idx: Vec<char>,
}

fn op(m: &mut Machine, op: TOp, args: Vec<Value>) -> FResult<Value> {
    ad::tensor::call(m, op, args)
}

/// Sums the axes at `axes` (highest first, so the others keep their places).
fn sum_axes(m: &mut Machine, t: &mut Term, mut axes: Vec<usize>) -> FResult<()> {
    axes.sort_unstable();
    for &a in axes.iter().rev() {
        t.v = op(m, TOp::SumAxis(a), vec![t.v.clone()])?;
        t.idx.remove(a);
    }
    Ok(())
}

/// `t` with its axes in the order `order` (the same letters).
fn arrange(m: &mut Machine, t: Term, order: &[char]) -> FResult<Value> {
    if t.idx == order {
        return Ok(t.v);
    }
    let perm = order.iter().map(|c| t.idx.iter().position(|d| d == c).unwrap_or(0)).collect();
    op(m, TOp::Permute(perm), vec![t.v])
}

/// Keeps the diagonal of axes p < q of the same letter: t · I (an identity along p and q,
/// broadcast over the rest), summed over q.
fn diagonal(m: &mut Machine, t: &mut Term, p: usize, q: usize, n: usize) -> FResult<()> {
    // The dtype and device to make the identity in (of the tensor under any perturbation,
    // batching or tracing).
    let Some(x) = ad::underlying(&t.v) else {
        return Err(Fault::internal("einsum of a non-tensor"));
    };
    let mut shape = vec![1; t.idx.len()];
    (shape[p], shape[q]) = (n, n);
    let eye: Vec<f64> = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
    let eye = Tensor::from_f64s(&shape, eye)?.astype(x.dtype().float_for())?.to_device(x.device())?;
    let v = m.prim2(Prim::Mul, t.v.clone(), Value::Tensor(std::rc::Rc::new(eye)))?;
    t.v = v;
    sum_axes(m, t, vec![q])
}

/// The contraction of `a` and `b`, keeping the indices in `keep` (those the output or a later
/// operand needs).
fn contract(m: &mut Machine, spec: &Spec, a: Term, b: Term, keep: &[char]) -> FResult<Term> {
    let batch: Vec<char> = a.idx.iter().copied().filter(|c| b.idx.contains(c) && keep.contains(c)).collect();
    let summed: Vec<char> = a.idx.iter().copied().filter(|c| b.idx.contains(c) && !keep.contains(c)).collect();
    let left: Vec<char> = a.idx.iter().copied().filter(|c| !b.idx.contains(c)).collect();
    let right: Vec<char> = b.idx.iter().copied().filter(|c| !a.idx.contains(c)).collect();
    let dims = |cs: &[char]| spec.sizes_of(cs).iter().product::<usize>();
    let (nb, nm, nk, nn) = (dims(&batch), dims(&left), dims(&summed), dims(&right));
    let out_idx: Vec<char> = [&batch[..], &left, &right].concat();
    let out_shape = spec.sizes_of(&out_idx);
    if summed.is_empty() || (left.is_empty() && right.is_empty()) {
        // Nothing to multiply as matrices: a broadcast product, then the sums.
        let full: Vec<char> = [&out_idx[..], &summed].concat();
        let shaped = |m: &mut Machine, t: Term, own: &[char]| -> FResult<Value> {
            let order: Vec<char> = full.iter().copied().filter(|c| own.contains(c)).collect();
            let v = arrange(m, t, &order)?;
            let shape = full.iter().map(|&c| if own.contains(&c) { spec.size(c) } else { 1 }).collect();
            op(m, TOp::Reshape(shape), vec![v])
        };
        let (a_own, b_own) = (a.idx.clone(), b.idx.clone());
        let va = shaped(m, a, &a_own)?;
        let vb = shaped(m, b, &b_own)?;
        let mut t = Term { v: m.prim2(Prim::Mul, va, vb)?, idx: full.clone() };
        sum_axes(m, &mut t, (out_idx.len()..full.len()).collect())?;
        return Ok(t);
    }
    // [batch, left, summed] @ [batch, summed, right] as (batched) matrices.
    let (sa, sb) = if batch.is_empty() { (vec![nm, nk], vec![nk, nn]) } else { (vec![nb, nm, nk], vec![nb, nk, nn]) };
    let va = arrange(m, a, &[&batch[..], &left, &summed].concat())?;
    let va = op(m, TOp::Reshape(sa), vec![va])?;
    let vb = arrange(m, b, &[&batch[..], &summed, &right].concat())?;
    let vb = op(m, TOp::Reshape(sb), vec![vb])?;
    let p = op(m, TOp::MatMul, vec![va, vb])?;
    Ok(Term { v: op(m, TOp::Reshape(out_shape), vec![p])?, idx: out_idx })
}

fn lower(m: &mut Machine, spec: &Spec, operands: Vec<Value>) -> FResult<Value> {
    let mut terms: Vec<Term> =
        operands.into_iter().zip(&spec.inputs).map(|(v, idx)| Term { v, idx: idx.clone() }).collect();
    // Diagonals first: a letter twice in one operand.
    for t in &mut terms {
        while let Some((p, q)) =
            (0..t.idx.len()).find_map(|q| t.idx[..q].iter().position(|&c| c == t.idx[q]).map(|p| (p, q)))
        {
            diagonal(m, t, p, q, spec.size(t.idx[q]))?;
        }
    }
    // Then the letters only one operand has and the output lacks: summed before any product.
    for i in 0..terms.len() {
        let lonely: Vec<usize> = (0..terms[i].idx.len())
            .filter(|&a| {
                let c = terms[i].idx[a];
                !spec.output.contains(&c) && terms.iter().enumerate().all(|(j, t)| j == i || !t.idx.contains(&c))
            })
            .collect();
        sum_axes(m, &mut terms[i], lonely)?;
    }
    let mut rest = terms.into_iter();
    let Some(mut acc) = rest.next() else {
        return Err(Fault::internal("einsum without operands"));
    };
    let rest: Vec<Term> = rest.collect();
    for (k, next) in rest.into_iter().enumerate() {
        let later: Vec<char> = spec.inputs[k + 2..].iter().flatten().copied().collect();
        let keep: Vec<char> = spec.output.iter().chain(&later).copied().collect();
        acc = contract(m, spec, acc, next, &keep)?;
    }
    let extra: Vec<usize> = (0..acc.idx.len()).filter(|&a| !spec.output.contains(&acc.idx[a])).collect();
    sum_axes(m, &mut acc, extra)?;
    arrange(m, acc, &spec.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, shapes: &[&[usize]]) -> String {
        let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
        Spec::parse(text, &shapes).expect_err("the spec should be refused")
    }

    #[test]
    fn specs_are_checked_against_the_shapes() {
        let s = Spec::parse("bij, bjk -> bik", &[vec![2, 3, 4], vec![2, 4, 5]]).unwrap();
        assert_eq!(s.output, vec!['b', 'i', 'k']);
        assert_eq!(s.sizes.get(&'j'), Some(&4));
        assert_eq!(
            err("ij,jk", &[&[2, 3], &[3, 4]]),
            "the spec needs an explicit output after `->` (as in \"ij,jk->ik\")"
        );
        assert_eq!(err("ij,jk->ik", &[&[2, 3]]), "the spec names 2 operands but 1 tensor is given");
        assert_eq!(err("ij->i", &[&[2, 3, 4]]), "operand 0 (`ij`) has 2 indices but its tensor has shape [2, 3, 4]");
        assert_eq!(
            err("ij,jk->ik", &[&[2, 3], &[4, 5]]),
            "index `j` is 3 in operand 0 (shape [2, 3]) but 4 in operand 1 (shape [4, 5])"
        );
        assert_eq!(err("i1->i", &[&[2, 3]]), "unexpected `1`: indices are letters, operands are separated by `,`");
        assert_eq!(err("ij->ii", &[&[2, 2]]), "index `i` appears twice in the output");
        assert_eq!(err("ij->k", &[&[2, 2]]), "output index `k` appears in no operand");
        assert_eq!(err("->", &[]), "einsum needs at least one tensor");
        assert_eq!(err("...i->i", &[&[2]]), "`...` (implicit broadcast axes) is not supported: name every axis");
    }
}
