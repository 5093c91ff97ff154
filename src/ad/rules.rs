//! The derivative rule table: one entry per differentiable primitive, beside its forward
//! definition. Each rule gives the *local partial derivatives*, built from the machine's own
//! generic operations — so a derivative is itself differentiable (nesting) — and both modes use
//! them: reverse mode multiplies them by the output adjoint, forward mode by input tangents.

use super::Host;
use crate::core::Prim;
use crate::runtime::perturbed::strip;
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
        Un::Sigmoid => {
            let one_minus = m.prim2(Prim::Sub, f(1.0), y.clone())?;
            m.prim2(Prim::Mul, y, one_minus)?
        }
        Un::Relu | Un::Abs if matches!(strip(&x), Value::Tensor(_)) => {
            let t = if op == Un::Relu { TOp::Step } else { TOp::Sign };
            super::tensor::call(m, t, vec![strip(&x)])?
        }
        Un::Relu => f(if scalar(&x) > 0.0 { 1.0 } else { 0.0 }),
        Un::Abs => f(if scalar(&x) >= 0.0 { 1.0 } else { -1.0 }),
    })
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
            let da = m.prim2(Prim::Mul, b, pw)?;
            // ∂(a^b)/∂b = a^b · ln a, taken as 0 where a ≤ 0 (the real power is then only
            // defined at integer b, where it is constant in b). ln a stays differentiable in a
            // only when every base is positive; a plain tensor base has no derivative to keep,
            // so it skips that test (on the GPU, a read-back).
            let positive = match strip(&a) {
                Value::Tensor(_) if matches!(a, Value::Tensor(_)) => false,
                Value::Tensor(t) => t.all_positive()?,
                other => scalar(&other) > 0.0,
            };
            let db = if positive {
                let la = super::apply_un(m, Un::Log, a)?;
                m.prim2(Prim::Mul, y, la)?
            } else if let Value::Tensor(t) = strip(&a) {
                let la = t.log_or_zero()?;
                m.prim2(Prim::Mul, y, Value::Tensor(std::rc::Rc::new(la)))?
            } else {
                f(0.0)
            };
            (da, db)
        }
        other => return Err(Fault::internal(format!("`{other:?}` is not differentiable"))),
    })
}
