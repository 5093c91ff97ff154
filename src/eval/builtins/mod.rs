//! The language's builtins that are functions of their arguments (no transfer of control; the
//! machine itself does `reset`, `shift`, `catch`, `grad`, `jvp` and `exit`), one module per
//! idea: `io` (output, files, arguments), `csv` (CSV files), `strings`, `numbers` (and
//! reference cells), `tensor` (the tensor builtins of LANGUAGE.md "Tensors"), `tensor_ops`
//! (its masks, reductions, shapes and indexing, "Tensors, continued"), `einsum` (its spec,
//! lowered to products, sums and axis moves), `random` (keyed random numbers), `tree`
//! (arithmetic over parameter structures), `files` (checkpoints and `.npz` archives),
//! `progress` (training-loop reports) and `plot` (charts; the drawing itself is src/plot).

pub mod csv;
pub mod einsum;
pub mod files;
pub mod io;
pub mod numbers;
pub mod plot;
pub mod progress;
pub mod random;
pub mod strings;
pub mod tensor;
pub mod tensor_ops;
pub mod tree;

use crate::ad;
use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::runtime::perturbed::strip;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};

/// Runs builtin `b`, taking its arguments in order from `arg`.
pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    match b {
        B::Print
        | B::Println
        | B::Printf
        | B::ReadFile
        | B::ReadLines
        | B::WriteFile
        | B::Args
        | B::Clock
        | B::ReadLine
        | B::Getenv
        | B::Error => io::call(m, b, arg),
        B::Show
        | B::Sprintf
        | B::StringOfInt
        | B::StringOfFloat
        | B::IntOfString
        | B::FloatOfString
        | B::StringLength
        | B::Substring
        | B::Chars
        | B::ConcatStrings
        | B::Split => strings::call(b, arg),
        B::ReadCsv | B::LoadCsv => csv::call(b, arg),
        B::Key
        | B::SplitKey
        | B::SplitKeys
        | B::Normal
        | B::UniformKey
        | B::Randint
        | B::Permutation
        | B::Bernoulli => random::call(m, b, arg),
        B::ProgressStart | B::ProgressTick | B::ProgressFinish => progress::call(m, b, arg),
        B::Plot | B::PlotWith => plot::call(m, b, arg),
        B::SaveParams | B::LoadParams | B::LoadNpz | B::SaveNpz => files::call(b, arg),
        B::TreeAdd
        | B::TreeSub
        | B::TreeMul
        | B::TreeDiv
        | B::TreeScale
        | B::TreeAddScalar
        | B::TreeSqrt
        | B::TreeClip
        | B::TreeZeros
        | B::TreeSumSquares => tree::call(m, b, arg),
        B::Float | B::Int | B::IsNan => {
            let x = arg();
            if let Value::Batched(_) = strip(&x) {
                // One conversion per example, of the whole batch at once.
                return match b {
                    B::Float => ad::batch::float_of(m, &x),
                    B::Int => ad::batch::int_of(m, &x),
                    _ => ad::batch::is_nan(m, &x),
                };
            }
            let mut x = Some(x);
            numbers::call(b, &mut || x.take().unwrap_or_default())
        }
        B::Floor | B::Ceil => {
            let x = arg();
            if let Value::Batched(_) = strip(&x) {
                return ad::batch::round(m, &x, b == B::Ceil);
            }
            let mut x = Some(x);
            numbers::call(b, &mut || x.take().unwrap_or_default())
        }
        B::Pi | B::Infinity | B::Nan | B::Ref => numbers::call(b, arg),
        B::TensorOf
        | B::Zeros
        | B::Ones
        | B::Full
        | B::Arange
        | B::Randn
        | B::Uniform
        | B::LoadNpy
        | B::SaveNpy
        | B::Shape
        | B::Reshape
        | B::Transpose
        | B::Concat
        | B::Slice
        | B::Row
        | B::Onehot
        | B::Sum
        | B::Mean
        | B::Max
        | B::SumAxis
        | B::MeanAxis
        | B::Argmax
        | B::Softmax
        | B::LogSoftmax
        | B::Logsumexp
        | B::Item
        | B::ToList
        | B::ToDevice
        | B::Dtype
        | B::Astype
        | B::Conv2d
        | B::MaxPool2d
        | B::Conv2dWith
        | B::AvgPool2d => tensor::call(m, b, arg),
        B::Einsum => einsum::call(m, arg),
        B::Less
        | B::LessEqual
        | B::Greater
        | B::GreaterEqual
        | B::Equal
        | B::NotEqual
        | B::LogicalAnd
        | B::LogicalOr
        | B::LogicalNot
        | B::Where
        | B::Clip
        | B::Any
        | B::All
        | B::MaxOf
        | B::MinOf
        | B::Min
        | B::Argmin
        | B::MaxAxis
        | B::MinAxis
        | B::ArgmaxAxis
        | B::ArgminAxis
        | B::Cumsum
        | B::Normalize
        | B::SoftmaxAxis
        | B::LogSoftmaxAxis
        | B::Var
        | B::ExpandDims
        | B::Squeeze
        | B::Stack
        | B::BroadcastTo
        | B::Ravel
        | B::Gather
        | B::Get => tensor_ops::call(m, b, arg),
        other => Err(Fault::internal(format!("{other:?} is not a builtin of this table"))),
    }
}
