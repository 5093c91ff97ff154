//! The staged program: typed, shaped, SSA. Each node is defined once, from earlier nodes, and
//! has one kind (a Float, or a tensor of a dtype and shape); the program's result is a
//! template of the function's output structure whose leaves are nodes or constants.

use crate::core::Prim;
use crate::runtime::value::Value;
use crate::tensor::chain::{Arg, Chain};
use crate::tensor::{fmt_shape, DType, TOp, Un};
use std::fmt;
use std::rc::Rc;

/// What a node computes from its operands: one of the operations the machine itself runs on
/// plain values (so the executor and the interpreter share one definition of each).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `+ - * / **` on Floats and tensors (broadcasting).
    Bin(Prim),
    /// A math function on every element (or on a Float).
    Un(Un),
    /// An operation of the tensor library's op table (boxed: its parameters would make
    /// every node of a scalar trace twice the size).
    T(Box<TOp>),
    /// `x' @ y'` (operands x, y) or `acc + x' @ y'` (operands acc, x, y), where x' is x or,
    /// with `tx`, its transpose (likewise y'): the fused products of `fuse`, one GEMM call.
    Product { tx: bool, ty: bool, acc: bool },
    /// `acc + ScatterRow(k) x` (operands acc, x): row k of the accumulator grows by x, in the
    /// accumulator's buffer (`fuse`: the reverse pass of `row` gathering one row per step).
    AddRow(u32),
    /// Elementwise operations on the node's operands in one pass (`chains`).
    Chain(Rc<Chained>),
}

/// An elementwise chain and the shape of its result.
#[derive(Debug, PartialEq)]
pub struct Chained {
    pub chain: Chain,
    /// The shape of the chain's elements.
    pub shape: Vec<usize>,
    /// The reduction that takes the chain's elements (the node's result is then the
    /// reduction's: a Float or a smaller tensor), computed as the chain goes, so the chain's
    /// elements are never stored (one that `Reduce::of` takes, on `shape`).
    pub reduce: Option<TOp>,
}

/// A node's operands. Nearly every node has one or two, so up to three are held in the node
/// itself (more are rare, and behind a pointer): a million-node trace then has no allocation
/// per node, and the passes that walk it (the optimiser, the reroller, native compilation)
/// read operands from the node array rather than chasing a pointer per node.
#[derive(Clone)]
pub struct Args(Repr);

#[derive(Clone)]
enum Repr {
    Few(u8, [u32; 3]),
    /// Boxed twice, so that the node stays 32 bytes (a `Box<[u32]>` is two words).
    #[allow(clippy::box_collection)]
    Many(Box<Vec<u32>>),
}

impl Args {
    pub fn new() -> Args {
        Args(Repr::Few(0, [0; 3]))
    }

    #[inline]
    pub fn push(&mut self, a: u32) {
        match &mut self.0 {
            Repr::Few(n, xs) if (*n as usize) < xs.len() => {
                xs[*n as usize] = a;
                *n += 1;
            }
            _ => self.push_many(a),
        }
    }

    #[cold]
    #[inline(never)]
    fn push_many(&mut self, a: u32) {
        let mut all = self.to_vec();
        all.push(a);
        self.0 = Repr::Many(Box::new(all));
    }
}

impl Default for Args {
    fn default() -> Self {
        Args::new()
    }
}

impl std::ops::Deref for Args {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match &self.0 {
            Repr::Few(n, xs) => &xs[..*n as usize],
            Repr::Many(xs) => xs,
        }
    }
}

impl std::ops::DerefMut for Args {
    fn deref_mut(&mut self) -> &mut [u32] {
        match &mut self.0 {
            Repr::Few(n, xs) => &mut xs[..*n as usize],
            Repr::Many(xs) => xs,
        }
    }
}

impl PartialEq for Args {
    fn eq(&self, other: &Args) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl FromIterator<u32> for Args {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Args {
        let mut args = Args::new();
        iter.into_iter().for_each(|a| args.push(a));
        args
    }
}

impl From<Vec<u32>> for Args {
    fn from(v: Vec<u32>) -> Args {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Args {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

// Traces run to millions of nodes: their size is most of a first call's memory traffic.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() == 32 && std::mem::size_of::<Kind>() == 16);

#[derive(Clone)]
pub enum Node {
    /// The k-th Float or tensor leaf of the argument, in the signature's order.
    Input(usize),
    /// A Float or tensor the trace met as a plain value (a literal, a captured value, a zero
    /// the derivative rules made).
    Const(Value),
    Apply(Op, Args),
}

#[derive(Clone, PartialEq)]
pub enum Kind {
    Float,
    /// The shape boxed twice, so that a kind is two words (a trace's Floats carry one each).
    #[allow(clippy::box_collection)]
    Tensor(DType, Box<Vec<usize>>),
}

impl Kind {
    pub fn of(v: &Value) -> Kind {
        match v {
            Value::Tensor(t) => Kind::of_tensor(t),
            _ => Kind::Float,
        }
    }

    pub fn of_tensor(t: &crate::tensor::Tensor) -> Kind {
        Kind::Tensor(t.dtype(), Box::new(t.shape().to_vec()))
    }
}

/// The output structure of the staged function, with its staged leaves numbered (`Out(k)` is
/// the program's k-th output).
#[derive(Clone)]
pub enum Template {
    Out(usize),
    /// A part of the result that no input reaches (an Int, a String, a constant).
    Value(Value),
    Tuple(Vec<Template>),
    Record(Rc<[Rc<str>]>, Vec<Template>),
    List(Vec<Template>),
    Con(u32, Rc<str>, Vec<Template>),
}

#[derive(Clone)]
pub struct Program {
    pub nodes: Vec<Node>,
    pub kinds: Vec<Kind>,
    pub inputs: usize,
    pub outputs: Vec<u32>,
    pub template: Template,
}

impl Program {
    /// Whether any node is a tensor (else the program is Floats alone: W1's).
    pub fn has_tensors(&self) -> bool {
        self.kinds.iter().any(|k| matches!(k, Kind::Tensor(..)))
    }

    /// The number of nodes that compute (neither inputs nor constants): what the
    /// optimisations shrink.
    pub fn work(&self) -> usize {
        self.nodes.iter().filter(|n| matches!(n, Node::Apply(..))).count()
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Kind::Float => write!(f, "Float"),
            Kind::Tensor(d, s) => write!(f, "{} {}", d.name(), fmt_shape(s)),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Op::Bin(p) => write!(f, "{}", format!("{p:?}").to_lowercase()),
            Op::Un(u) => write!(f, "{}", format!("{u:?}").to_lowercase()),
            Op::T(t) => write!(f, "{}", t.name()),
            // BLAS's names: `gemm_nt` is x @ yᵀ; `+=` adds into the first operand.
            Op::Product { tx, ty, acc } => {
                let t = |on: bool| if on { 't' } else { 'n' };
                write!(f, "gemm_{}{}{}", t(*tx), t(*ty), if *acc { " +=" } else { "" })
            }
            Op::AddRow(k) => write!(f, "add_row {k}"),
            // `chain[s0 = add #0 #1; s1 = tanh s0]`: #k is the node's k-th operand, sj a step's
            // result; the last step's is the node's.
            Op::Chain(c) => {
                let arg = |a: Arg| match a {
                    Arg::In(k) => format!("#{k}"),
                    Arg::At(j) => format!("s{j}"),
                };
                let steps: Vec<String> = c
                    .chain
                    .steps()
                    .iter()
                    .enumerate()
                    .map(|(j, &(step, args))| {
                        let read: Vec<String> = args[..step.arity()].iter().map(|&a| arg(a)).collect();
                        format!("s{j} = {} {}", super::chains::op_of(step), read.join(" "))
                    })
                    .collect();
                write!(f, "chain[{}]", steps.join("; "))?;
                match &c.reduce {
                    Some(op) => write!(f, " into {}", op.name()),
                    None => Ok(()),
                }
            }
        }
    }
}

impl fmt::Display for Program {
    /// One line per node, `%i = op %a %b : kind`, then the outputs.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, (node, kind)) in self.nodes.iter().zip(&self.kinds).enumerate() {
            write!(f, "  %{i} = ")?;
            match node {
                Node::Input(k) => write!(f, "input {k}")?,
                Node::Const(Value::Float(x)) => write!(f, "const {x:?}")?,
                Node::Const(_) => write!(f, "const <tensor>")?,
                Node::Apply(op, args) => {
                    write!(f, "{op}")?;
                    for a in args {
                        write!(f, " %{a}")?;
                    }
                }
            }
            writeln!(f, " : {kind}")?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| format!("%{o}")).collect();
        writeln!(f, "  return {}", outs.join(", "))
    }
}
