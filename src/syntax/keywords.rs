//! The one list of dp's reserved words and built-in names. The lexer, the REPL's completion,
//! the language server and the editor grammars (checked by a test) all read these lists.

/// Reserved words: the lexer never treats these as identifiers.
pub const KEYWORDS: &[&str] = &[
    "let", "rec", "and", "in", "fun", "if", "then", "else", "match", "with", "type", "import", "true", "false", "not",
    "ref",
];

/// Built-in values every program sees (before the prelude). Editors highlight these.
pub const BUILTINS: &[&str] = &[
    // control and differentiation
    "reset",
    "shift",
    "grad",
    "value_and_grad",
    "jvp",
    "stop_gradient",
    // input and output
    "print",
    "println",
    "show",
    "read_file",
    "read_lines",
    "write_file",
    "args",
    "exit",
    "error",
    // conversions and strings
    "float",
    "int",
    "string_of_int",
    "string_of_float",
    "int_of_string",
    "float_of_string",
    "string_length",
    "substring",
    "chars",
    "concat_strings",
    "split",
    // math
    "sin",
    "cos",
    "tan",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "relu",
    "abs",
    "floor",
    "ceil",
    "pi",
    "infinity",
    "nan",
    "is_nan",
];

/// Built-in type names.
pub const TYPE_NAMES: &[&str] = &["Int", "Float", "Bool", "String", "Unit", "Tensor", "List", "Ref"];
