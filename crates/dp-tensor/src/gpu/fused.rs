//! Elementwise chains on the GPU: one compute shader generated per chain, one thread per
//! element computing every step in registers, so a staged `tanh (x + y) * z` is one dispatch
//! that reads x, y and z once and writes one buffer, where the operations one by one are a
//! dispatch and a fresh buffer each. The steps call the element functions of the single
//! operations' shaders (`shaders/element.wgsl`, prepended), with their operation codes as
//! constants for the shader compiler to fold, so each element is computed as the operations
//! one by one compute it.
//!
//! The shader's text depends only on the chain's steps and on how each operand is read (whole,
//! one element, repeated, a Float), never on sizes or values, which travel in its parameter
//! buffer: one compilation serves every call of a staged program and every shape.

use super::kernels::{groups, new_output, u32_of, ELEMENT_FNS};
use super::{context, trace, GpuTensor};
use crate::chain::{fill_of, Arg, Chain, Fill, Operand, Step};
use crate::{Storage, TResult, Tensor};
use std::fmt::Write;
use std::rc::Rc;
use std::sync::Arc;

const WG: usize = 256;

/// How the shader reads one operand for element i.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Element i of a tensor of the result's shape.
    Whole,
    /// The operand whose buffer becomes the result: element i of `out`, read before it is
    /// written.
    Out,
    /// Element 0 of a one-element tensor.
    One,
    /// Element i mod len (a bias; len in the parameters).
    Cycle,
    /// Element i / run (a per-row statistic; run in the parameters).
    Spread,
    /// A Float, converted to float32 as `ops::binary_scalar` converts it (its bits in the
    /// parameters).
    Float,
}

/// The chain on its operands as a GPU tensor of `shape`, in one dispatch, when every tensor
/// operand is a GPU tensor of that shape, of one element, or one that repeats in whole blocks
/// (as on the CPU, `cpu::fused::run`), and the operands fit the device's storage bindings;
/// else the operands back, for the caller to compute the steps one by one (which also reports
/// operands on two devices). A GPU fault here comes back the same way: the steps one by one
/// meet it again and report it.
pub(crate) fn run(chain: &Chain, shape: &[usize], mut operands: Vec<Operand>) -> Result<Tensor, Vec<Operand>> {
    let n: usize = shape.iter().product();
    if operands.len() != chain.operands() || shape.is_empty() || n == 0 {
        return Err(operands);
    }
    let mut reads = Vec::with_capacity(operands.len());
    let mut words = vec![0u32; operands.len()];
    for (k, o) in operands.iter().enumerate() {
        let read = match o {
            Operand::Float(x) => {
                words[k] = (*x as f32).to_bits();
                Read::Float
            }
            // A GPU tensor is row-major.
            Operand::Tensor(t) => {
                let (read, word) = match t.gpu().and_then(|g| fill_of(&g.shape, shape)) {
                    Some(Fill::Whole) => (Read::Whole, 0),
                    Some(Fill::One) => (Read::One, 0),
                    Some(Fill::Cycle(len)) => (Read::Cycle, len),
                    Some(Fill::Spread(run)) => (Read::Spread, run),
                    None => return Err(operands),
                };
                match u32::try_from(word) {
                    Ok(w) => words[k] = w,
                    Err(_) => return Err(operands),
                }
                read
            }
        };
        reads.push(read);
    }
    let out = take_output(&mut operands, &mut reads);
    let steps = chain.steps().len();
    let over = reads.iter().position(|&r| r == Read::Out);
    match dispatch(chain, shape, &operands, &reads, &words, out) {
        Ok(t) => {
            trace(|| match over {
                Some(k) => format!("a chain of {steps} steps in one dispatch, over operand {k}'s buffer"),
                None => format!("a chain of {steps} steps in one dispatch"),
            });
            Ok(Tensor::from_gpu(t))
        }
        Err(e) => {
            trace(|| format!("a chain of {steps} steps one by one: {e}"));
            Err(operands)
        }
    }
}

/// The buffer of a `Whole` operand that nothing else holds, to be written with the result
/// (its reads become reads of `out`); its operand slot keeps the tensor (`Read::Out` marks it)
/// so the operands can still go back whole.
fn take_output(operands: &mut [Operand], reads: &mut [Read]) -> Option<GpuTensor> {
    let k = (0..operands.len()).find(|&k| {
        reads[k] == Read::Whole
            && matches!(&operands[k], Operand::Tensor(t)
                if Rc::strong_count(t) == 1 && t.gpu().is_some_and(|g| Arc::strong_count(&g.buf) == 1))
    })?;
    let Operand::Tensor(t) = &operands[k] else { return None };
    let Storage::Gpu(g) = &t.storage else { return None };
    reads[k] = Read::Out;
    // A second handle on the buffer, which is why `dispatch` binds it once, as `out`; the
    // operand's own handle is dropped by the caller after the dispatch is recorded.
    Some(g.clone())
}

fn dispatch(
    chain: &Chain,
    shape: &[usize],
    operands: &[Operand],
    reads: &[Read],
    words: &[u32],
    out: Option<GpuTensor>,
) -> TResult<GpuTensor> {
    let g = context()?;
    let bound: Vec<usize> = (0..reads.len())
        .filter(|&k| matches!(reads[k], Read::Whole | Read::One | Read::Cycle | Read::Spread))
        .collect();
    // The parameters, the result and each bound operand take a storage binding.
    if bound.len() + 2 > g.limits.max_storage_buffers_per_shader_stage as usize {
        return Err(format!("a chain of {} tensor operands exceeds the GPU's storage bindings", bound.len()).into());
    }
    let out = match out {
        Some(t) => GpuTensor::new(t.buf, shape.to_vec()),
        None => new_output(g, shape.to_vec())?,
    };
    let n = out.len();
    let mut prm = vec![u32_of(n, "a tensor's size")?];
    prm.extend_from_slice(words);
    let pipeline = g.generated_pipeline(ELEMENT_FNS, body(chain, reads), "chain")?;
    let prm = g.meta(&prm);
    let tensors: Vec<&wgpu::Buffer> = bound
        .iter()
        .map(|&k| match &operands[k] {
            Operand::Tensor(t) => t.gpu().map(|t| t.raw()).ok_or("a chain's operand left the GPU"),
            Operand::Float(_) => Err("a chain's Float operand bound as a buffer"),
        })
        .collect::<Result<_, _>>()?;
    let mut bindings = vec![(0, &prm), (1, out.raw())];
    bindings.extend(tensors.into_iter().zip(2..).map(|(b, i)| (i, b)));
    g.dispatch(&pipeline, &bindings, groups(n, WG))?;
    Ok(out)
}

/// The shader's WGSL after the element functions (`ELEMENT_FNS`, which it calls): the bindings
/// (parameters [n, one word per operand], the result, the bound operands in order), and one
/// thread's element.
fn body(chain: &Chain, reads: &[Read]) -> String {
    let mut s = String::with_capacity(1024);
    s.push_str("@group(0) @binding(0) var<storage, read> prm: array<u32>;\n");
    s.push_str("@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n");
    let mut binding = 2;
    for (k, r) in reads.iter().enumerate() {
        if !matches!(r, Read::Out | Read::Float) {
            let _ = writeln!(s, "@group(0) @binding({binding}) var<storage, read> in{k}: array<f32>;");
            binding += 1;
        }
    }
    let _ = write!(
        s,
        "\n@compute @workgroup_size({WG})\n\
         fn chain(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
         \x20        @builtin(local_invocation_index) lid: u32) {{\n\
         \x20   let i = (wid.x + wid.y * nwg.x) * {WG}u + lid;\n\
         \x20   if (i >= prm[0]) {{\n\
         \x20       return;\n\
         \x20   }}\n"
    );
    for (k, r) in reads.iter().enumerate() {
        let w = k + 1;
        let _ = match r {
            Read::Whole => writeln!(s, "    let x{k} = in{k}[i];"),
            Read::Out => writeln!(s, "    let x{k} = out[i];"),
            Read::One => writeln!(s, "    let x{k} = in{k}[0];"),
            Read::Cycle => writeln!(s, "    let x{k} = in{k}[i % prm[{w}]];"),
            Read::Spread => writeln!(s, "    let x{k} = in{k}[i / prm[{w}]];"),
            Read::Float => writeln!(s, "    let x{k} = bitcast<f32>(prm[{w}]);"),
        };
    }
    let arg = |a: Arg| match a {
        Arg::In(k) => format!("x{k}"),
        Arg::At(j) => format!("s{j}"),
    };
    for (j, &(step, [a, b])) in chain.steps().iter().enumerate() {
        let _ = match step {
            Step::Bin(op) => writeln!(s, "    let s{j} = binary_op({}u, {}, {});", op as u32, arg(a), arg(b)),
            Step::Pick(c) => writeln!(s, "    let s{j} = binary_op({}u, {}, {});", c as u32, arg(a), arg(b)),
            Step::Un(u) => writeln!(s, "    let s{j} = unary_op({}u, {}, 0.0, 0.0);", u as u32, arg(a)),
        };
    }
    let _ = writeln!(s, "    out[i] = s{};\n}}", chain.steps().len() - 1);
    s
}
