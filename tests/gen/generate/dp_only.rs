//! The forms outside the subset dp shares with OCaml: `grad`, `value_and_grad`, `jvp`,
//! `stop_gradient` and the `tree_*` operations, tensors whose shapes agree by construction,
//! and `shift`/`reset`.

use super::super::ast::*;
use super::{Cx, Generator};

impl Generator {
    /// dp only: a Float computed by `grad`, `value_and_grad` or `jvp` of a Float function.
    pub(super) fn derivative(&mut self, cx: Cx) -> Expr {
        let sub = cx.arg();
        let x = self.name("x");
        self.bind(&x, Ty::Float);
        let body = self.expr(&Ty::Float, Cx { depth: cx.depth.saturating_sub(1).min(3), fx: false });
        self.truncate(self.env.len() - 1);
        let f = Expr::Fun(vec![Param { pat: Pat::Var(x), ann: Some(Ty::Float) }], bx(body));
        let at = self.expr(&Ty::Float, sub);
        match self.rng.below(4) {
            0 | 1 => Expr::App(bx(Expr::Var("grad".into())), vec![f, at]),
            2 => {
                let vg = Expr::App(bx(Expr::Var("value_and_grad".into())), vec![f, at]);
                Expr::App(bx(Expr::Var(if self.rng.chance(0.5) { "fst" } else { "snd" }.into())), vec![vg])
            }
            _ => {
                let tangent = self.expr(&Ty::Float, sub);
                let j = Expr::App(bx(Expr::Var("jvp".into())), vec![f, at, tangent]);
                Expr::App(bx(Expr::Var(if self.rng.chance(0.5) { "fst" } else { "snd" }.into())), vec![j])
            }
        }
    }

    pub(super) fn tensor_lit(&mut self, shape: &[usize]) -> Expr {
        let n: usize = shape.iter().product();
        let xs = (0..n).map(|_| *self.rng.pick(&[0.0, 0.5, 1.0, -1.0, 2.0, 1.5, -0.25, 3.0])).collect();
        Expr::TensorLit(shape.to_vec(), xs)
    }

    /// dp only: tensor expressions whose shapes agree by construction.
    pub(super) fn tensor(&mut self, shape: &[usize], cx: Cx) -> Expr {
        let sub = cx.arg();
        let t = Ty::Tensor(shape.to_vec());
        match self.rng.below(7) {
            0 => self.tensor_lit(shape),
            1 | 2 => {
                let op = *self.rng.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul]);
                let (a, b) = (self.expr(&t, sub), self.expr(&t, sub));
                Expr::Bin(op, bx(a), bx(b), t)
            }
            3 => {
                let mut s = self.expr(&Ty::Float, sub);
                let mut a = self.expr(&t, sub);
                // Unannotated half the time: the checker must find that a Float times a Tensor
                // is a Tensor whatever order it learns the operand types in.
                if self.rng.chance(0.5) {
                    s = Expr::Annot(bx(s), Ty::Float);
                    a = Expr::Annot(bx(a), t.clone());
                }
                Expr::Bin(BinOp::Mul, bx(s), bx(a), t)
            }
            4 => {
                // [m, k] @ [k, n] or [m, k] @ [k]
                let k = self.rng.range(1, 3) as usize;
                let (ls, rs) = match shape {
                    [m, n] => (vec![*m, k], vec![k, *n]),
                    [m] => (vec![*m, k], vec![k]),
                    _ => unreachable!(),
                };
                let (a, b) = (self.expr(&Ty::Tensor(ls), sub), self.expr(&Ty::Tensor(rs), sub));
                Expr::Bin(BinOp::MatMul, bx(a), bx(b), t)
            }
            5 => {
                let f = *self.rng.pick(&["sin", "tanh", "relu", "transpose"]);
                let arg_shape: Vec<usize> =
                    if f == "transpose" { shape.iter().rev().copied().collect() } else { shape.to_vec() };
                let a = self.expr(&Ty::Tensor(arg_shape), sub);
                Expr::App(bx(Expr::Var(f.into())), vec![a])
            }
            _ => {
                // The gradient of a Float function of a tensor has the tensor's shape.
                let x = self.name("x");
                self.bind(&x, t.clone());
                let body = self.expr(&Ty::Float, Cx { depth: cx.depth.saturating_sub(1).min(3), fx: false });
                self.truncate(self.env.len() - 1);
                let f = Expr::Fun(vec![Param { pat: Pat::Var(x), ann: None }], bx(body));
                let at = self.expr(&t, sub);
                Expr::App(bx(Expr::Var("grad".into())), vec![f, at])
            }
        }
    }

    /// dp only: the leaf-by-leaf operations on differentiable structures (`tree_add` …).
    pub(super) fn tree_op(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        // Two lists of one type may differ in length, which is an error for `tree_add`.
        if !self.differentiable(ty) || ty.any(&|t| matches!(t, Ty::List(_))) {
            return None;
        }
        let sub = cx.arg();
        let (f, args) = match self.rng.below(4) {
            0 => ("tree_add", vec![self.expr(ty, sub), self.expr(ty, sub)]),
            1 => ("tree_sub", vec![self.expr(ty, sub), self.expr(ty, sub)]),
            2 => ("tree_scale", vec![self.expr(&Ty::Float, sub), self.expr(ty, sub)]),
            _ => ("tree_zeros", vec![self.expr(ty, sub)]),
        };
        Some(Expr::App(bx(Expr::Var(f.into())), args))
    }

    /// `grad` applies to Floats, Tensors and tuples, lists and records of them.
    pub(super) fn differentiable(&self, t: &Ty) -> bool {
        match t {
            Ty::Float | Ty::Tensor(_) => true,
            Ty::Tuple(ts) => ts.iter().all(|t| self.differentiable(t)),
            Ty::List(t) => self.differentiable(t),
            Ty::Record(i) => self.records[*i].fields.iter().all(|(_, t)| self.differentiable(t)),
            _ => false,
        }
    }

    /// dp only: `grad f p` at a point `p` of a structured differentiable type (the gradient
    /// has that type), or `value_and_grad f p` for a `(Float, T)`.
    pub(super) fn structured_gradient(&mut self, ty: &Ty, cx: Cx) -> Option<Expr> {
        let (point, both) = match ty {
            Ty::Tuple(_) | Ty::List(_) | Ty::Record(_) if self.differentiable(ty) => (ty.clone(), false),
            _ => match ty {
                Ty::Tuple(ts) if ts.len() == 2 && ts[0] == Ty::Float && self.differentiable(&ts[1]) => {
                    (ts[1].clone(), true)
                }
                _ => return None,
            },
        };
        let f = self.lambda(&fun(point.clone(), Ty::Float), Cx { depth: cx.depth.min(4), fx: false });
        let at = self.expr(&point, cx.arg());
        Some(Expr::App(bx(Expr::Var(if both { "value_and_grad" } else { "grad" }.into())), vec![f, at]))
    }

    /// dp only: `reset (fun () -> let h = shift (fun k -> …k v…) in …h…)`, lexically well typed:
    /// the shift's body and the rest of the reset both have the reset's type.
    pub(super) fn shift_reset(&mut self, ty: &Ty, cx: Cx) -> Expr {
        let hole = self.random_type(1);
        let (k, h) = (self.name("k"), self.name("h"));
        let sub = Cx { depth: cx.depth.saturating_sub(1), fx: false };
        self.bind(&k, fun(hole.clone(), ty.clone()));
        let body = self.expr(ty, sub);
        self.truncate(self.env.len() - 1);
        self.bind(&h, hole);
        let rest = self.expr(ty, sub);
        self.truncate(self.env.len() - 1);
        Expr::Reset(bx(Expr::Let(Pat::Var(h), bx(Expr::Shift(k, bx(body))), bx(rest))))
    }
}
