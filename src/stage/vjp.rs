//! A staged call differentiated by an outer `grad` (`grad (jit f)`): `f` runs as one primitive
//! of that level, whose forward and reverse rules are staged programs.
//!
//! Tracing: `f` runs on traced leaves under an inner `grad` level of the trace's own (only the
//! leaves the outer level tracks are tracked there), and when it returns, its result's traced
//! leaves get one new input each, their adjoints ȳ, which seed that level's backward pass. So
//! one program G : (x, ȳ) ↦ (f x, x̄) comes out of the one rule table, custom rules and
//! `checkpoint` included. `split` then partially evaluates it (JAX's linearize): the nodes that
//! depend on x alone form the forward program, x ↦ (y, residuals), run at the call; the nodes
//! that read ȳ form the backward program, (residuals, ȳ) ↦ x̄, run when the outer backward pass
//! reaches the call's record. Nothing is computed twice: a residual is any forward value the
//! backward program reads (constants are copied into it instead).

use super::exec::{self, Plan};
use super::ir::{Kind, Node, Op, Program, Template};
use super::{fuse, opt};
use crate::runtime::perturbed::{AdjFrame, StagedFrame, Tracked};
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};
use crate::tensor::DType;
use std::cell::RefCell;
use std::rc::Rc;

/// A staged call's two programs.
pub struct Vjp {
    pub forward: Rc<Plan>,
    pub backward: Rc<Plan>,
    /// The structure of `f`'s result; its `Out(k)` are the forward program's first outputs.
    result: Template,
    /// How many of those there are (the rest of the forward program's outputs are residuals).
    outs: usize,
    pub residuals: usize,
}

/// Splits G (inputs: the argument's `n_x` leaves, then one adjoint per traced leaf of the
/// result; template: `(result, (x̄ per tracked leaf))`) into the two programs.
pub fn split(g: Program, n_x: usize) -> FResult<Vjp> {
    let (result, grads) = match &g.template {
        Template::Tuple(parts) if parts.len() == 2 => (parts[0].clone(), parts[1].clone()),
        _ => return Err(Fault::internal("a staged vjp's template")),
    };
    let outs = count_outs(&result);
    let n = g.nodes.len();
    // Whether each node depends on the argument alone.
    let mut known = vec![true; n];
    for (i, node) in g.nodes.iter().enumerate() {
        known[i] = match node {
            Node::Input(k) => *k < n_x,
            Node::Const(_) => true,
            Node::Apply(_, args) => args.iter().all(|&a| known[a as usize]),
        };
    }
    // The residuals: computed values the backward program reads (an adjoint that needs no ȳ,
    // an output of both, counts).
    let mut residual = vec![false; n];
    for (i, node) in g.nodes.iter().enumerate() {
        if let (false, Node::Apply(_, args)) = (known[i], node) {
            for &a in args {
                residual[a as usize] = known[a as usize];
            }
        }
    }
    for &o in &g.outputs[outs..] {
        residual[o as usize] = known[o as usize];
    }
    let residuals: Vec<u32> =
        (0..n as u32).filter(|&i| residual[i as usize] && !matches!(g.nodes[i as usize], Node::Const(_))).collect();

    let mut fwd = g.clone();
    fwd.outputs.truncate(outs);
    fwd.outputs.extend(&residuals);
    fwd.template = Template::Tuple((0..fwd.outputs.len()).map(Template::Out).collect());
    fwd.inputs = n_x;
    opt::dead_code(&mut fwd);

    let mut bwd = g;
    let r = residuals.len();
    for node in &mut bwd.nodes {
        match node {
            // The adjoints come after the residuals.
            Node::Input(k) if *k >= n_x => *k = *k - n_x + r,
            // The argument's leaves the backward pass reads are residuals (below); the others
            // are dead code there.
            _ => {}
        }
    }
    for (j, &i) in residuals.iter().enumerate() {
        bwd.nodes[i as usize] = Node::Input(j);
    }
    bwd.outputs.drain(..outs);
    bwd.template = renumber(&grads, outs);
    bwd.inputs = r + outs;
    opt::dead_code(&mut bwd);
    let forward = Rc::new(Plan::new(fuse::fuse(fwd)));
    let mut bwd = fuse::fuse(bwd);
    defer_outer_products(&mut bwd);
    let backward = Rc::new(Plan::new(bwd));
    Ok(Vjp { forward, backward, result, outs, residuals: r })
}

/// A leaf's adjoint that is an outer product u ⊗ v (a weight's, of a product with a vector) is
/// returned as the pair `(u, v)` instead, which the record hands to the backward pass's outer
/// sums (ad/matmul.rs): all the calls' products for a weight are then one GEMM at the end, as
/// the unstaged pass makes them, rather than a matrix built and added per call.
fn defer_outer_products(p: &mut Program) {
    let Template::Tuple(grads) = &mut p.template else { return };
    let mut readers = vec![0u32; p.nodes.len()];
    for node in &p.nodes {
        if let Node::Apply(_, args) = node {
            args.iter().for_each(|&a| readers[a as usize] += 1);
        }
    }
    p.outputs.iter().for_each(|&o| readers[o as usize] += 1);
    let column = |k: &Kind| matches!(k, Kind::Tensor(DType::F32, s) if s.len() == 2 && s[1] == 1);
    let row = |k: &Kind| matches!(k, Kind::Tensor(DType::F32, s) if s.len() == 2 && s[0] == 1);
    for g in grads.iter_mut() {
        let Template::Out(k) = *g else { continue };
        let o = p.outputs[k] as usize;
        let Node::Apply(Op::Product { tx: false, ty: false, acc: false }, args) = &p.nodes[o] else { continue };
        let (u, v) = (args[0], args[1]);
        if readers[o] == 1 && column(&p.kinds[u as usize]) && row(&p.kinds[v as usize]) {
            p.outputs[k] = u;
            p.outputs.push(v);
            *g = Template::Tuple(vec![Template::Out(k), Template::Out(p.outputs.len() - 1)]);
        }
    }
    opt::dead_code(p);
}

fn count_outs(t: &Template) -> usize {
    match t {
        Template::Out(_) => 1,
        Template::Value(_) => 0,
        Template::Tuple(ts) | Template::Record(_, ts) | Template::List(ts) | Template::Con(_, _, ts) => {
            ts.iter().map(count_outs).sum()
        }
    }
}

/// `t` with its outputs numbered from `first` down to 0.
fn renumber(t: &Template, first: usize) -> Template {
    let all = |ts: &[Template]| ts.iter().map(|t| renumber(t, first)).collect();
    match t {
        Template::Out(k) => Template::Out(k - first),
        Template::Value(v) => Template::Value(v.clone()),
        Template::Tuple(ts) => Template::Tuple(all(ts)),
        Template::Record(names, ts) => Template::Record(names.clone(), all(ts)),
        Template::List(ts) => Template::List(all(ts)),
        Template::Con(tag, name, ts) => Template::Con(*tag, name.clone(), all(ts)),
    }
}

impl Vjp {
    /// Runs the forward program on the argument's leaves: `f`'s result, its traced leaves
    /// tracked at `tag`, and the record whose reverse rule is the backward program, adding
    /// into `inputs` (the argument's cells at `tag`, one per leaf the program differentiates).
    pub fn call(&self, leaves: Vec<Value>, inputs: Vec<Rc<Tracked>>, tag: u32) -> FResult<(Value, AdjFrame)> {
        let Value::Tuple(all) = self.forward.run(leaves)? else {
            return Err(Fault::internal("a staged forward program returned no tuple"));
        };
        let mut all = Rc::try_unwrap(all).unwrap_or_else(|shared| (*shared).clone());
        let residuals = all.split_off(self.outs);
        let outs: Vec<Rc<Tracked>> =
            all.into_iter().map(|primal| Rc::new(Tracked { tag, primal, adj: RefCell::new(None) })).collect();
        let tracked: Vec<Value> = outs.iter().map(|o| Value::Tracked(o.clone())).collect();
        let y = exec::build(&self.result, &tracked);
        let frame = StagedFrame { outs, inputs, residuals, backward: self.backward.clone() };
        Ok((y, AdjFrame::Staged(Box::new(frame))))
    }
}
