//! Int and Float expressions with a bound on their magnitude, wrapped before they could
//! overflow OCaml's 63-bit ints or reach infinity (the parent module's first invariant).

use super::super::ast::*;
use super::{Cx, Generator, SHAPES};

/// Every stored Int is below this in magnitude.
pub const INT_STORE: f64 = 1000.0;
const INT_WRAP: i64 = 997;
/// Every stored Float is below this in magnitude.
pub const FLOAT_STORE: f64 = 1e4;
/// Operands of a multiplication are wrapped above this, so a product stays below 1e12.
const MUL_OPERAND: f64 = 1e6;
/// Operands of an addition are wrapped above this.
const ADD_OPERAND: f64 = 1e12;
const FLOATS: &[f64] = &[0.0, 0.5, 1.0, 1.5, 2.0, 2.25, 3.0, 0.1, 0.2, 0.3, 10.0, 0.75, 7.5, 100.0, 1e-3, 12.125];

fn power_of_ten_above(x: f64) -> f64 {
    let mut p = 1.0;
    while p < x {
        p *= 10.0;
    }
    p
}

impl Generator {
    pub(super) fn wrap_int(e: Expr, bound: f64, limit: f64) -> Expr {
        if bound >= limit {
            Expr::Bin(BinOp::Rem, bx(e), bx(Expr::Int(INT_WRAP)), Ty::Int)
        } else {
            e
        }
    }

    pub(super) fn bounded_int(e: Expr, bound: f64, limit: f64) -> (Expr, f64) {
        if bound >= limit {
            (Self::wrap_int(e, bound, limit), (INT_WRAP - 1) as f64)
        } else {
            (e, bound)
        }
    }

    pub(super) fn wrap_float(&mut self, e: Expr, bound: f64, limit: f64) -> Expr {
        self.bounded_float(e, bound, limit).0
    }

    pub(super) fn bounded_float(&mut self, e: Expr, bound: f64, limit: f64) -> (Expr, f64) {
        // dp-only programs do not need the bound: an infinity just prints.
        if bound > limit && self.core_only {
            let p = power_of_ten_above(bound / limit);
            (Expr::Bin(BinOp::Div, bx(e), bx(Expr::Float(p)), Ty::Float), bound / p)
        } else {
            (e, bound)
        }
    }

    pub(super) fn int_lit(&mut self) -> (Expr, f64) {
        let n = if self.rng.chance(0.8) { self.rng.range(-3, 12) } else { self.rng.range(-999, 999) };
        (Expr::Int(n), n.abs() as f64)
    }

    /// An Int expression and a bound on its magnitude (not yet wrapped to `INT_STORE`).
    pub(super) fn int_expr(&mut self, cx: Cx) -> (Expr, f64) {
        if cx.depth == 0 {
            return if self.rng.chance(0.5) { self.int_lit() } else { (self.leaf(&Ty::Int), INT_STORE - 1.0) };
        }
        let sub = cx.arg();
        match self.rng.weighted(&[1.5, 3.0, 1.0, 0.3, 0.5, 0.5, 0.5, 0.4, 0.3, 5.0]) {
            0 => self.int_lit(),
            1 => {
                let op = *self.rng.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Add]);
                let limit = if op == BinOp::Mul { MUL_OPERAND } else { ADD_OPERAND };
                let (a, ba) = self.int_expr(sub);
                let (a, ba) = Self::bounded_int(a, ba, limit);
                let (b, bb) = self.int_expr(sub);
                let (b, bb) = Self::bounded_int(b, bb, limit);
                let bound = if op == BinOp::Mul { ba * bb } else { ba + bb };
                (Expr::Bin(op, bx(a), bx(b), Ty::Int), bound)
            }
            2 => {
                let op = *self.rng.pick(&[BinOp::Div, BinOp::Rem]);
                let d = *self.rng.pick(&[1, 2, 3, 5, 7, 10, -2, -3]);
                let (a, ba) = self.int_expr(sub);
                let (a, ba) = Self::bounded_int(a, ba, ADD_OPERAND);
                let bound = if op == BinOp::Div { ba / (d as f64).abs() } else { ba.min((d as f64).abs()) };
                (Expr::Bin(op, bx(a), bx(Expr::Int(d)), Ty::Int), bound)
            }
            3 => {
                let (a, ba) = self.int_expr(sub);
                (Expr::Neg(bx(a), Ty::Int), ba)
            }
            4 => {
                let t = self.random_type(1);
                let xs = self.expr(&list(t), sub);
                (Expr::App(bx(Expr::Var("length".into())), vec![xs]), 1e6)
            }
            5 => {
                let s = self.expr(&Ty::Str, sub);
                (Expr::App(bx(Expr::Var("string_length".into())), vec![s]), 1e6)
            }
            6 if self.core_only => {
                // dp-only Floats may be infinite or NaN (gradients), which `int` rejects.
                let (x, bx_) = self.float_expr(sub);
                let (x, bx_) = self.bounded_float(x, bx_, FLOAT_STORE);
                (Expr::Math("int", bx(x), Ty::Float), bx_)
            }
            7 => {
                let xs = self.expr(&list(Ty::Int), sub);
                (Expr::App(bx(Expr::Var("sum_int".into())), vec![xs]), 1e9)
            }
            8 => {
                let (a, ba) = self.int_expr(sub);
                (Expr::Math("abs", bx(a), Ty::Int), ba)
            }
            _ => (self.general(&Ty::Int, cx), INT_STORE - 1.0),
        }
    }

    pub(super) fn float_lit(&mut self) -> (Expr, f64) {
        let x = *self.rng.pick(FLOATS) * if self.rng.chance(0.3) { -1.0 } else { 1.0 };
        (Expr::Float(x), x.abs())
    }

    pub(super) fn float_expr(&mut self, cx: Cx) -> (Expr, f64) {
        if cx.depth == 0 {
            return if self.rng.chance(0.5) { self.float_lit() } else { (self.leaf(&Ty::Float), FLOAT_STORE) };
        }
        let sub = cx.arg();
        let dp = if self.core_only { 0.0 } else { 1.0 };
        match self.rng.weighted(&[1.5, 3.0, 0.8, 0.3, 0.6, 0.6, 0.3, dp, dp * 0.5, 5.0]) {
            0 => self.float_lit(),
            1 => {
                let op = *self.rng.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul]);
                let limit = if op == BinOp::Mul { MUL_OPERAND } else { ADD_OPERAND };
                let (a, ba) = self.float_expr(sub);
                let (a, ba) = self.bounded_float(a, ba, limit);
                let (b, bb) = self.float_expr(sub);
                let (b, bb) = self.bounded_float(b, bb, limit);
                let bound = if op == BinOp::Mul { ba * bb } else { ba + bb };
                (Expr::Bin(op, bx(a), bx(b), Ty::Float), bound)
            }
            2 => {
                let d = *self.rng.pick(&[2.0, 4.0, 0.5, 10.0, 3.0, -2.0]);
                let (a, ba) = self.float_expr(sub);
                let (a, ba) = self.bounded_float(a, ba, ADD_OPERAND);
                (Expr::Bin(BinOp::Div, bx(a), bx(Expr::Float(d)), Ty::Float), ba / f64::abs(d))
            }
            3 => {
                let (a, ba) = self.float_expr(sub);
                (Expr::Neg(bx(a), Ty::Float), ba)
            }
            4 => {
                let (n, bn) = self.int_expr(sub);
                let (n, bn) = Self::bounded_int(n, bn, INT_STORE);
                (Expr::Math("float", bx(n), Ty::Int), bn)
            }
            5 => {
                let f = *self.rng.pick(&["sin", "cos", "abs", "floor", "ceil", "sqrt"]);
                let (a, ba) = self.float_expr(sub);
                let (a, ba) = self.bounded_float(a, ba, ADD_OPERAND);
                match f {
                    "sin" | "cos" => (Expr::Math(f, bx(a), Ty::Float), 1.0),
                    "sqrt" => (Expr::Math("sqrt", bx(Expr::Math("abs", bx(a), Ty::Float)), Ty::Float), ba.sqrt() + 1.0),
                    _ => (Expr::Math(f, bx(a), Ty::Float), ba + 1.0),
                }
            }
            6 => {
                let a = self.expr(&Ty::Float, sub);
                let b = self.expr(&Ty::Float, sub);
                let f = if self.rng.chance(0.5) { "min_of" } else { "max_of" };
                (Expr::App(bx(Expr::Var(f.into())), vec![a, b]), FLOAT_STORE)
            }
            7 => (self.derivative(cx), FLOAT_STORE),
            8 => {
                let shape = self.rng.pick(SHAPES).to_vec();
                let t = self.expr(&Ty::Tensor(shape), sub);
                let f = *self.rng.pick(&["sum", "mean"]);
                (Expr::App(bx(Expr::Var(f.into())), vec![t]), FLOAT_STORE)
            }
            _ => (self.general(&Ty::Float, cx), FLOAT_STORE),
        }
    }
}
