//! The tensor library's one error type. It is a message (already phrased for the user, since
//! most tensor errors are shape or device mistakes in the program) and an optional hint; the
//! interpreter turns it into its own run-time fault, which adds the dp call stack. An error
//! that only a bug can cause (a kernel given operands that the op table's shape rule should
//! have refused) is marked `internal`, so that it is reported as dp's bug, not the program's.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorError {
    pub msg: String,
    pub help: Option<String>,
    /// A broken invariant of the library rather than a mistake of its caller.
    pub internal: bool,
}

impl TensorError {
    pub fn new(msg: impl Into<String>) -> TensorError {
        TensorError { msg: msg.into(), help: None, internal: false }
    }
    /// A broken invariant: `msg` says which.
    pub fn internal(msg: impl Into<String>) -> TensorError {
        TensorError { msg: msg.into(), help: None, internal: true }
    }
    pub fn help(mut self, h: impl Into<String>) -> TensorError {
        self.help = Some(h.into());
        self
    }
}

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for TensorError {}

// Errors from ndarray, wgpu and the file system arrive as text (`map_err(|e| e.to_string())`);
// these let `?` lift them.
impl From<String> for TensorError {
    fn from(msg: String) -> TensorError {
        TensorError::new(msg)
    }
}

impl From<&str> for TensorError {
    fn from(msg: &str) -> TensorError {
        TensorError::new(msg)
    }
}

pub type TResult<T> = Result<T, TensorError>;
