//! `dp lsp`: a Language Server Protocol server over standard input and output.
//!
//! Features: diagnostics (parse and type errors and warnings) on open and on every change
//! (full-text sync), hover (the inferred type of the name under the cursor), go to definition
//! (top-level and local bindings, constructors, types, members of imported files), completion
//! (names in scope with their types, constructors, keywords, `module.` members) and document
//! symbols (top-level items).
//!
//! Each version of a document is checked from scratch by a fresh [`Session`], exactly as
//! `dp check` would check the file; nothing runs. A diagnostic's `message` is the diagnostic's
//! own message, a blank line, then the full plain-text report `dp check` prints for it; its
//! range is the primary label's (or the `import` that brought in the file it points into).
//! Positions are UTF-16 code units, the protocol's default.

mod analysis;
mod position;
mod resolve;

use crate::session::Session;
use analysis::Analysis;
use lsp::notification::Notification as _;
use lsp::request::Request as _;
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types as lsp;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Runs the server on stdin/stdout until `exit`. Returns the process exit code: 0 after a
/// `shutdown` request and an `exit` notification, 1 otherwise (as the protocol asks).
pub fn serve() -> u8 {
    // Our own stdio transport: lsp-server's keeps standard output locked for its whole life,
    // and the interpreter's machine flushes standard output (a deadlock). Here each message
    // takes the lock only while it is written.
    let (connection, client) = Connection::memory();
    let Connection { sender: to_server, receiver: from_server } = client;
    let reader = std::thread::Builder::new().name("dp-lsp-reader".into()).spawn(move || {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        loop {
            match Message::read(&mut input) {
                Ok(Some(msg)) => {
                    let exit = matches!(&msg, Message::Notification(n) if n.method == lsp::notification::Exit::METHOD);
                    if to_server.send(msg).is_err() || exit {
                        break;
                    }
                }
                Ok(None) => break,
                // A malformed message was read whole: report it and go on.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => eprintln!("dp lsp: {e}"),
                Err(e) => {
                    eprintln!("dp lsp: {e}");
                    break;
                }
            }
        }
    });
    let writer = std::thread::Builder::new().name("dp-lsp-writer".into()).spawn(move || {
        for msg in from_server {
            let stdout = std::io::stdout();
            if msg.write(&mut stdout.lock()).is_err() {
                break;
            }
        }
    });
    let (Ok(_reader), Ok(writer)) = (reader, writer) else {
        eprintln!("dp lsp: cannot start the input/output threads");
        return 1;
    };
    let code = match initialize(&connection) {
        Ok(()) => Server::new().run(&connection),
        Err(e) => {
            eprintln!("dp lsp: {e}");
            1
        }
    };
    // Dropping the connection ends the writer once everything queued is written. The reader
    // has stopped at `exit` or end of input (or is left blocked if we stopped early).
    drop(connection);
    let _ = writer.join();
    code
}

fn initialize(connection: &Connection) -> Result<(), String> {
    let (id, _params) = connection.initialize_start().map_err(|e| e.to_string())?;
    let caps = lsp::ServerCapabilities {
        text_document_sync: Some(lsp::TextDocumentSyncCapability::Kind(lsp::TextDocumentSyncKind::FULL)),
        hover_provider: Some(lsp::HoverProviderCapability::Simple(true)),
        definition_provider: Some(lsp::OneOf::Left(true)),
        completion_provider: Some(lsp::CompletionOptions {
            trigger_characters: Some(vec![".".into()]),
            ..Default::default()
        }),
        document_symbol_provider: Some(lsp::OneOf::Left(true)),
        ..Default::default()
    };
    let result = lsp::InitializeResult {
        capabilities: caps,
        server_info: Some(lsp::ServerInfo { name: "dp".into(), version: Some(env!("CARGO_PKG_VERSION").into()) }),
    };
    let result = serde_json::to_value(result).expect("capabilities serialise");
    // `initialized` is then handled (ignored) by the main loop, whatever comes first.
    connection.sender.send(Response::new_ok(id, result).into()).map_err(|_| "the client went away".to_string())
}

struct Document {
    text: String,
    current: Analysis,
    /// The latest version that parsed, kept while the current one has a syntax error
    /// (completion and symbols use it).
    last_parsed: Option<Analysis>,
}

impl Document {
    /// The analysis with a syntax tree: the current one, else the last that had one.
    fn parsed(&mut self) -> &mut Analysis {
        match &mut self.last_parsed {
            Some(a) if !self.current.parsed() => a,
            _ => &mut self.current,
        }
    }
}

struct Server {
    docs: HashMap<String, Document>,
    /// A session with only the prelude: the types of builtins and prelude names.
    base: Option<Session>,
    shutdown: bool,
}

impl Server {
    fn new() -> Server {
        Server { docs: HashMap::new(), base: Session::new().ok(), shutdown: false }
    }

    fn run(&mut self, conn: &Connection) -> u8 {
        for msg in &conn.receiver {
            match msg {
                Message::Request(req) => {
                    let resp = if self.shutdown {
                        Response::new_err(
                            req.id,
                            ErrorCode::InvalidRequest as i32,
                            "the server is shutting down".into(),
                        )
                    } else if req.method == lsp::request::Shutdown::METHOD {
                        self.shutdown = true;
                        Response::new_ok(req.id, ())
                    } else {
                        let id = req.id.clone();
                        match catch_unwind(AssertUnwindSafe(|| self.request(req))) {
                            Ok(r) => r,
                            Err(_) => Response::new_err(
                                id,
                                ErrorCode::InternalError as i32,
                                "dp: internal error (a panic) while answering".into(),
                            ),
                        }
                    };
                    if conn.sender.send(resp.into()).is_err() {
                        return 1;
                    }
                }
                Message::Notification(n) if n.method == lsp::notification::Exit::METHOD => {
                    return if self.shutdown { 0 } else { 1 };
                }
                Message::Notification(n) => {
                    let out = catch_unwind(AssertUnwindSafe(|| self.notification(n))).unwrap_or_default();
                    for m in out {
                        if conn.sender.send(m.into()).is_err() {
                            return 1;
                        }
                    }
                }
                Message::Response(_) => {}
            }
        }
        // The client went away without `exit`.
        1
    }

    // ------------------------------------------------------------ notifications

    /// Handles a notification; returns the notifications to send back.
    fn notification(&mut self, n: Notification) -> Vec<Notification> {
        use lsp::notification::*;
        match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<lsp::DidOpenTextDocumentParams>(n.params) else { return vec![] };
                let d = p.text_document;
                self.update(&d.uri, d.text, d.version)
            }
            DidChangeTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<lsp::DidChangeTextDocumentParams>(n.params) else {
                    return vec![];
                };
                let uri = p.text_document.uri;
                let mut text = self.docs.get(uri.as_str()).map(|d| d.text.clone()).unwrap_or_default();
                for change in p.content_changes {
                    match change.range {
                        None => text = change.text,
                        Some(r) => {
                            // Incremental edits (not asked for, but harmless to honour).
                            let ix = position::LineIndex::new(&text);
                            let (a, b) = (ix.offset(&text, r.start), ix.offset(&text, r.end));
                            text.replace_range(a..b.max(a), &change.text);
                        }
                    }
                }
                self.update(&uri, text, p.text_document.version)
            }
            DidCloseTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<lsp::DidCloseTextDocumentParams>(n.params) else {
                    return vec![];
                };
                self.docs.remove(p.text_document.uri.as_str());
                vec![publish(p.text_document.uri, Vec::new(), None)]
            }
            _ => vec![],
        }
    }

    /// Checks a new version of a document and returns its diagnostics to publish.
    fn update(&mut self, uri: &lsp::Uri, text: String, version: i32) -> Vec<Notification> {
        let (name, dir) = match uri_to_path(uri.as_str()) {
            Some(p) => {
                let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
                (p.display().to_string(), dir)
            }
            None => (uri.as_str().to_string(), std::env::current_dir().unwrap_or_default()),
        };
        let current = Analysis::new(uri, &name, &text, &dir);
        let diagnostics = current.diagnostics.clone();
        let old = self.docs.remove(uri.as_str());
        let last_parsed = if current.parsed() {
            None
        } else {
            old.and_then(|d| if d.current.parsed() { Some(d.current) } else { d.last_parsed })
        };
        self.docs.insert(uri.as_str().to_string(), Document { text, current, last_parsed });
        vec![publish(uri.clone(), diagnostics, Some(version))]
    }

    // ------------------------------------------------------------ requests

    fn request(&mut self, req: Request) -> Response {
        use lsp::request::*;
        let id = req.id.clone();
        let result = match req.method.as_str() {
            HoverRequest::METHOD => params::<HoverRequest>(req).map(|p| {
                let p = p.text_document_position_params;
                serde_json::to_value(self.hover(&p.text_document.uri, p.position))
            }),
            GotoDefinition::METHOD => params::<GotoDefinition>(req).map(|p| {
                let p = p.text_document_position_params;
                serde_json::to_value(self.definition(&p.text_document.uri, p.position))
            }),
            Completion::METHOD => params::<Completion>(req).map(|p| {
                let p = p.text_document_position;
                serde_json::to_value(self.completion(&p.text_document.uri, p.position))
            }),
            DocumentSymbolRequest::METHOD => {
                params::<DocumentSymbolRequest>(req).map(|p| serde_json::to_value(self.symbols(&p.text_document.uri)))
            }
            other => Err(Response::new_err(
                id.clone(),
                ErrorCode::MethodNotFound as i32,
                format!("dp lsp does not handle `{other}`"),
            )),
        };
        match result {
            Ok(Ok(v)) => Response::new_ok(id, v),
            Ok(Err(e)) => Response::new_err(id, ErrorCode::InternalError as i32, e.to_string()),
            Err(resp) => resp,
        }
    }

    fn hover(&mut self, uri: &lsp::Uri, pos: lsp::Position) -> Option<lsp::Hover> {
        let doc = self.docs.get_mut(uri.as_str())?;
        let a = &mut doc.current;
        let offset = a.lines.offset(&a.text, pos);
        let h = a.hover(offset, self.base.as_ref())?;
        Some(lsp::Hover {
            contents: lsp::HoverContents::Markup(lsp::MarkupContent {
                kind: lsp::MarkupKind::Markdown,
                value: h.markdown,
            }),
            range: Some(a.lines.range(&a.text, h.span.0, h.span.1)),
        })
    }

    fn definition(&mut self, uri: &lsp::Uri, pos: lsp::Position) -> Option<lsp::GotoDefinitionResponse> {
        let a = &self.docs.get(uri.as_str())?.current;
        let t = a.definition(a.lines.offset(&a.text, pos))?;
        let uri = match t.path {
            None => uri.clone(),
            Some(p) => path_to_uri(&p)?,
        };
        Some(lsp::GotoDefinitionResponse::Scalar(lsp::Location { uri, range: t.range }))
    }

    fn completion(&mut self, uri: &lsp::Uri, pos: lsp::Position) -> Option<lsp::CompletionResponse> {
        let doc = self.docs.get_mut(uri.as_str())?;
        let text = doc.text.clone();
        let offset = doc.current.lines.offset(&text, pos);
        Some(lsp::CompletionResponse::Array(doc.parsed().completion(&text, offset)))
    }

    fn symbols(&mut self, uri: &lsp::Uri) -> Option<lsp::DocumentSymbolResponse> {
        let doc = self.docs.get_mut(uri.as_str())?;
        Some(lsp::DocumentSymbolResponse::Nested(doc.parsed().symbols()))
    }
}

fn params<R: lsp::request::Request>(req: Request) -> Result<R::Params, Response> {
    let id = req.id.clone();
    serde_json::from_value(req.params)
        .map_err(|e| Response::new_err(id, ErrorCode::InvalidParams as i32, format!("invalid parameters: {e}")))
}

fn publish(uri: lsp::Uri, diagnostics: Vec<lsp::Diagnostic>, version: Option<i32>) -> Notification {
    Notification::new(
        lsp::notification::PublishDiagnostics::METHOD.into(),
        lsp::PublishDiagnosticsParams { uri, diagnostics, version },
    )
}

/// The local path of a `file:` URI (percent-decoded); None for other schemes.
fn uri_to_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    // Skip an authority such as `localhost`.
    let path = &rest[rest.find('/')?..];
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out).into_owned()))
}

/// A `file:` URI for an absolute path.
fn path_to_uri(path: &Path) -> Option<lsp::Uri> {
    let mut s = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    lsp::Uri::from_str(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_round_trip() {
        let p = Path::new("/tmp/a dir/ü.dp");
        let u = path_to_uri(p).unwrap();
        assert_eq!(u.as_str(), "file:///tmp/a%20dir/%C3%BC.dp");
        assert_eq!(uri_to_path(u.as_str()).unwrap(), p);
        assert_eq!(uri_to_path("file://localhost/x/y.dp").unwrap(), Path::new("/x/y.dp"));
        assert!(uri_to_path("untitled:Untitled-1").is_none());
    }
}
