//! A run-time fault before it is located (the machine adds the place and the dp call stack).
//!
//! Two kinds, kept apart from where they are raised: a *user* fault is the program's own
//! doing (division by zero, `shift` without `reset`, a shape mismatch) and reads as an
//! ordinary run-time error; an *internal* fault is a broken invariant of dp itself — a value
//! of a kind the type checker ruled out, a delimiter missing from its place — which no checked
//! program can reach, so it says it is a bug in dp instead of blaming the program.
//! A third kind, *abort*, reads like a user fault but ends the program whatever `catch` is
//! running: an interrupt (Ctrl-C), `exit`, and the resource limits (stack depth, fuel). A
//! `catch` that could swallow them would let a program ignore the user's Ctrl-C or its own
//! `exit`, and a runaway recursion caught and retried would never end.
//! A fourth, *staging*, is a construct `jit` cannot see through, met while tracing: no
//! `catch` inside the traced call may take it (its handler's value in place of the refusal
//! would be compiled into the staged program: a wrong result); once the traced call has been
//! unwound it is an ordinary user fault, which a `catch` around the `jit` call may take.

use crate::tensor::TensorError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    User,
    Internal,
    Abort,
    Staging,
}

#[derive(Debug)]
pub struct Fault {
    pub kind: FaultKind,
    pub msg: String,
    pub help: Option<String>,
}

pub type FResult<T> = Result<T, Fault>;

/// The stand-in name of `Fault::unbatched`.
pub const UNBATCHED_OP: &str = "this operation";

impl Fault {
    /// A fault of the program being run.
    pub fn new(msg: impl Into<String>) -> Fault {
        Fault { kind: FaultKind::User, msg: msg.into(), help: None }
    }

    /// A fault no `catch` may intercept (see the module's comment).
    pub fn abort(msg: impl Into<String>) -> Fault {
        Fault { kind: FaultKind::Abort, msg: msg.into(), help: None }
    }

    /// A construct staging cannot see through, met while tracing (see the module's comment).
    pub fn staging(msg: impl Into<String>) -> Fault {
        Fault { kind: FaultKind::Staging, msg: msg.into(), help: None }
    }

    /// The refusal of `what`, which would read a traced value's numbers (a branch, a
    /// conversion, a store), met while tracing.
    pub fn unstageable(what: &str) -> Fault {
        Fault::staging(format!("jit: cannot stage {what} on a traced value"))
            .help("a staged function may not branch on, read the numbers of, print or store its traced Floats and tensors; use `where` for elementwise choices, or call it without `jit`")
    }

    /// Whether `catch` hands this fault to its handler: the program's own faults only.
    pub fn is_catchable(&self) -> bool {
        self.kind == FaultKind::User
    }

    /// A broken invariant of dp: `msg` says which, for the bug report.
    pub fn internal(msg: impl Into<String>) -> Fault {
        Fault { kind: FaultKind::Internal, msg: msg.into(), help: None }
    }

    /// An operation met a value batched by `vmap` and has no batching rule (the program's
    /// error, never a wrong answer): `what` names it, or is `UNBATCHED_OP` where the place that
    /// finds out does not know the name (a builtin reading its argument), for the machine to
    /// fill in.
    pub fn unbatched(what: &str) -> Fault {
        Fault::new(format!("`{what}` has no batching rule: it cannot run on a value batched by `vmap`"))
            .help("apply it outside the `vmap`, or write it with operations that batch (docs/grad.md, \"vmap\")")
    }

    /// Names the builtin in a fault of `unbatched(UNBATCHED_OP)`.
    pub fn naming(mut self, name: &str) -> Fault {
        let placeholder = format!("`{UNBATCHED_OP}`");
        if self.msg.starts_with(&placeholder) {
            self.msg = self.msg.replacen(&placeholder, &format!("`{name}`"), 1);
        }
        self
    }

    pub fn help(mut self, h: impl Into<String>) -> Fault {
        self.help = Some(h.into());
        self
    }

    pub fn is_internal(&self) -> bool {
        self.kind == FaultKind::Internal
    }

    /// The text a user sees. Internal faults never read as the program's error.
    pub fn message(&self) -> String {
        match self.kind {
            FaultKind::User | FaultKind::Abort | FaultKind::Staging => self.msg.clone(),
            FaultKind::Internal => format!("{} — this is a bug in dp, please report it", self.msg),
        }
    }
}

impl From<String> for Fault {
    fn from(s: String) -> Fault {
        Fault::new(s)
    }
}

/// The tensor library's errors keep their kind: a shape mismatch is the program's, a kernel
/// meeting operands its own checks should have refused is dp's.
impl From<TensorError> for Fault {
    fn from(e: TensorError) -> Fault {
        let kind = if e.internal { FaultKind::Internal } else { FaultKind::User };
        Fault { kind, msg: e.msg, help: e.help }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_faults_say_they_are_dp_bugs() {
        let f = Fault::internal("`Neg` on String");
        assert!(f.is_internal());
        assert_eq!(f.message(), "`Neg` on String — this is a bug in dp, please report it");
        let u = Fault::new("division by zero");
        assert!(!u.is_internal());
        assert!(u.is_catchable() && !f.is_catchable());
        let a = Fault::abort("interrupted");
        assert!(!a.is_internal() && !a.is_catchable());
        assert_eq!(a.message(), "interrupted");
        assert_eq!(u.message(), "division by zero");
    }

    #[test]
    fn tensor_errors_keep_their_kind() {
        assert!(Fault::from(TensorError::internal("concat of nothing")).is_internal());
        assert!(!Fault::from(TensorError::new("shapes [2] and [3] do not match")).is_internal());
    }
}
