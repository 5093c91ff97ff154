//! The derivative rule table: one entry per differentiable primitive, beside its forward
//! definition. Each rule gives the *local partial derivatives*, built from the machine's own
//! generic operations — so a derivative is itself differentiable (nesting) — and both modes use
//! them: reverse mode multiplies them by the output adjoint, forward mode by input tangents.

use super::Host;
use crate::core::Prim;
use crate::runtime::perturbed::{is_ad, strip};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::{TOp, Un};

fn f(x: f64) -> Value {
    Value::Float(x)
}

/// dy/dx at x, where y = op(x) (the math functions themselves are the tensor library's `Un`).
pub fn un_deriv<H: Host>(op: Un, m: &mut H, x: &Value, y: &Value) -> FResult<Value> {
    let (x, y) = (x.clone(), y.clone());
    Ok(match op {
        Un::Neg => f(-1.0),
        Un::Sin => super::apply_un(m, Un::Cos, x)?,
        Un::Cos => {
            let s = super::apply_un(m, Un::Sin, x)?;
            m.prim1(Prim::Neg, s)?
        }
        Un::Tan => {
            let yy = m.prim2(Prim::Mul, y.clone(), y)?;
            m.prim2(Prim::Add, f(1.0), yy)?
        }
        Un::Exp => y,
        Un::Log => m.prim2(Prim::Div, f(1.0), x)?,
        Un::Sqrt => m.prim2(Prim::Div, f(0.5), y)?,
        Un::Tanh => {
            let yy = m.prim2(Prim::Mul, y.clone(), y)?;
            m.prim2(Prim::Sub, f(1.0), yy)?
        }
        Un::Erf => {
            let xx = m.prim2(Prim::Mul, x.clone(), x)?;
            let neg = m.prim1(Prim::Neg, xx)?;
            let e = super::apply_un(m, Un::Exp, neg)?;
            m.prim2(Prim::Mul, f(std::f64::consts::FRAC_2_SQRT_PI), e)?
        }
        Un::Gelu => super::apply_un(m, Un::GeluGrad, x)?,
        // GELU's second derivative, composed of differentiable operations (it is only needed
        // from the second order on): with u = c (x + a x³), t = tanh u, u' = c (1 + 3a x²),
        // (1 − t²) (u' − x t u'² + 3ac x²).
        Un::GeluGrad => {
            let (c, a) = (crate::tensor::op::GELU_C, crate::tensor::op::GELU_A);
            let xx = m.prim2(Prim::Mul, x.clone(), x.clone())?;
            let cubic = m.prim2(Prim::Mul, f(a * c), xx.clone())?;
            let cubic = m.prim2(Prim::Add, f(c), cubic)?;
            let u = m.prim2(Prim::Mul, x.clone(), cubic)?;
            let t = super::apply_un(m, Un::Tanh, u)?;
            let tt = m.prim2(Prim::Mul, t.clone(), t.clone())?;
            let s = m.prim2(Prim::Sub, f(1.0), tt)?;
            let up = m.prim2(Prim::Mul, f(3.0 * a * c), xx.clone())?;
            let up = m.prim2(Prim::Add, f(c), up)?;
            let upup = m.prim2(Prim::Mul, up.clone(), up.clone())?;
            let xt = m.prim2(Prim::Mul, x, t)?;
            let xtuu = m.prim2(Prim::Mul, xt, upup)?;
            let inner = m.prim2(Prim::Sub, up, xtuu)?;
            let last = m.prim2(Prim::Mul, f(3.0 * a * c), xx)?;
            let inner = m.prim2(Prim::Add, inner, last)?;
            m.prim2(Prim::Mul, s, inner)?
        }
        Un::Sigmoid => {
            let one_minus = m.prim2(Prim::Sub, f(1.0), y.clone())?;
            m.prim2(Prim::Mul, y, one_minus)?
        }
        // (A batch of examples takes the tensor form: its mask is computed per element; so
        // does a traced Float: the staged program decides the mask, per call.)
        Un::Relu | Un::Abs
            if matches!(strip(&x), Value::Tensor(_) | Value::Batched(_) | Value::Staged(_) | Value::StagedFloat(_)) =>
        {
            let t = if op == Un::Relu { TOp::Step } else { TOp::Sign };
            super::tensor::call(m, t, vec![strip(&x)])?
        }
        Un::Relu => f(if scalar(&x) > 0.0 { 1.0 } else { 0.0 }),
        Un::Abs => f(if scalar(&x) >= 0.0 { 1.0 } else { -1.0 }),
    })
}

/// Whether `op`'s derivative is a 0/1 mask applied as a select rather than a product (relu,
/// as JAX's `select(x > 0, g, 0)`): where it is 0 nothing flows back, not even an infinite or
/// NaN adjoint (`grad (fun x -> sqrt (relu x)) (-1.0)` is 0, not 0 · inf).
pub fn selects(op: Un) -> bool {
    op == Un::Relu
}

/// The local derivative `dy` applied to an adjoint or tangent `g`: `g · dy`, or the select of
/// `selects`.
pub fn apply_deriv<H: Host>(op: Un, m: &mut H, g: Value, dy: Value) -> FResult<Value> {
    if selects(op) {
        super::tensor::select(m, g, dy)
    } else {
        m.prim2(Prim::Mul, g, dy)
    }
}

fn scalar(v: &Value) -> f64 {
    match strip(v) {
        Value::Float(x) => x,
        _ => 0.0,
    }
}

/// y = a `p` b and (∂y/∂a, ∂y/∂b) when both are plain Floats — the scalar loops of reverse
/// mode — as plain f64s: the same numbers `partials` (and `Machine::prim2` for y) give,
/// without building Values for the intermediate steps (the test below holds them equal).
/// None for anything else.
pub fn scalar_partials(p: Prim, a: &Value, b: &Value) -> Option<(f64, f64, f64)> {
    let (Value::Float(x), Value::Float(z)) = (a, b) else { return None };
    let (x, z) = (*x, *z);
    Some(match p {
        Prim::Add => (x + z, 1.0, 1.0),
        Prim::Sub => (x - z, 1.0, -1.0),
        Prim::Mul => (x * z, z, x),
        Prim::Div => {
            let y = x / z;
            (y, 1.0 / z, -(y / z))
        }
        _ => return None,
    })
}

/// (∂y/∂a, ∂y/∂b) for y = a `p` b.
pub fn partials<H: Host>(m: &mut H, p: Prim, a: &Value, b: &Value, y: &Value) -> FResult<(Value, Value)> {
    let (a, b, y) = (a.clone(), b.clone(), y.clone());
    Ok(match p {
        Prim::Add => (f(1.0), f(1.0)),
        Prim::Sub => (f(1.0), f(-1.0)),
        Prim::Mul => (b, a),
        Prim::Div => {
            let da = m.prim2(Prim::Div, f(1.0), b.clone())?;
            let yb = m.prim2(Prim::Div, y, b)?;
            (da, m.prim1(Prim::Neg, yb)?)
        }
        Prim::Pow => {
            let bm1 = m.prim2(Prim::Sub, b.clone(), f(1.0))?;
            let pw = m.prim2(Prim::Pow, a.clone(), bm1)?;
            let da = m.prim2(Prim::Mul, b.clone(), pw)?;
            // ∂(a^b)/∂a is 0 where b = 0, as JAX selects it: b · a^(b-1) would be 0 · inf at
            // a = 0, and the higher derivatives of an integral power reach b = 0 (the third
            // derivative of a ** 2.0 at 0 is 0).
            let da = match strip(&b) {
                Value::Float(0.0) => super::zero_like(&da),
                Value::Float(_) => da,
                bv => {
                    let abs = super::apply_un(m, Un::Abs, bv)?;
                    let nonzero = super::tensor::call(m, TOp::Step, vec![abs])?;
                    super::tensor::select(m, da, nonzero)?
                }
            };
            // ∂(a^b)/∂b = a^b · ln a, taken as 0 where a ≤ 0 (the real power is then only
            // defined at integer b, where it is constant in b): selected, so an exact 0 even
            // where a^b is NaN or infinite, on a Float or a tensor, traced or batched or not,
            // so every path gives the same numbers. ln a stays differentiable in a only when
            // every base is positive; a plain tensor base has no derivative to keep, so it
            // skips that test (on the GPU, a read-back). A traced base is never known to be
            // positive: the select decides per call.
            let positive = match strip(&a) {
                Value::Tensor(_) if matches!(a, Value::Tensor(_)) => false,
                Value::Tensor(t) => t.all_positive()?,
                // A batch: ln of the positive bases, selected per element below.
                Value::Batched(_) | Value::Staged(_) | Value::StagedFloat(_) => false,
                other => scalar(&other) > 0.0,
            };
            let db = if positive {
                let la = super::apply_un(m, Un::Log, a)?;
                m.prim2(Prim::Mul, y, la)?
            } else if let Value::Tensor(_) | Value::Batched(_) | Value::Staged(_) | Value::StagedFloat(_) = strip(&a) {
                let mask = super::tensor::call(m, TOp::Step, vec![strip(&a)])?;
                let la = match (strip(&a), is_ad(&a)) {
                    (Value::Tensor(t), false) => Value::Tensor(std::rc::Rc::new(t.log_or_zero()?)),
                    // A perturbed base with some element ≤ 0: ln of the base where it is
                    // positive and of 1 elsewhere, so that ln a stays differentiable where it
                    // is used (the mixed derivative ∂²/∂a∂b of the positive elements).
                    _ => {
                        let kept = super::tensor::select(m, a, mask.clone())?;
                        let ones = m.prim2(Prim::Sub, f(1.0), mask.clone())?;
                        let safe = m.prim2(Prim::Add, kept, ones)?;
                        super::apply_un(m, Un::Log, safe)?
                    }
                };
                let db = m.prim2(Prim::Mul, y, la)?;
                super::tensor::select(m, db, mask)?
            } else {
                f(0.0)
            };
            (da, db)
        }
        other => return Err(Fault::internal(format!("`{other:?}` is not differentiable"))),
    })
}
