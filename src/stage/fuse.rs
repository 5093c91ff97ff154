//! Matrix products as the machine's own reverse rule of `@` computes them, after optimisation:
//! - `x @ transpose y` (the adjoint `g @ bᵀ`, and `aᵀ @ g`) reads the transposed operand through
//!   a strided view, so the executor makes no transposed copy (`Op::Product`'s `tx`/`ty`);
//! - `acc + x' @ y'` (a gradient gathering a second contribution) computes the product into the
//!   accumulator's buffer, `out = x' @ y' + out`, with no temporary for the product.
//!
//! - `acc + ScatterRow(k) x` (the reverse rule of `row`, one row per step of an RNN gathering
//!   into one matrix) adds x into row k of the accumulator's buffer (`Op::AddRow`), instead of
//!   spreading it into a fresh matrix of zeros and adding the two.
//!
//! The products are one call of the tensor library's GEMM (`cpu::product_into`), the kernel the machine
//! calls when it runs the same reverse rule unstaged (ad/matmul.rs) — so a staged gradient is
//! computed the way the interpreter computes it. Where the kernel cannot take the operands
//! (another dtype, the GPU), the executor computes the unfused operations instead.

use super::ir::{Args, Kind, Node, Op, Program};
use crate::core::Prim;
use crate::tensor::{DType, TOp};

/// How many nodes (and outputs) read each node.
pub(super) fn readers(p: &Program) -> Vec<u32> {
    let mut uses = vec![0u32; p.nodes.len()];
    for node in &p.nodes {
        if let Node::Apply(_, args) = node {
            args.iter().for_each(|&a| uses[a as usize] += 1);
        }
    }
    p.outputs.iter().for_each(|&o| uses[o as usize] += 1);
    uses
}

pub fn fuse(mut p: Program) -> Program {
    // Products, rows and chains are all tensor operations: a program of Floats alone (W1's
    // 1.35M nodes) has nothing here, and two passes over it would cost its first call ~3%.
    if !p.has_tensors() {
        return p;
    }
    let n = p.nodes.len();
    let mut uses = readers(&p);
    let mut changed = false;
    for i in 0..n {
        let fused = match &p.nodes[i] {
            Node::Apply(Op::T(t), args)
                if **t == TOp::MatMul && args.len() == 2 && products(&p, args[0], args[1], i) =>
            {
                let (x, tx) = through_transpose(&p, args[0]);
                let (y, ty) = through_transpose(&p, args[1]);
                Some((Op::Product { tx, ty, acc: false }, Args::from(vec![x, y])))
            }
            Node::Apply(Op::Bin(Prim::Add), args) if args.len() == 2 => {
                // The product is the operand read only here (IEEE addition commutes exactly).
                let acc_of = |acc: u32, prod: u32| match &p.nodes[prod as usize] {
                    Node::Apply(Op::Product { tx, ty, acc: false }, xy)
                        if uses[prod as usize] == 1
                            && p.kinds[acc as usize] == p.kinds[i]
                            && p.kinds[prod as usize] == p.kinds[i] =>
                    {
                        Some((Op::Product { tx: *tx, ty: *ty, acc: true }, Args::from(vec![acc, xy[0], xy[1]])))
                    }
                    _ => None,
                };
                // A row spread into zeros (`row`'s reverse rule) and added: added in place.
                let row_of = |acc: u32, spread: u32| match &p.nodes[spread as usize] {
                    Node::Apply(Op::T(t), x)
                        if uses[spread as usize] == 1
                            && x.len() == 1
                            && matches!(p.kinds[i], Kind::Tensor(DType::F32 | DType::F64, _))
                            && p.kinds[acc as usize] == p.kinds[i]
                            && p.kinds[spread as usize] == p.kinds[i] =>
                    {
                        match **t {
                            TOp::ScatterRow(k, _) => {
                                Some((Op::AddRow(u32::try_from(k).ok()?), Args::from(vec![acc, x[0]])))
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                acc_of(args[0], args[1])
                    .or_else(|| acc_of(args[1], args[0]))
                    .or_else(|| row_of(args[0], args[1]))
                    .or_else(|| row_of(args[1], args[0]))
            }
            _ => None,
        };
        if let Some((op, args)) = fused {
            if let Node::Apply(_, old) = &p.nodes[i] {
                old.iter().for_each(|&a| uses[a as usize] -= 1);
            }
            args.iter().for_each(|&a| uses[a as usize] += 1);
            p.nodes[i] = Node::Apply(op, args);
            changed = true;
        }
    }
    // The transposes and products now read by nobody go.
    if changed {
        super::opt::dead_code(&mut p);
        p = outer_sums(p);
    }
    super::chains::chains(p)
}

/// A column times a row: `(u, row)` for `reshape u [n, 1] @ row` with `row = reshape v [1, m]`, the form the
/// reverse rule of a matrix–vector product gives a weight's contribution.
fn outer(p: &Program, x: u32, y: u32) -> Option<(u32, u32)> {
    let Node::Apply(_, under) = &p.nodes[x as usize] else { return None };
    // float32 only, as the machine's rule (another dtype's outer products it adds one by one,
    // and so does the staged program then, to give the same numbers).
    let reshaped = |i: u32, col: bool| match (&p.nodes[i as usize], &p.kinds[i as usize]) {
        (Node::Apply(Op::T(t), a), Kind::Tensor(DType::F32, s))
            if matches!(**t, TOp::Reshape(_)) && a.len() == 1 && s.len() == 2 =>
        {
            let unit = if col { s[1] } else { s[0] };
            (unit == 1).then_some(i)
        }
        _ => None,
    };
    // The column's own operand (the vector u), which the stacked product reads as a row.
    Some((reshaped(x, true).map(|_| under[0])?, reshaped(y, false)?))
}

/// A weight's outer-product contributions, summed as one product, as the machine's reverse
/// rule does (ad/matmul.rs, `OuterSums`): the chain `c₁ = u₁ ⊗ v₁` (or `acc + u₁ ⊗ v₁`),
/// `cₖ = cₖ₋₁ + uₖ ⊗ vₖ`, each link read only by the next, becomes `[u₁ … u_K] @ [v₁; …; v_K]`
/// (`Uᵀ V`, the vectors stacked as rows): one compute-bound GEMM instead of K rank-1 updates of
/// the whole matrix (an RNN's weight gets one per time step).
fn outer_sums(p: Program) -> Program {
    let n = p.nodes.len();
    let uses = readers(&p);
    // An outer-product node: its accumulator (if any) and its column and row.
    let link = |i: usize| match &p.nodes[i] {
        Node::Apply(Op::Product { tx: false, ty: false, acc }, args) => {
            let (acc_arg, x, y) = if *acc { (Some(args[0]), args[1], args[2]) } else { (None, args[0], args[1]) };
            outer(&p, x, y).map(|uv| (acc_arg, uv))
        }
        _ => None,
    };
    // Each link's chain so far: (its first link's accumulator, the vectors u, the rows); a link
    // extends its accumulator's chain when that accumulator is a link read only here.
    type Chain = (Option<u32>, Vec<u32>, Vec<u32>);
    let mut chains: Vec<Option<Chain>> = vec![None; n];
    let mut extended = vec![false; n];
    for i in 0..n {
        let Some((acc, (u, v))) = link(i) else { continue };
        let mut chain = match acc {
            Some(a) if uses[a as usize] == 1 && chains[a as usize].is_some() => {
                extended[a as usize] = true;
                chains[a as usize].take().unwrap_or_default()
            }
            _ => (acc, Vec::new(), Vec::new()),
        };
        chain.1.push(u);
        chain.2.push(v);
        chains[i] = Some(chain);
    }
    // Each chain's end with the weight's shape [n, m] (float32, as `outer` checked).
    let mut ends: Vec<(usize, Chain, usize, usize)> = Vec::new();
    for (i, c) in chains.into_iter().enumerate() {
        match (c, &p.kinds[i]) {
            (Some(c), Kind::Tensor(_, s)) if c.1.len() >= 2 && !extended[i] && s.len() == 2 => {
                ends.push((i, c, s[0], s[1]))
            }
            _ => {}
        }
    }
    if ends.is_empty() {
        return p;
    }
    // Rebuild, each chain's last link replaced by the two concatenations and one product.
    let Program { nodes, kinds, inputs, outputs, template } = p;
    let mut out = Program { nodes: Vec::new(), kinds: Vec::new(), inputs, outputs: Vec::new(), template };
    let mut to = vec![0u32; n];
    let mut ends = ends.into_iter().peekable();
    for (i, (node, kind)) in nodes.into_iter().zip(kinds).enumerate() {
        let node = match ends.next_if(|(end, ..)| *end == i) {
            Some((_, (acc, us, rows), n, m)) => {
                // U's rows are the vectors u, as the machine stacks them, and the product is
                // Uᵀ V, its call.
                let k = us.len();
                let us: Vec<u32> = us
                    .iter()
                    .map(|&u| append(&mut out, TOp::Reshape(vec![1, n]), vec![to[u as usize]], [1, n]))
                    .collect();
                let u = append(&mut out, TOp::Concat(0), us, [k, n]);
                let v = append(&mut out, TOp::Concat(0), rows.iter().map(|&r| to[r as usize]).collect(), [k, m]);
                match acc {
                    Some(a) => {
                        Node::Apply(Op::Product { tx: true, ty: false, acc: true }, vec![to[a as usize], u, v].into())
                    }
                    None => Node::Apply(Op::Product { tx: true, ty: false, acc: false }, vec![u, v].into()),
                }
            }
            None => match node {
                Node::Apply(op, mut args) => {
                    args.iter_mut().for_each(|a| *a = to[*a as usize]);
                    Node::Apply(op, args)
                }
                other => other,
            },
        };
        to[i] = out.nodes.len() as u32;
        out.nodes.push(node);
        out.kinds.push(kind);
    }
    out.outputs = outputs.iter().map(|&o| to[o as usize]).collect();
    super::opt::dead_code(&mut out);
    out
}

/// Appends `op` on `args`, a float32 matrix of `shape`.
fn append(out: &mut Program, op: TOp, args: Vec<u32>, shape: [usize; 2]) -> u32 {
    out.nodes.push(Node::Apply(Op::T(Box::new(op)), args.into()));
    out.kinds.push(Kind::Tensor(DType::F32, shape.to_vec().into()));
    (out.nodes.len() - 1) as u32
}

/// Whether `a @ b` (node `at`) is a product the GEMM computes in place: float operands of
/// one dtype, matrices or vectors, or stacks of matrices with the result's batch axes (no
/// broadcast batch), and a tensor result (a vector-by-vector product is a Float).
fn products(p: &Program, a: u32, b: u32, at: usize) -> bool {
    let float_tensor = |i: usize| match &p.kinds[i] {
        Kind::Tensor(d @ (DType::F32 | DType::F64), s) => Some((*d, s.as_slice())),
        _ => None,
    };
    let (Some((da, sa)), Some((db, sb)), Some((dr, sr))) =
        (float_tensor(a as usize), float_tensor(b as usize), float_tensor(at))
    else {
        return false;
    };
    let one_dtype = da == db && db == dr;
    let shapes = match (sa.len(), sb.len(), sr.len()) {
        (1..=2, 1..=2, _) => true,
        (r, r2, r3) if r > 2 && r2 == r && r3 == r => sa[..r - 2] == sr[..r - 2] && sb[..r - 2] == sr[..r - 2],
        _ => false,
    };
    one_dtype && shapes
}

/// What a product's operand `t` reads, and whether transposed: through every node that swaps
/// the last two axes of a matrix or of a stack of them (an odd number of swaps is one
/// transpose, read through a strided view; an even number, none).
fn through_transpose(p: &Program, mut t: u32) -> (u32, bool) {
    let mut flipped = false;
    while let Some(x) = swapped(p, t) {
        (t, flipped) = (x, !flipped);
    }
    (t, flipped)
}

/// Whether a permutation only swaps the last two axes (a stack of matrices transposed): the
/// swap a product reads in place.
pub(super) fn swaps_last_two(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2 && perm[..r - 2].iter().enumerate().all(|(i, &a)| a == i) && perm[r - 2..] == [r - 1, r - 2]
}

/// `t`'s operand when `t` swaps the last two axes of a matrix or of a stack of them.
fn swapped(p: &Program, t: u32) -> Option<u32> {
    let swaps = |op: &TOp, rank: usize| match op {
        TOp::Transpose => rank == 2,
        TOp::Permute(perm) => rank > 2 && perm.len() == rank && swaps_last_two(perm),
        _ => false,
    };
    match &p.nodes[t as usize] {
        Node::Apply(Op::T(op), args)
            if args.len() == 1 && matches!(&p.kinds[args[0] as usize], Kind::Tensor(_, s) if swaps(op, s.len())) =>
        {
            Some(args[0])
        }
        _ => None,
    }
}
