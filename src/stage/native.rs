//! Native code for the scalar part of a staged program, compiled with Cranelift (why
//! Cranelift: docs/design.md, "Native code").
//!
//! Every Float node of a program has a slot in one `f64` array, indexed by node number, whose
//! constants are written once when the program is compiled. A run of consecutive Float
//! operations becomes native code over that array: straight-line code where the run does not
//! repeat, and a loop where `reroll` found one, so W1's 100,000 traced iterations run as a
//! loop of one iteration's instructions. A node's result is stored in its slot when some
//! reader takes it from there (the executor, later code, a later iteration reading the tape);
//! within straight code and within one iteration of a loop operands come from registers, a
//! value carried from one iteration to the next is a loop block parameter, and a value from
//! before a loop is loaded once, ahead of it.
//!
//! The arithmetic is the interpreter's, bit for bit: `+ - * /`, negation, `abs` and `sqrt`
//! are IEEE operations in both; every other math function, and `**`, is a call to the very
//! Rust function the interpreter calls (`Un::eval`, `f64::powf`), except that `sin` and `cos`
//! of one operand are one call of libm's `sincos` where that is checked to give the same bits
//! (`sincos`); the derivative rules' masks are compares and selects with the interpreter's NaN
//! behaviour. Nothing is reassociated or fused (Cranelift does neither on floats).

use super::ir::{Kind, Node, Op, Program};
use super::reroll::{self, Affine, Piece};
use crate::core::Prim;
use crate::tensor::{TOp, Un};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, InstBuilder, MemFlagsData, SigRef, StackSlot, StackSlotData, StackSlotKind, Value as CValue,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Module};
use std::collections::{HashMap, HashSet};

/// The most nodes one native function holds: longer runs are split, which keeps Cranelift's
/// compile time linear in the program.
const FUNCTION_NODES: usize = 2048;

/// A compiled function: computes its nodes into the slot array.
pub type NativeFn = unsafe extern "C" fn(*mut f64);

/// The math functions native code calls (by their index here, `UN_FNS`).
const UNARY: [Un; 14] = [
    Un::Neg,
    Un::Sin,
    Un::Cos,
    Un::Tan,
    Un::Exp,
    Un::Log,
    Un::Sqrt,
    Un::Tanh,
    Un::Sigmoid,
    Un::Relu,
    Un::Abs,
    Un::Erf,
    Un::Gelu,
    Un::GeluGrad,
];

/// `UNARY[K]`, the interpreter's own `Un::eval`, as an entry point of its own: native code
/// calls the function directly rather than one entry point that dispatches on a code (a
/// staged W1 makes 200,000 of these calls per run).
extern "C" fn un_fn<const K: usize>(x: f64) -> f64 {
    UNARY[K].eval(x)
}

const UN_FNS: [extern "C" fn(f64) -> f64; 14] = [
    un_fn::<0>,
    un_fn::<1>,
    un_fn::<2>,
    un_fn::<3>,
    un_fn::<4>,
    un_fn::<5>,
    un_fn::<6>,
    un_fn::<7>,
    un_fn::<8>,
    un_fn::<9>,
    un_fn::<10>,
    un_fn::<11>,
    un_fn::<12>,
    un_fn::<13>,
];

extern "C" fn pow_call(x: f64, y: f64) -> f64 {
    x.powf(y)
}

/// libm's `sincos`, which computes `sin x` and `cos x` sharing one argument reduction: a
/// program that takes both of one value (a `sin` and its derivative, the reverse pass's
/// `cos`, which the rule records beside it) makes one call where it made two, about 40% less
/// time in libm. Only where libm is glibc's, whose `sincos` runs the very code of its `sin`
/// and `cos` (one source, and the same CPU-specific variant chosen at load time); `exact`
/// still checks that before anything relies on it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod sincos {
    use crate::tensor::Un;
    use std::sync::OnceLock;

    extern "C" {
        fn sincos(x: f64, sin: *mut f64, cos: *mut f64);
    }

    /// The function native code calls: `(x, &mut sin, &mut cos)`.
    pub fn address() -> *const () {
        sincos as *const ()
    }

    fn call(x: f64) -> (f64, f64) {
        let (mut s, mut c) = (0.0, 0.0);
        // SAFETY: glibc's sincos writes one f64 through each pointer.
        unsafe { sincos(x, &mut s, &mut c) };
        (s, c)
    }

    /// Whether `sincos` gives the interpreter's `sin` and `cos` (`Un::eval`) to the bit, on a
    /// sample across the magnitudes (each argument reduction path) and the special values.
    /// A libm whose `sincos` were a different variant from its `sin` (one contracting to
    /// FMA, the other not) would differ on a good share of arguments: then native code keeps
    /// two calls. Checked once per process (~0.1 ms), when a program first has a pair.
    pub fn exact() -> bool {
        static EXACT: OnceLock<bool> = OnceLock::new();
        *EXACT.get_or_init(|| {
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut uniform = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64
            };
            let specials = [0.0, -0.0, 5e-324, 1e-300, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MAX];
            let mut xs: Vec<f64> = specials.to_vec();
            // Few of the huge ones: their reduction (`__branred`) takes microseconds, and a
            // variant's rounding shows in the polynomials every magnitude ends in.
            let scales = [(1e-6, 256), (0.5, 256), (1.0, 256), (4.0, 256), (10.0, 256), (100.0, 256), (1e5, 256)];
            for (scale, n) in scales.into_iter().chain([(1e9, 4), (1e22, 4), (1e300, 4)]) {
                xs.extend((0..n).map(|_| scale * (2.0 * uniform() - 1.0)));
            }
            let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            xs.iter().all(|&x| {
                let (s, c) = call(x);
                same(s, Un::Sin.eval(x)) && same(c, Un::Cos.eval(x))
            })
        })
    }
}

/// The address of a `sincos` giving the interpreter's numbers, if this host has one.
fn sincos_fn() -> Option<*const ()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if sincos::exact() {
        return Some(sincos::address());
    }
    None
}

/// Whether node `i` is an operation native code computes: a Float result of Float operands,
/// by an operation this module knows.
pub fn is_native(p: &Program, i: usize) -> bool {
    let Node::Apply(op, args) = &p.nodes[i] else { return false };
    let floats = p.kinds[i] == Kind::Float && args.iter().all(|&a| p.kinds[a as usize] == Kind::Float);
    floats
        && match op {
            Op::Bin(b) => matches!(b, Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Pow) && args.len() == 2,
            Op::Un(u) => UNARY.contains(u) && args.len() == 1,
            Op::T(t) => match **t {
                TOp::Step | TOp::Sign => args.len() == 1,
                TOp::Mask => args.len() == 2,
                _ => false,
            },
            Op::Product { .. } | Op::AddRow(_) | Op::Chain(_) => false,
        }
}

/// The native code of a program: its functions, and the memory that holds them.
pub struct Code {
    module: Option<JITModule>,
    pub functions: Vec<NativeFn>,
    /// How the runs were compiled, for `DP_JIT_LOG`: loops, and nodes in loops.
    pub loops: usize,
    pub looped_nodes: usize,
}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the functions are only reachable through this `Code` (the plan that
            // calls them owns it), so none can run after this.
            unsafe { module.free_memory() }
        }
    }
}

/// The functions for `runs` (ranges of nodes whose operations are all `is_native`, with
/// constants and inputs between them): each run's functions, in order, are
/// `functions[first..first + count]` for its `(first, count)` in the second result.
pub fn compile(p: &Program, runs: &[(usize, usize)]) -> Result<(Code, Vec<(usize, usize)>), String> {
    if p.nodes.len() >= (i32::MAX as usize) / 8 {
        return Err("the program is too large for 32-bit slot offsets".into());
    }
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| f.set(k, v).map_err(|e| e.to_string());
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    let isa = cranelift_native::builder()
        .map_err(|e| e.to_string())?
        .finish(settings::Flags::new(flags))
        .map_err(|e| e.to_string())?;
    let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ptr));
    let mut un_sig = module.make_signature();
    un_sig.params.push(AbiParam::new(types::F64));
    un_sig.returns.push(AbiParam::new(types::F64));
    let mut pow_sig = module.make_signature();
    pow_sig.params.extend([AbiParam::new(types::F64), AbiParam::new(types::F64)]);
    pow_sig.returns.push(AbiParam::new(types::F64));
    let mut sincos_sig = module.make_signature();
    sincos_sig.params.extend([AbiParam::new(types::F64), AbiParam::new(ptr), AbiParam::new(ptr)]);

    let functions: Vec<Vec<Vec<Piece>>> =
        runs.iter().map(|&(start, end)| groups(reroll::pieces(&p.nodes, start, end))).collect();
    let (stored, straight) = stored(p, &functions);

    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut ids = Vec::new();
    let mut spans = Vec::new();
    let (mut loops, mut looped_nodes) = (0, 0);
    for run in functions {
        let first = ids.len();
        for group in run {
            for piece in &group {
                if let Piece::Loop { period, count, .. } = piece {
                    loops += 1;
                    looped_nodes += (*period * *count) as usize;
                }
            }
            ctx.func.signature = sig.clone();
            {
                let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
                let un = b.import_signature(un_sig.clone());
                let pow = b.import_signature(pow_sig.clone());
                let sincos = b.import_signature(sincos_sig.clone());
                let f = ids.len() as u32;
                Emitter {
                    p,
                    stored: &stored,
                    straight: &straight,
                    f,
                    b: &mut b,
                    ptr,
                    un,
                    pow,
                    sincos,
                    slots: None,
                    local: HashMap::new(),
                    pairs: HashSet::new(),
                    trig: HashMap::new(),
                    trig_slot: None,
                }
                .function(&group);
                b.finalize(module.target_config());
            }
            let id = module.declare_anonymous_function(&sig).map_err(|e| e.to_string())?;
            module.define_function(id, &mut ctx).map_err(|e| format!("{e:?}"))?;
            module.clear_context(&mut ctx);
            ids.push(id);
        }
        spans.push((first, ids.len() - first));
    }
    module.finalize_definitions().map_err(|e| e.to_string())?;
    let functions = ids
        .iter()
        .map(|&id| {
            let f = module.get_finalized_function(id);
            // SAFETY: each function was defined with `sig`, `extern "C" fn(*mut f64)` on the
            // host's default calling convention.
            unsafe { std::mem::transmute::<*const u8, NativeFn>(f) }
        })
        .collect();
    Ok((Code { module: Some(module), functions, loops, looped_nodes }, spans))
}

/// The pieces split into functions of at most `FUNCTION_NODES` nodes (a longer straight
/// run is cut; a loop's body counts once).
fn groups(pieces: Vec<Piece>) -> Vec<Vec<Piece>> {
    let mut out = vec![Vec::new()];
    let mut size = 0;
    let mut push = |piece: Piece, n: usize, out: &mut Vec<Vec<Piece>>| {
        if size + n > FUNCTION_NODES && size > 0 {
            out.push(Vec::new());
            size = 0;
        }
        size += n;
        if let Some(last) = out.last_mut() {
            last.push(piece);
        }
    };
    for piece in pieces {
        match piece {
            Piece::Straight { start, end } => {
                let mut s = start;
                while s < end {
                    let e = end.min(s + FUNCTION_NODES as u32);
                    push(Piece::Straight { start: s, end: e }, (e - s) as usize, &mut out);
                    s = e;
                }
            }
            Piece::Loop { period, .. } => {
                let n = period as usize;
                push(piece, n, &mut out);
            }
        }
    }
    out.retain(|g| !g.is_empty());
    out
}

/// How native code reads operand `a` of a node: from a register (`Reg`), from the slot array,
/// or (`Carried`) from the register the loop passes from one iteration to the next. A
/// register holds a value computed earlier in the same function by straight code (`straight`
/// says which nodes those are), or earlier in the same iteration of a loop; a carried value is
/// the previous iteration's (its first iteration reads the node before the loop, `a` itself).
#[derive(PartialEq)]
enum Read {
    Reg,
    Carried,
    Memory,
}

/// A straight-code read of `a` by a node of function `f`.
fn straight_read(straight: &[u32], f: u32, a: u32) -> Read {
    if straight[a as usize] == f {
        Read::Reg
    } else {
        Read::Memory
    }
}

/// A loop-body read: body node `i` of the loop `start..` with `period`, operand `o`.
fn loop_read(p: &Program, straight: &[u32], f: u32, start: u32, period: u32, i: u32, o: &Affine) -> Read {
    let computed = |a: u32| matches!(p.nodes[a as usize], Node::Apply(..));
    if o.stride == period as i64 && o.base >= start && o.base < i && computed(o.base) {
        Read::Reg
    } else if o.stride == period as i64 && o.base < start && o.base + period >= start && computed(o.base + period) {
        Read::Carried
    } else if o.stride == 0 {
        straight_read(straight, f, o.base)
    } else {
        Read::Memory
    }
}

/// Which nodes' results must be stored in the slot array: those some reader takes from
/// memory (another function, another iteration, the executor, the program's outputs). The
/// rest live in registers only, which keeps a loop's traffic to what its tape needs.
fn stored(p: &Program, functions: &[Vec<Vec<Piece>>]) -> (Vec<bool>, Vec<u32>) {
    let n = p.nodes.len();
    const NONE: u32 = u32::MAX;
    // The function computing each straight-code node, and each native node at all.
    let (mut straight, mut native) = (vec![NONE; n], vec![false; n]);
    for (f, group) in functions.iter().flatten().enumerate() {
        for piece in group {
            match piece {
                Piece::Straight { start, end } => {
                    for i in *start..*end {
                        straight[i as usize] = f as u32;
                        native[i as usize] = true;
                    }
                }
                Piece::Loop { start, period, count, .. } => {
                    native[*start as usize..(*start + period * count) as usize].fill(true);
                }
            }
        }
    }
    let mut memory = vec![false; n];
    for &o in &p.outputs {
        memory[o as usize] = true;
    }
    for (i, node) in p.nodes.iter().enumerate() {
        if let (false, Node::Apply(_, args)) = (native[i], node) {
            for &a in args {
                memory[a as usize] = true;
            }
        }
    }
    for (f, group) in functions.iter().flatten().enumerate() {
        let f = f as u32;
        for piece in group {
            match piece {
                Piece::Straight { start, end } => {
                    for i in *start..*end {
                        for &a in reroll::args(&p.nodes[i as usize]) {
                            if straight_read(&straight, f, a) == Read::Memory {
                                memory[a as usize] = true;
                            }
                        }
                    }
                }
                Piece::Loop { start, period, count, operands } => {
                    for (k, ops) in operands.iter().enumerate() {
                        for o in ops {
                            match loop_read(p, &straight, f, *start, *period, start + k as u32, o) {
                                Read::Memory => {
                                    for j in 0..*count as i64 {
                                        memory[(o.base as i64 + j * o.stride) as usize] = true;
                                    }
                                }
                                // The first iteration's value is the node before the loop.
                                Read::Carried if straight_read(&straight, f, o.base) == Read::Memory => {
                                    memory[o.base as usize] = true
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
    }
    // A loop body node is stored in every iteration or in none.
    for group in functions.iter().flatten() {
        for piece in group {
            if let Piece::Loop { start, period, count, .. } = piece {
                for k in 0..*period {
                    let any = (0..*count).any(|j| memory[(start + k + j * period) as usize]);
                    memory[(start + k) as usize] = any;
                }
            }
        }
    }
    (memory, straight)
}

struct Emitter<'a, 'b> {
    p: &'a Program,
    /// `stored(…)`: whether a node's result goes to its slot (a loop body node: its first
    /// iteration's entry speaks for all).
    stored: &'a [bool],
    /// `stored(…)`: the function computing each straight-code node, and this function.
    straight: &'a [u32],
    f: u32,
    b: &'a mut FunctionBuilder<'b>,
    ptr: types::Type,
    un: SigRef,
    pow: SigRef,
    sincos: SigRef,
    slots: Option<CValue>,
    /// Nodes this function computed in straight code: their values, usable anywhere after
    /// (straight code dominates what follows it).
    local: HashMap<u32, CValue>,
    /// The operands of the straight run or loop body being emitted that both a `sin` and a
    /// `cos` read (straight code names an operand with stride 0), and the results of the one
    /// `sincos` call made for each so far, with the stack slot that call writes to.
    pairs: HashSet<Affine>,
    trig: HashMap<Affine, (CValue, CValue)>,
    trig_slot: Option<StackSlot>,
}

/// The operands that both a `sin` and a `cos` among `(operation, first operand)` read.
fn trig_pairs<'a>(items: impl Iterator<Item = (&'a Op, Affine)>) -> HashSet<Affine> {
    let (mut sin, mut cos) = (HashSet::new(), HashSet::new());
    for (op, at) in items {
        match op {
            Op::Un(Un::Sin) => sin.insert(at),
            Op::Un(Un::Cos) => cos.insert(at),
            _ => false,
        };
    }
    sin.intersection(&cos).copied().collect()
}

impl Emitter<'_, '_> {
    fn function(mut self, pieces: &[Piece]) {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.slots = Some(self.b.block_params(entry)[0]);
        for piece in pieces {
            match piece {
                Piece::Straight { start, end } => self.straight(*start, *end),
                Piece::Loop { start, period, count, operands } => self.repeat(*start, *period, *count, operands),
            }
        }
        self.b.ins().return_(&[]);
        self.b.seal_all_blocks();
    }

    fn slots(&self) -> CValue {
        self.slots.unwrap_or_else(|| unreachable!("the entry block sets the slot pointer"))
    }

    fn load(&mut self, base: CValue, node: u32) -> CValue {
        self.b.ins().load(types::F64, MemFlagsData::trusted(), base, node as i32 * 8)
    }

    fn straight(&mut self, start: u32, end: u32) {
        let p = self.p;
        let nodes = &p.nodes[start as usize..end as usize];
        self.pairs = trig_pairs(nodes.iter().filter_map(|n| match n {
            Node::Apply(op, args) => Some((op, Affine { base: *args.first()?, stride: 0 })),
            _ => None,
        }));
        self.trig.clear();
        for i in start..end {
            let Node::Apply(op, args) = &self.p.nodes[i as usize] else { continue };
            let xs: Vec<CValue> = args
                .iter()
                .map(|&a| match (straight_read(self.straight, self.f, a), self.local.get(&a)) {
                    (Read::Reg, Some(&v)) => v,
                    _ => self.load(self.slots(), a),
                })
                .collect();
            let v = self.compute(op, &xs, args.first().map(|&base| Affine { base, stride: 0 }));
            if self.stored[i as usize] {
                let slots = self.slots();
                self.b.ins().store(MemFlagsData::trusted(), v, slots, i as i32 * 8);
            }
            self.local.insert(i, v);
        }
    }

    /// `count` iterations of the body `start..start + period`: iteration `j` computes the
    /// nodes `start + k + j·period`, reading each operand at its affine address. What does not
    /// change from one iteration to the next stays out of memory: a value carried from the
    /// previous iteration (an accumulator) is a parameter of the loop's block, and a value from
    /// before the loop (a weight, an input) is loaded once, ahead of it — the loop writes only
    /// its own nodes' slots, so no iteration changes those.
    fn repeat(&mut self, start: u32, period: u32, count: u32, operands: &[Vec<Affine>]) {
        let read = |e: &Self, k: usize, o: &Affine| loop_read(e.p, e.straight, e.f, start, period, start + k as u32, o);
        // The node before the loop, in a register of this function or from its slot.
        let outside = |e: &mut Self, a: u32| match (straight_read(e.straight, e.f, a), e.local.get(&a)) {
            (Read::Reg, Some(&v)) => v,
            _ => {
                let slots = e.slots();
                e.load(slots, a)
            }
        };
        let mut carried: Vec<u32> = Vec::new();
        let mut invariant: HashMap<u32, CValue> = HashMap::new();
        for (k, ops) in operands.iter().enumerate() {
            for o in ops {
                match read(self, k, o) {
                    Read::Carried if !carried.contains(&o.base) => carried.push(o.base),
                    // (A node of the loop's first iteration that all iterations read is
                    // loaded in the body, after that iteration stored it.)
                    Read::Reg | Read::Memory if o.stride == 0 && o.base < start && !invariant.contains_key(&o.base) => {
                        let v = outside(self, o.base);
                        invariant.insert(o.base, v);
                    }
                    _ => {}
                }
            }
        }
        let header = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let mut entry = vec![self.b.ins().iconst(types::I64, 0).into()];
        for &a in &carried {
            self.b.append_block_param(header, types::F64);
            entry.push(outside(self, a).into());
        }
        self.b.ins().jump(header, &entry);
        self.b.switch_to_block(header);
        let j = self.b.block_params(header)[0];
        let from_last: HashMap<u32, CValue> =
            carried.iter().copied().zip(self.b.block_params(header)[1..].iter().copied()).collect();
        // `slots + 8·stride·j`, once per stride the body uses.
        let mut bases: HashMap<i64, CValue> = HashMap::new();
        let mut base = |e: &mut Self, stride: i64| -> CValue {
            *bases.entry(stride).or_insert_with(|| {
                if stride == 0 {
                    e.slots()
                } else {
                    let off = e.b.ins().imul_imm_s(j, stride * 8);
                    let off = if e.ptr == types::I64 { off } else { e.b.ins().ireduce(e.ptr, off) };
                    let slots = e.slots();
                    e.b.ins().iadd(slots, off)
                }
            })
        };
        let mut body: Vec<Option<CValue>> = vec![None; period as usize];
        let p = self.p;
        let ops = |k: usize| match &p.nodes[(start as usize) + k] {
            Node::Apply(op, _) => operands[k].first().map(|&at| (op, at)),
            _ => None,
        };
        self.pairs = trig_pairs((0..operands.len()).filter_map(ops));
        self.trig.clear();
        for (k, ops) in operands.iter().enumerate() {
            let i = start + k as u32;
            let Node::Apply(op, _) = &self.p.nodes[i as usize] else { continue };
            let mut xs = Vec::with_capacity(ops.len());
            for o in ops {
                let reg = match read(self, k, o) {
                    _ if o.stride == 0 => invariant.get(&o.base).copied(),
                    Read::Reg => body[(o.base - start) as usize],
                    Read::Carried => from_last.get(&o.base).copied(),
                    Read::Memory => None,
                };
                let v = match reg {
                    Some(v) => v,
                    None => {
                        let at = base(self, o.stride);
                        self.load(at, o.base)
                    }
                };
                xs.push(v);
            }
            let v = self.compute(op, &xs, ops.first().copied());
            if self.stored[i as usize] {
                let at = base(self, period as i64);
                self.b.ins().store(MemFlagsData::trusted(), v, at, i as i32 * 8);
            }
            body[k] = Some(v);
        }
        let next = self.b.ins().iadd_imm_s(j, 1);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, next, count as i64);
        let mut again = vec![next.into()];
        for &a in &carried {
            let v = match body[(a + period - start) as usize] {
                Some(v) => v,
                None => unreachable!("a carried value is a computed node of the body"),
            };
            again.push(v.into());
        }
        self.b.ins().brif(more, header, &again, exit, &[]);
        self.b.switch_to_block(exit);
        // The body's values do not dominate what follows the loop.
        self.trig.clear();
        self.pairs.clear();
    }

    /// `op` on `xs`, whose first operand is `at`: a `sin` or `cos` whose partner is in the
    /// same run or body shares one `sincos` call with it.
    fn compute(&mut self, op: &Op, xs: &[CValue], at: Option<Affine>) -> CValue {
        if let (Op::Un(u @ (Un::Sin | Un::Cos)), &[x], Some(at)) = (op, xs, at) {
            if let Some((sin, cos)) = self.sin_cos(x, at) {
                return if *u == Un::Sin { sin } else { cos };
            }
        }
        self.op(op, xs)
    }

    /// `sin x` and `cos x` from one `sincos` call (made at the first of the two), when a
    /// pair reads `x` (operand `at`) and the host's `sincos` gives `sin`'s and `cos`'s bits.
    fn sin_cos(&mut self, x: CValue, at: Affine) -> Option<(CValue, CValue)> {
        if let Some(&pair) = self.trig.get(&at) {
            return Some(pair);
        }
        if !self.pairs.contains(&at) {
            return None;
        }
        let f = sincos_fn()?;
        let slot = match self.trig_slot {
            Some(slot) => slot,
            None => *self.trig_slot.insert(self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                16,
                3,
            ))),
        };
        let sin_at = self.b.ins().stack_addr(self.ptr, slot, 0);
        let cos_at = self.b.ins().stack_addr(self.ptr, slot, 8);
        let f = self.b.ins().iconst(self.ptr, f as i64);
        self.b.ins().call_indirect(self.sincos, f, &[x, sin_at, cos_at]);
        let sin = self.b.ins().stack_load(self.ptr, types::F64, slot, 0);
        let cos = self.b.ins().stack_load(self.ptr, types::F64, slot, 8);
        self.trig.insert(at, (sin, cos));
        Some((sin, cos))
    }

    fn constant(&mut self, x: f64) -> CValue {
        self.b.ins().f64const(x)
    }

    fn op(&mut self, op: &Op, xs: &[CValue]) -> CValue {
        match (op, xs) {
            (Op::Bin(Prim::Add), &[x, y]) => self.b.ins().fadd(x, y),
            (Op::Bin(Prim::Sub), &[x, y]) => self.b.ins().fsub(x, y),
            (Op::Bin(Prim::Mul), &[x, y]) => self.b.ins().fmul(x, y),
            (Op::Bin(Prim::Div), &[x, y]) => self.b.ins().fdiv(x, y),
            (Op::Bin(_), &[x, y]) => {
                let f = self.b.ins().iconst(self.ptr, pow_call as *const () as i64);
                let call = self.b.ins().call_indirect(self.pow, f, &[x, y]);
                self.b.inst_results(call)[0]
            }
            (Op::Un(Un::Neg), &[x]) => self.b.ins().fneg(x),
            (Op::Un(Un::Abs), &[x]) => self.b.ins().fabs(x),
            (Op::Un(Un::Sqrt), &[x]) => self.b.ins().sqrt(x),
            (Op::Un(u), &[x]) => {
                let code = UNARY.iter().position(|v| v == u).unwrap_or_default();
                let f = self.b.ins().iconst(self.ptr, UN_FNS[code] as *const () as i64);
                let call = self.b.ins().call_indirect(self.un, f, &[x]);
                self.b.inst_results(call)[0]
            }
            // The masks, as exec::apply decides them on Floats (NaN compares false).
            (Op::T(t), &[x]) if **t == TOp::Step => self.pick(FloatCC::GreaterThan, x, 1.0, 0.0),
            (Op::T(t), &[x]) if **t == TOp::Sign => self.pick(FloatCC::GreaterThanOrEqual, x, 1.0, -1.0),
            (Op::T(_), &[x, mask]) => {
                let zero = self.constant(0.0);
                let on = self.b.ins().fcmp(FloatCC::GreaterThan, mask, zero);
                self.b.ins().select(on, x, zero)
            }
            _ => unreachable!("is_native admits only these operations"),
        }
    }

    /// `yes` where `x cc 0`, else `no`.
    fn pick(&mut self, cc: FloatCC, x: CValue, yes: f64, no: f64) -> CValue {
        let zero = self.constant(0.0);
        let test = self.b.ins().fcmp(cc, x, zero);
        let (yes, no) = (self.constant(yes), self.constant(no));
        self.b.ins().select(test, yes, no)
    }
}

#[cfg(test)]
mod tests {
    use super::super::exec::{self, Plan};
    use super::super::ir::{Kind, Node, Op, Program, Template};
    use crate::core::Prim;
    use crate::runtime::value::Value;
    use crate::tensor::Un;

    /// A Float program over one input (node 0) returning `outputs`.
    struct Builder(Vec<Node>);

    impl Builder {
        fn new() -> Builder {
            Builder(vec![Node::Input(0)])
        }
        fn push(&mut self, node: Node) -> u32 {
            self.0.push(node);
            self.0.len() as u32 - 1
        }
        fn c(&mut self, x: f64) -> u32 {
            self.push(Node::Const(Value::Float(x)))
        }
        fn bin(&mut self, p: Prim, a: u32, b: u32) -> u32 {
            self.push(Node::Apply(Op::Bin(p), vec![a, b].into()))
        }
        fn un(&mut self, u: Un, a: u32) -> u32 {
            self.push(Node::Apply(Op::Un(u), vec![a].into()))
        }
        fn program(self, outputs: Vec<u32>) -> Program {
            let kinds = vec![Kind::Float; self.0.len()];
            let template = Template::Tuple((0..outputs.len()).map(Template::Out).collect());
            Program { nodes: self.0, kinds, inputs: 1, outputs, template }
        }
    }

    /// The outputs node by node, as the interpreter computes each operation.
    fn reference(p: &Program, x: f64) -> Vec<f64> {
        let mut values = Vec::with_capacity(p.nodes.len());
        for node in &p.nodes {
            values.push(match node {
                Node::Input(_) => x,
                Node::Const(Value::Float(c)) => *c,
                Node::Apply(op, args) => {
                    match exec::apply(op, args.iter().map(|&a| Value::Float(values[a as usize])).collect()) {
                        Ok(Value::Float(v)) => v,
                        _ => panic!("a Float operation"),
                    }
                }
                Node::Const(_) => panic!("a Float constant"),
            });
        }
        p.outputs.iter().map(|&o| values[o as usize]).collect()
    }

    /// The plan's native code gives the reference's bits at every `x`.
    fn agrees(p: Program, xs: &[f64]) -> Plan {
        let want: Vec<Vec<f64>> = xs.iter().map(|&x| reference(&p, x)).collect();
        let plan = Plan::new(p);
        assert!(plan.native_note.starts_with("native: "), "{}", plan.native_note);
        for (&x, want) in xs.iter().zip(want) {
            let got = match plan.run(vec![Value::Float(x)]) {
                Ok(Value::Tuple(vs)) => {
                    vs.iter().map(|v| if let Value::Float(f) = v { *f } else { f64::NAN }).collect()
                }
                _ => Vec::new(),
            };
            let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "at x = {x:e}: {got:?} vs {want:?}");
        }
        plan
    }

    const XS: [f64; 12] =
        [0.5, -1.75, 0.0, -0.0, 1e-9, 3.0e4, -7.5e8, 1e22, 1e300, f64::INFINITY, f64::NAN, std::f64::consts::FRAC_PI_4];

    #[test]
    fn libm_sincos_is_sin_and_cos_where_it_is_used() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(super::sincos::exact(), "glibc's sincos differs from its sin and cos");
    }

    /// Straight code taking sin and cos of one value (in either order, one of them read
    /// twice, beside a lone `sin`) prints the interpreter's numbers.
    #[test]
    fn sin_and_cos_of_one_value_are_the_interpreters() {
        let mut b = Builder::new();
        let k = b.c(1.3);
        let a = b.bin(Prim::Mul, 0, k);
        let s = b.un(Un::Sin, a);
        let m = b.bin(Prim::Mul, s, 0);
        let c = b.un(Un::Cos, a);
        let y = b.bin(Prim::Add, m, c);
        let c0 = b.un(Un::Cos, 0);
        let lone = b.un(Un::Sin, y);
        let s0 = b.un(Un::Sin, 0);
        let z = b.bin(Prim::Mul, c0, s0);
        let w = b.bin(Prim::Sub, z, lone);
        let v = b.bin(Prim::Add, w, c);
        agrees(b.program(vec![y, v, s0]), &XS);
    }

    /// W1's shape by hand: a forward loop carrying an accumulator and taping `sin` and `cos`
    /// of each step's argument, and a backward loop reading the tape in reverse and carrying
    /// its own sum: both are native loops, with the interpreter's numbers.
    #[test]
    fn loops_with_carried_values_and_sin_cos_pairs_are_the_interpreters() {
        let mut b = Builder::new();
        let decay = b.c(0.99);
        let mut acc = b.c(0.0);
        let mut tape = Vec::new();
        for i in 1..=40 {
            let ci = b.c(i as f64 * 1e-2);
            let t = b.bin(Prim::Mul, 0, ci);
            let s = b.un(Un::Sin, t);
            let c = b.un(Un::Cos, t);
            let sx = b.bin(Prim::Mul, s, 0);
            let kept = b.bin(Prim::Mul, acc, decay);
            acc = b.bin(Prim::Add, kept, sx);
            tape.push((ci, s, c));
        }
        let mut sum = b.c(0.0);
        for &(ci, s, c) in tape.iter().rev() {
            let d = b.bin(Prim::Mul, c, ci);
            let e = b.bin(Prim::Mul, d, 0);
            let f = b.bin(Prim::Add, sum, e);
            sum = b.bin(Prim::Add, f, s);
        }
        let plan = agrees(b.program(vec![acc, sum]), &XS);
        assert!(plan.native_note.contains(" 2 loops"), "{}", plan.native_note);
    }
}
