//! The table of built-in functions: name, type (with class constraints) and implementation
//! tag. The checker reads the types, the machine dispatches on the tag; names also feed
//! `syntax::keywords::BUILTINS` (a test keeps the two in step).

/// Implementation tags. The order is irrelevant; `TABLE` maps names to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum B {
    Reset,
    Shift,
    Grad,
    ValueAndGrad,
    Jvp,
    StopGradient,
    Print,
    Println,
    Show,
    ReadFile,
    ReadLines,
    WriteFile,
    Args,
    Exit,
    Error,
    Float,
    Int,
    StringOfInt,
    StringOfFloat,
    IntOfString,
    FloatOfString,
    StringLength,
    Substring,
    Chars,
    ConcatStrings,
    Split,
    Sin,
    Cos,
    Tan,
    Exp,
    Log,
    Sqrt,
    Tanh,
    Sigmoid,
    Relu,
    Abs,
    Floor,
    Ceil,
    Pi,
    Infinity,
    Nan,
    IsNan,
    Ref,
}

/// `(name, implementation, type)`; a type may start with `Num a, Diff b =>` constraints.
pub const TABLE: &[(&str, B, &str)] = &[
    ("reset", B::Reset, "(Unit -> a) -> a"),
    ("shift", B::Shift, "((b -> a) -> a) -> b"),
    ("grad", B::Grad, "Diff a => (a -> Float) -> a -> a"),
    ("value_and_grad", B::ValueAndGrad, "Diff a => (a -> Float) -> a -> (Float, a)"),
    ("jvp", B::Jvp, "Diff a, Diff b => (a -> b) -> a -> a -> (b, b)"),
    ("stop_gradient", B::StopGradient, "a -> a"),
    ("print", B::Print, "a -> Unit"),
    ("println", B::Println, "a -> Unit"),
    ("show", B::Show, "a -> String"),
    ("read_file", B::ReadFile, "String -> String"),
    ("read_lines", B::ReadLines, "String -> List String"),
    ("write_file", B::WriteFile, "String -> String -> Unit"),
    ("args", B::Args, "List String"),
    ("exit", B::Exit, "Int -> a"),
    ("error", B::Error, "String -> a"),
    ("float", B::Float, "Int -> Float"),
    ("int", B::Int, "Float -> Int"),
    ("string_of_int", B::StringOfInt, "Int -> String"),
    ("string_of_float", B::StringOfFloat, "Float -> String"),
    ("int_of_string", B::IntOfString, "String -> Option Int"),
    ("float_of_string", B::FloatOfString, "String -> Option Float"),
    ("string_length", B::StringLength, "String -> Int"),
    ("substring", B::Substring, "String -> Int -> Int -> String"),
    ("chars", B::Chars, "String -> List String"),
    ("concat_strings", B::ConcatStrings, "List String -> String"),
    ("split", B::Split, "String -> String -> List String"),
    ("sin", B::Sin, "Real a => a -> a"),
    ("cos", B::Cos, "Real a => a -> a"),
    ("tan", B::Tan, "Real a => a -> a"),
    ("exp", B::Exp, "Real a => a -> a"),
    ("log", B::Log, "Real a => a -> a"),
    ("sqrt", B::Sqrt, "Real a => a -> a"),
    ("tanh", B::Tanh, "Real a => a -> a"),
    ("sigmoid", B::Sigmoid, "Real a => a -> a"),
    ("relu", B::Relu, "Real a => a -> a"),
    ("abs", B::Abs, "Num a => a -> a"),
    ("floor", B::Floor, "Float -> Float"),
    ("ceil", B::Ceil, "Float -> Float"),
    ("pi", B::Pi, "Float"),
    ("infinity", B::Infinity, "Float"),
    ("nan", B::Nan, "Float"),
    ("is_nan", B::IsNan, "Float -> Bool"),
    ("ref", B::Ref, "a -> Ref a"),
];

/// The most arguments any builtin takes.
pub const MAX_ARITY: usize = 3;

/// Number of arguments builtin `i` takes (computed once from the table).
pub fn arity_of(i: u32) -> usize {
    static ARITIES: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    ARITIES.get_or_init(|| TABLE.iter().map(|(_, _, t)| arity(t)).collect())[i as usize] as usize
}

/// Number of arguments a builtin type takes (the arrows of its type at the top level).
pub fn arity(ty: &str) -> u32 {
    let body = ty.split("=>").last().unwrap_or(ty);
    let mut depth = 0i32;
    let mut n = 0;
    let b = body.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b'-' if depth == 0 && b.get(i + 1) == Some(&b'>') => n += 1,
            _ => {}
        }
    }
    n
}
