//! The machine as the host of differentiation (`ad::Host`): the handler of a tag, the order
//! and liveness of levels (read off the segments' delimiters), interrupts, tensor operations.

use super::machine::Machine;
use crate::ad::Host;
use crate::core::Prim;
use crate::runtime::perturbed::{AdjFrame, GradState};
use crate::runtime::value::Value;
use crate::runtime::FResult;
use crate::tensor::{cpu, TOp, Tensor, Un};
use std::rc::Rc;
use std::sync::atomic::Ordering;

impl Host for Machine {
    #[inline]
    fn prim2(&mut self, p: Prim, a: Value, b: Value) -> FResult<Value> {
        Machine::prim2(self, p, a, b)
    }
    #[inline]
    fn prim1(&mut self, p: Prim, a: Value) -> FResult<Value> {
        Machine::prim1(self, p, a)
    }
    fn forward(&mut self, op: &TOp, args: &[Value]) -> FResult<Value> {
        if args.iter().any(|a| matches!(a, Value::Staged(_) | Value::StagedFloat(_))) {
            return self.jit.forward(op, args);
        }
        crate::runtime::tensor::forward(op, args)
    }
    fn unary(&mut self, op: Un, t: Rc<Tensor>) -> FResult<Tensor> {
        Ok(cpu::elementwise::unary(op, t)?)
    }
    fn un_other(&mut self, op: Un, x: Value) -> FResult<Value> {
        match x {
            Value::Staged(_) | Value::StagedFloat(_) => self.jit.unary(op, x),
            other => Err(crate::runtime::Fault::internal(format!("`{op:?}` on {}", other.type_name()))),
        }
    }
    fn product_into(
        &mut self,
        out: &mut Tensor,
        x: &Tensor,
        tx: bool,
        y: &Tensor,
        ty: bool,
        beta: f32,
    ) -> FResult<bool> {
        // Only float32 CPU operands have the in-place kernel. Shapes are checked before
        // anything is written, so a refusal leaves `out` as it was.
        let (Some(x), Some(y)) = (x.cpu(), y.cpu()) else { return Ok(false) };
        if out.cpu().is_none() {
            return Ok(false);
        }
        let Some(out) = out.f32s_mut()? else { return Ok(false) };
        Ok(cpu::product_into(out, x, tx, y, ty, beta).is_ok())
    }
    fn product(&mut self, shape: &[usize], x: &Tensor, tx: bool, y: &Tensor, ty: bool) -> FResult<Option<Tensor>> {
        // Float32 CPU operands, as `product_into`; a shape the product does not have is
        // refused before anything is written.
        let (Some(x), Some(y)) = (x.cpu(), y.cpu()) else { return Ok(None) };
        Ok(cpu::product_new(shape, x, tx, y, ty).ok().map(Tensor::from_array))
    }
    #[inline]
    fn handler(&mut self, tag: u32) -> Option<&mut GradState> {
        self.grad_handler(tag)
    }
    fn level_is_live(&self, tag: u32) -> bool {
        Machine::level_is_live(self, tag)
    }
    fn inner_level(&self, a: u32, b: u32) -> Option<u32> {
        Machine::inner_level(self, a, b)
    }
    fn interrupted(&mut self) -> bool {
        self.interrupt.swap(false, Ordering::Relaxed)
    }
    fn recycle(&mut self, frames: Vec<AdjFrame>) {
        self.spare_adjoint_frames = frames;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ad::rules::{partials, scalar_partials};

    fn f(x: f64) -> Value {
        Value::Float(x)
    }

    #[test]
    fn scalar_partials_agree_with_the_rule_table_on_the_machine_bit_for_bit() {
        let mut m = Machine::new();
        let samples = [(0.5, 3.0), (-2.25, 0.1), (1e-300, 7.0), (3.0, -0.0), (0.0, 0.0), (f64::MAX, 0.5)];
        for p in [Prim::Add, Prim::Sub, Prim::Mul, Prim::Div] {
            for (a, b) in samples {
                let (y, da, db) = scalar_partials(p, &f(a), &f(b)).expect("Floats");
                let Ok(want_y) = Machine::prim2(&mut m, p, f(a), f(b)) else { panic!("{p:?}: prim2 failed") };
                let Ok((want_da, want_db)) = partials(&mut m, p, &f(a), &f(b), &want_y) else {
                    panic!("{p:?}: no partials")
                };
                for (got, want) in [(y, want_y), (da, want_da), (db, want_db)] {
                    let Value::Float(want) = want else { panic!("{p:?}: not a Float") };
                    assert_eq!(got.to_bits(), want.to_bits(), "{p:?} at ({a}, {b}): {got} vs {want}");
                }
            }
        }
        assert!(scalar_partials(Prim::Pow, &f(2.0), &f(3.0)).is_none());
    }
}
