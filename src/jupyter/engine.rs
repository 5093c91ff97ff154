//! The kernel's session thread: one `Repl` (the REPL's engine, so cells are transactional and
//! take `:type`, `:doc`, … exactly as REPL entries do) answering jobs from the sockets. The
//! session's values are `Rc`-based, so it never leaves this thread; the sockets send it jobs
//! over a channel, and it publishes a cell's output on IOPub as the program produces it.

use crate::diagnostic::{Diagnostic, Phase};
use crate::eval::builtins::progress::Reporter;
use crate::repl::{entry_state, Completions, Console, Entry, Repl};
use crate::syntax::parser;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// A message to publish on IOPub, caused by the request whose header is `parent`.
pub struct Publish {
    pub parent: Value,
    pub msg_type: &'static str,
    pub content: Value,
}

/// What the sockets ask of the session; each job answers the content of its reply.
pub enum Job {
    Execute { code: String, silent: bool, store_history: bool, parent: Value, reply: oneshot::Sender<Value> },
    Complete { code: String, cursor: usize, reply: oneshot::Sender<Value> },
    Inspect { code: String, cursor: usize, reply: oneshot::Sender<Value> },
    IsComplete { code: String, reply: oneshot::Sender<Value> },
}

/// Where a cell's output goes: IOPub, under the cell's request (none between cells and for a
/// silent cell, whose output the protocol says to drop).
#[derive(Clone)]
struct Outlet {
    tx: UnboundedSender<Publish>,
    parent: Rc<RefCell<Option<Value>>>,
}

impl Outlet {
    fn publish(&self, msg_type: &'static str, content: Value) {
        if let Some(parent) = self.parent.borrow().clone() {
            // The receiver is gone only when the kernel is shutting down.
            let _ = self.tx.send(Publish { parent, msg_type, content });
        }
    }

    fn stream(&self, name: &str, text: &str) {
        if !text.is_empty() {
            self.publish("stream", json!({"name": name, "text": text}));
        }
    }
}

/// The program's standard output: every write goes out as a `stream` message at once (the
/// IOPub task merges a burst of them), except an unfinished UTF-8 character, held until its
/// remaining bytes arrive.
struct Stdout {
    outlet: Outlet,
    pending: Rc<RefCell<Vec<u8>>>,
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.pending.borrow_mut();
        pending.extend_from_slice(buf);
        let valid = match std::str::from_utf8(&pending) {
            Ok(s) => s.len(),
            // An invalid sequence (not just an unfinished one) goes out replaced.
            Err(e) if e.error_len().is_some() => pending.len(),
            Err(e) => e.valid_up_to(),
        };
        let text: Vec<u8> = pending.drain(..valid).collect();
        self.outlet.stream("stdout", &String::from_utf8_lossy(&text));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The notebook's reporter: a plot is shown inline (as well as written to its file). A
/// training loop's progress bar is not drawn in a notebook.
struct Notebook {
    outlet: Outlet,
}

impl Reporter for Notebook {
    fn start(&mut self, _total: u64, _label: &str) {}
    fn tick(&mut self, _loss: f64) {}
    fn finish(&mut self) {}
    fn plotted(&mut self, path: &str) {
        let png = path.to_ascii_lowercase().ends_with(".png");
        let data = match std::fs::read(path) {
            Ok(bytes) if png => json!({"image/png": base64(&bytes), "text/plain": format!("<plot {path}>")}),
            Ok(bytes) => {
                json!({"image/svg+xml": String::from_utf8_lossy(&bytes), "text/plain": format!("<plot {path}>")})
            }
            Err(e) => return self.outlet.stream("stderr", &format!("cannot show the plot `{path}`: {e}\n")),
        };
        self.outlet.publish("display_data", json!({"data": data, "metadata": {}}));
    }
}

/// Standard base64 with padding (RFC 4648), as Jupyter's `image/png` data is sent.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A cell's console: echoes make its result, warnings and complaints go to stderr, answers
/// of commands to stdout, and the error (if any) is kept for the reply.
struct Cell<'a> {
    outlet: &'a Outlet,
    echoes: Vec<String>,
    error: Option<(String, String, Vec<String>)>,
}

impl Console for Cell<'_> {
    fn color(&self) -> bool {
        false
    }
    fn say(&mut self, text: &str) {
        self.outlet.stream("stdout", &format!("{text}\n"));
    }
    fn echo(&mut self, text: &str) {
        self.echoes.push(text.to_string());
    }
    fn complain(&mut self, text: &str) {
        self.outlet.stream("stderr", &format!("{text}\n"));
    }
    fn warning(&mut self, rendered: &str) {
        self.outlet.stream("stderr", rendered);
    }
    fn error(&mut self, rendered: &str, d: &Diagnostic) {
        let traceback = rendered.trim_end().lines().map(str::to_string).collect();
        self.error = Some((ename(d).to_string(), d.message.clone(), traceback));
    }
}

/// The error's name in a notebook, after its phase.
fn ename(d: &Diagnostic) -> &'static str {
    match d.phase {
        Phase::Lex | Phase::Parse => "SyntaxError",
        Phase::Type => "TypeError",
        Phase::Runtime if d.message == "interrupted" => "Interrupted",
        Phase::Runtime => "RuntimeError",
        Phase::Internal => "InternalError",
        Phase::Io => "IOError",
    }
}

pub struct Engine {
    repl: Repl,
    completions: Completions,
    outlet: Outlet,
    pending_out: Rc<RefCell<Vec<u8>>>,
    /// The protocol's execution counter: cells stored in the history so far.
    count: u64,
}

impl Engine {
    pub fn new(mut session: crate::session::Session, tx: UnboundedSender<Publish>) -> Engine {
        let outlet = Outlet { tx, parent: Rc::new(RefCell::new(None)) };
        let pending_out = Rc::new(RefCell::new(Vec::new()));
        session.set_output(Box::new(Stdout { outlet: outlet.clone(), pending: pending_out.clone() }));
        session.set_reporter(Box::new(Notebook { outlet: outlet.clone() }));
        let completions = Completions::of(&session);
        Engine { repl: Repl::new(session), completions, outlet, pending_out, count: 0 }
    }

    /// Answers jobs until the sockets hang up.
    pub fn serve(mut self, jobs: std::sync::mpsc::Receiver<Job>) {
        for job in jobs {
            // A dropped reply channel means the requester is gone; nothing to tell it.
            let _ = match job {
                Job::Execute { code, silent, store_history, parent, reply } => {
                    reply.send(self.execute(&code, silent, store_history, parent))
                }
                Job::Complete { code, cursor, reply } => reply.send(self.complete(&code, cursor)),
                Job::Inspect { code, cursor, reply } => reply.send(self.inspect(&code, cursor)),
                Job::IsComplete { code, reply } => reply.send(is_complete(&code)),
            };
        }
    }

    /// Runs a cell as one REPL entry; returns the `execute_reply` content.
    pub fn execute(&mut self, code: &str, silent: bool, store_history: bool, parent: Value) -> Value {
        // `silent` forces `store_history` off (the protocol's rule).
        if store_history && !silent {
            self.count += 1;
        }
        let count = self.count;
        *self.outlet.parent.borrow_mut() = (!silent).then_some(parent);
        self.outlet.publish("execute_input", json!({"code": code, "execution_count": count}));
        let mut cell = Cell { outlet: &self.outlet, echoes: Vec::new(), error: None };
        let alive = self.repl.entry(&format!("<cell {count}>"), code, &mut cell);
        if !alive && cell.error.is_none() {
            let why = "the cell asked to end the session (`exit` or `:quit`); a notebook's session stays, \
                       without this cell's definitions (restart the kernel to start afresh)";
            cell.error = Some(("Exit".to_string(), why.to_string(), vec![why.to_string()]));
        }
        let (echoes, error) = (std::mem::take(&mut cell.echoes), cell.error.take());
        let rest: Vec<u8> = self.pending_out.borrow_mut().drain(..).collect();
        self.outlet.stream("stdout", &String::from_utf8_lossy(&rest));
        self.completions.names = Completions::names_in(self.repl.session());
        let reply = match error {
            Some((ename, evalue, traceback)) => {
                self.outlet.publish("error", json!({"ename": ename, "evalue": evalue, "traceback": traceback}));
                json!({"status": "error", "execution_count": count, "ename": ename, "evalue": evalue,
                       "traceback": traceback})
            }
            None => {
                if !echoes.is_empty() {
                    self.outlet.publish(
                        "execute_result",
                        json!({"execution_count": count, "data": {"text/plain": echoes.join("\n")}, "metadata": {}}),
                    );
                }
                json!({"status": "ok", "execution_count": count, "payload": [], "user_expressions": {}})
            }
        };
        *self.outlet.parent.borrow_mut() = None;
        reply
    }

    /// The REPL's completion at `cursor` (a count of Unicode characters, as protocol 5.2+
    /// measures it).
    pub fn complete(&self, code: &str, cursor: usize) -> Value {
        let at = byte_offset(code, cursor);
        let (start, matches) = self.completions.complete(code, at);
        json!({
            "status": "ok",
            "matches": matches,
            "cursor_start": code[..start].chars().count(),
            "cursor_end": code[..at].chars().count(),
            "metadata": {},
        })
    }

    /// The type and doc comment of the name under the cursor (`nn.linear` with its module).
    pub fn inspect(&mut self, code: &str, cursor: usize) -> Value {
        let name = name_at(code, byte_offset(code, cursor));
        let text = match name.as_deref() {
            None => None,
            Some(n) => match self.repl.doc(n) {
                Ok(doc) => Some(doc),
                // A name without documentation (a builtin module's member, a new binding)
                // still has a type.
                Err(_) => self.repl.session_mut().type_of("<inspect>", n).ok().map(|ty| format!("{n} : {ty}")),
            },
        };
        match text {
            Some(t) => json!({"status": "ok", "found": true, "data": {"text/plain": t}, "metadata": {}}),
            None => json!({"status": "ok", "found": false, "data": {}, "metadata": {}}),
        }
    }
}

/// The REPL's multi-line rule: `incomplete` when the REPL would wait for another line,
/// `invalid` for a syntax error that no more text can fix, else `complete`.
pub fn is_complete(code: &str) -> Value {
    let status = match entry_state(code) {
        Entry::Continue => "incomplete",
        Entry::Submit if code.trim_start().starts_with(':') => "complete",
        Entry::Submit => match parser::parse_program(code, 0) {
            Err(d) if !parser::is_incomplete(&d) => "invalid",
            _ => "complete",
        },
    };
    match status {
        "incomplete" => json!({"status": status, "indent": ""}),
        _ => json!({"status": status}),
    }
}

/// The byte offset of the `chars`-th character (the end when `chars` is past it).
fn byte_offset(text: &str, chars: usize) -> usize {
    text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i)
}

/// The identifier around byte `at`, with its module when it is `module.member`.
fn name_at(code: &str, at: usize) -> Option<String> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    let start = code[..at].char_indices().rev().take_while(|(_, c)| is_word(*c)).last().map_or(at, |(i, _)| i);
    let end = code[at..].char_indices().find(|(_, c)| !is_word(*c)).map_or(code.len(), |(i, _)| at + i);
    // A number is not a name.
    if !code[start..end].starts_with(|c: char| c.is_alphabetic() || c == '_') {
        return None;
    }
    let word = &code[start..end];
    let module = code[..start].strip_suffix('.').map(|before| {
        let m = before.char_indices().rev().take_while(|(_, c)| is_word(*c)).last().map_or(before.len(), |(i, _)| i);
        &before[m..]
    });
    Some(match module {
        Some(m) if !m.is_empty() => format!("{m}.{word}"),
        _ => word.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_under_the_cursor() {
        assert_eq!(name_at("map f xs", 1).as_deref(), Some("map"));
        assert_eq!(name_at("map f xs", 3).as_deref(), Some("map"));
        assert_eq!(name_at("let y = nn.linear 3", 13).as_deref(), Some("nn.linear"));
        assert_eq!(name_at("1 +  2", 4), None);
        assert_eq!(name_at("1 + 2", 1), None);
        assert_eq!(name_at("λx → f'", 9).as_deref(), Some("f'"));
    }

    #[test]
    fn base64_is_rfc_4648() {
        // RFC 4648 section 10's test vectors.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    #[test]
    fn cursors_count_characters_not_bytes() {
        assert_eq!(byte_offset("λ_x", 1), 2);
        assert_eq!(byte_offset("ab", 9), 2);
    }

    #[test]
    fn is_complete_follows_the_repl() {
        assert_eq!(is_complete("1 + 2")["status"], "complete");
        assert_eq!(is_complete("let f x =")["status"], "incomplete");
        assert_eq!(is_complete("(1 +")["status"], "incomplete");
        assert_eq!(is_complete("let g x = match x with\n| 0 -> 1")["status"], "incomplete");
        assert_eq!(is_complete("let g x = match x with\n| 0 -> 1\n| _ -> 2\n\n")["status"], "complete");
        assert_eq!(is_complete("1 + + )")["status"], "invalid");
        assert_eq!(is_complete(":type map")["status"], "complete");
    }
}
