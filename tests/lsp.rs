//! `dp lsp` driven as an editor would: JSON-RPC with Content-Length framing over the server's
//! standard input and output. Every wait has a timeout, so a broken server fails the test
//! instead of hanging it.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    next_id: i64,
    /// Notifications that arrived while waiting for a response.
    pending: Vec<Value>,
}

fn read_message(r: &mut impl BufRead) -> Option<Value> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length:") {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dp"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn dp lsp");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            while let Some(v) = read_message(&mut r) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut c = Client { child, stdin, rx, next_id: 0, pending: Vec::new() };
        let init = c.request("initialize", json!({ "processId": null, "rootUri": null, "capabilities": {} }));
        let caps = &init["capabilities"];
        assert_eq!(caps["textDocumentSync"], json!(1), "full sync: {init}");
        assert_eq!(caps["hoverProvider"], json!(true));
        c.notify("initialized", json!({}));
        c
    }

    fn send(&mut self, v: Value) {
        let body = v.to_string();
        let stdin = self.stdin.as_mut().expect("stdin open");
        write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write to dp lsp");
        stdin.flush().unwrap();
    }

    fn recv(&mut self) -> Value {
        self.rx.recv_timeout(TIMEOUT).expect("a message from dp lsp within the timeout")
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and returns its whole response (`result` or `error`).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            let m = self.recv();
            if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                return m;
            }
            self.pending.push(m);
        }
        panic!("no response to {method}");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// The next notification with this method (earlier ones that arrived meanwhile are kept).
    fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self.pending.iter().position(|m| m["method"] == method) {
            return self.pending.remove(i)["params"].clone();
        }
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            let m = self.recv();
            if m["method"] == method {
                return m["params"].clone();
            }
            self.pending.push(m);
        }
        panic!("no {method} notification");
    }

    fn open(&mut self, uri: &str, text: &str) -> Value {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "dp", "version": 1, "text": text } }),
        );
        self.diagnostics(uri)
    }

    fn change(&mut self, uri: &str, version: i32, text: &str) -> Value {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": { "uri": uri, "version": version },
                "contentChanges": [{ "text": text }],
            }),
        );
        self.diagnostics(uri)
    }

    fn diagnostics(&mut self, uri: &str) -> Value {
        let p = self.notification("textDocument/publishDiagnostics");
        assert_eq!(p["uri"], uri);
        p["diagnostics"].clone()
    }

    fn at(&mut self, method: &str, uri: &str, line: u32, character: u32) -> Value {
        self.request(
            method,
            json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } }),
        )
    }

    /// `shutdown` then `exit`; returns the exit code.
    fn finish(mut self) -> i32 {
        let r = self.request("shutdown", Value::Null);
        assert_eq!(r, Value::Null);
        self.notify("exit", Value::Null);
        self.wait()
    }

    fn wait(&mut self) -> i32 {
        self.stdin = None;
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait for dp lsp") {
                return status.code().unwrap_or(-1);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("dp lsp did not exit");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A failed test must not leave the server running.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn uri(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("dp_lsp_test_{}", std::process::id()));
    format!("file://{}", dir.join(name).display())
}

fn range(d: &Value) -> (u64, u64, u64, u64) {
    let r = &d["range"];
    let n = |v: &Value| v.as_u64().unwrap();
    (n(&r["start"]["line"]), n(&r["start"]["character"]), n(&r["end"]["line"]), n(&r["end"]["character"]))
}

#[test]
fn lsp_diagnostics_follow_edits() {
    let mut c = Client::start();
    let u = uri("diag.dp");
    let bad = "let double x = x * 2\nlet y = double \"two\"\n";
    let diags = c.open(&u, bad);
    assert_eq!(diags.as_array().unwrap().len(), 1, "{diags}");
    let d = &diags[0];
    assert_eq!(range(d), (1, 15, 1, 20), "the string argument: {d}");
    assert_eq!(d["severity"], json!(1));
    let msg = d["message"].as_str().unwrap();
    assert_eq!(msg.lines().next().unwrap(), "type mismatch: expected `Int`, found `String`");
    // The full report, as `dp check` prints it, follows the message.
    assert!(msg.contains("type error: type mismatch"), "{msg}");
    assert!(msg.contains("this function expects `Int`"), "{msg}");

    let diags = c.change(&u, 2, "let double x = x * 2\nlet y = double 2\n");
    assert_eq!(diags, json!([]));

    // A syntax error, then a warning (a non-exhaustive match).
    let diags = c.change(&u, 3, "let f x = x +\n");
    assert!(diags[0]["message"].as_str().unwrap().contains("unexpected end of input"), "{diags}");
    let diags = c.change(&u, 4, "let f xs = match xs with\n  | [] -> 0\n");
    assert_eq!(diags.as_array().unwrap().len(), 1, "{diags}");
    assert_eq!(diags[0]["severity"], json!(2));
    assert!(diags[0]["message"].as_str().unwrap().starts_with("non-exhaustive patterns"), "{diags}");
    assert_eq!(range(&diags[0]).0, 0);
    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_every_error_and_hover_around_them() {
    let mut c = Client::start();
    let u = uri("several.dp");
    let text = "let sgd p g = p - 0.1 * g\nlet a = 1 + \"x\"\nlet b = a + 1\nlet c = if 3 then 1 else 2\nlet d = sgd 1.0 2.0\n";
    let diags = c.open(&u, text);
    let diags = diags.as_array().unwrap();
    assert_eq!(diags.len(), 2, "two independent errors, no cascade from `b`: {diags:?}");
    assert_eq!(range(&diags[0]).0, 1);
    assert_eq!(range(&diags[1]).0, 3);
    assert!(!diags[0]["message"].as_str().unwrap().contains("Bool"), "each error on its own: {diags:?}");
    // Hover still works around the errors, and shows a polymorphic type's constraints.
    let h = c.at("textDocument/hover", &u, 4, 9);
    let shown = h["contents"]["value"].as_str().unwrap();
    assert!(shown.contains("sgd : (Real a, Real b, Broadcast a b c) => a -> b -> c"), "{h}");
    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_positions_are_utf16() {
    let mut c = Client::start();
    let u = uri("utf16.dp");
    // `é` is one UTF-16 unit, `𝄞` two: the unbound name after them is at characters 21..25.
    let diags = c.open(&u, "let n = 1\nlet s = (\"é𝄞\", n) + nope\n");
    assert_eq!(range(&diags[0]), (1, 21, 1, 25), "{diags}");
    let h = c.at("textDocument/hover", &u, 1, 16);
    assert!(h["contents"]["value"].as_str().unwrap().contains("n : Int"), "{h}");
    assert_eq!(h["range"], json!({ "start": { "line": 1, "character": 16 }, "end": { "line": 1, "character": 17 } }));
    assert_eq!(c.finish(), 0);
}

const PROGRAM: &str = "\
type Shape = Circle Float | Rect Float Float
let double x = x * 2
let quad y =
  let twice = double (double y) in
  twice
let area s = match s with
  | Circle r -> 3.0 * r * r
  | Rect w h -> w * h
let main () = println (quad 3)
";

#[test]
fn lsp_hover_definition_completion_symbols() {
    let mut c = Client::start();
    let u = uri("features.dp");
    assert_eq!(c.open(&u, PROGRAM), json!([]));

    // Hover: a top-level function at a use site, a local, a prelude function, a constructor.
    let h = c.at("textDocument/hover", &u, 8, 25);
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("quad : Int -> Int"), "{h}");
    assert_eq!(h["range"]["start"], json!({ "line": 8, "character": 23 }));
    let h = c.at("textDocument/hover", &u, 3, 16);
    assert!(h["contents"]["value"].as_str().unwrap().contains("double : Int -> Int"), "{h}");
    let h = c.at("textDocument/hover", &u, 4, 3);
    assert!(h["contents"]["value"].as_str().unwrap().contains("twice : Int"), "{h}");
    let h = c.at("textDocument/hover", &u, 6, 22);
    assert!(h["contents"]["value"].as_str().unwrap().contains("r : Float"), "{h}");
    let h = c.at("textDocument/hover", &u, 8, 16);
    assert!(h["contents"]["value"].as_str().unwrap().contains("println : "), "{h}");
    let h = c.at("textDocument/hover", &u, 7, 5);
    assert!(h["contents"]["value"].as_str().unwrap().contains("Rect : Float -> Float -> Shape"), "{h}");
    assert_eq!(c.at("textDocument/hover", &u, 2, 11), Value::Null, "nothing to say about `=`");

    // Definition: a top-level function, a local, a constructor.
    let d = c.at("textDocument/definition", &u, 8, 24);
    assert_eq!(d["uri"], json!(u));
    assert_eq!(d["range"], json!({ "start": { "line": 2, "character": 4 }, "end": { "line": 2, "character": 8 } }));
    let d = c.at("textDocument/definition", &u, 4, 4);
    assert_eq!(d["range"]["start"], json!({ "line": 3, "character": 6 }));
    let d = c.at("textDocument/definition", &u, 6, 5);
    assert_eq!(d["range"]["start"], json!({ "line": 0, "character": 13 }));

    // Completion: prelude names with types, this file's names, locals in scope, keywords.
    let items = c.at("textDocument/completion", &u, 4, 2);
    let items = items.as_array().expect("a completion list");
    let find = |label: &str| items.iter().find(|i| i["label"] == label).cloned();
    let map = find("map").expect("map is offered");
    assert!(map["detail"].as_str().unwrap().contains("->"), "{map}");
    assert!(find("match").is_some(), "keywords are offered");
    assert!(find("double").is_some());
    assert_eq!(find("twice").expect("a local in scope")["detail"], json!("Int"));
    assert!(find("Circle").is_some(), "constructors are offered");
    let rank = |label: &str| find(label).unwrap()["sortText"].as_str().unwrap().to_string();
    assert!(rank("twice") < rank("double") && rank("double") < rank("map") && rank("map") < rank("match"));

    // Document symbols: the top-level items.
    let syms = c.request("textDocument/documentSymbol", json!({ "textDocument": { "uri": u } }));
    let names: Vec<&str> = syms.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Shape", "double", "quad", "area", "main"]);
    let shape = &syms[0];
    let cons: Vec<&str> = shape["children"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(cons, ["Circle", "Rect"]);
    assert_eq!(syms[1]["detail"], json!("Int -> Int"));

    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_type_groups() {
    let mut c = Client::start();
    let u = uri("group.dp");
    let text = "type Tree = Leaf Int | Node Forest\nand Forest = Empty | Trees Tree Forest\n";
    assert_eq!(c.open(&u, text), json!([]));
    // Each type of a `type … and …` group is its own symbol, with its own constructors.
    let syms = c.request("textDocument/documentSymbol", json!({ "textDocument": { "uri": u } }));
    let names = |v: &Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&syms), ["Tree", "Forest"]);
    assert_eq!(names(&syms[0]["children"]), ["Leaf", "Node"]);
    assert_eq!(names(&syms[1]["children"]), ["Empty", "Trees"]);
    // `Forest` in Tree's body is the declaration on the next line.
    let d = c.at("textDocument/definition", &u, 0, 30);
    assert_eq!(d["range"]["start"], json!({ "line": 1, "character": 4 }));
    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_keeps_completing_through_a_syntax_error() {
    let mut c = Client::start();
    let u = uri("typing.dp");
    c.open(&u, "let total = 1\nlet more = total\n");
    let diags = c.change(&u, 2, "let total = 1\nlet more = total +\n");
    assert_eq!(diags.as_array().unwrap().len(), 1);
    let items = c.at("textDocument/completion", &u, 1, 18);
    let items = items.as_array().unwrap();
    assert!(items.iter().any(|i| i["label"] == "total"), "names from the last version that parsed");
    // A stdlib module's members after `nn.`, even while the line does not parse.
    c.change(&u, 3, "import nn\nlet t = 1\n");
    c.change(&u, 4, "import nn\nlet t = nn.\n");
    let items = c.at("textDocument/completion", &u, 1, 11);
    let items = items.as_array().unwrap();
    let linear = items.iter().find(|i| i["label"] == "linear").expect("nn.linear is offered");
    assert!(linear["detail"].as_str().unwrap().contains("->"), "{linear}");
    assert!(!items.iter().any(|i| i["label"] == "map"), "only the module's names");
    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_hover_and_definitions_around_a_syntax_error() {
    let mut c = Client::start();
    let u = uri("broken.dp");
    let text = "let total = 1.5\nlet broken = total +\nlet later = total * 2.0\nlet also = later |> sqrt\n";
    let diags = c.open(&u, text);
    let diags = diags.as_array().unwrap();
    assert_eq!(diags.len(), 1, "the syntax error only: {diags:?}");
    assert_eq!(range(&diags[0]).0, 2, "reported where the next item begins: {diags:?}");
    // The items before and after the broken one are checked: hover and definitions work.
    let h = c.at("textDocument/hover", &u, 2, 5);
    assert!(h["contents"]["value"].as_str().unwrap().contains("later : Float"), "{h}");
    let h = c.at("textDocument/hover", &u, 3, 5);
    assert!(h["contents"]["value"].as_str().unwrap().contains("also : Float"), "{h}");
    let d = c.at("textDocument/definition", &u, 3, 12);
    assert_eq!(d["range"]["start"]["line"], json!(2), "`later` is defined on line 2: {d}");
    let d = c.at("textDocument/definition", &u, 2, 13);
    assert_eq!(d["range"]["start"]["line"], json!(0), "`total` is defined on line 0: {d}");
    assert_eq!(c.finish(), 0);
}

#[test]
fn lsp_protocol_edges() {
    let mut c = Client::start();
    // Unknown requests are answered with an error, unknown notifications ignored.
    let r = c.call("textDocument/unknownThing", json!({}));
    assert_eq!(r["error"]["code"], json!(-32601), "{r}");
    c.notify("$/somethingElse", json!({}));
    // A request for a document never opened: an empty answer, not a failure.
    assert_eq!(c.at("textDocument/hover", &uri("nowhere.dp"), 0, 0), Value::Null);
    // After shutdown, requests are refused; exit then ends the process with 0.
    assert_eq!(c.request("shutdown", Value::Null), Value::Null);
    let r = c.call("textDocument/hover", json!({}));
    assert_eq!(r["error"]["code"], json!(-32600), "{r}");
    c.notify("exit", Value::Null);
    assert_eq!(c.wait(), 0);

    // `exit` without `shutdown` is exit code 1, as the protocol says.
    let mut c = Client::start();
    c.notify("exit", Value::Null);
    assert_eq!(c.wait(), 1);

    // The client vanishing (end of input) ends the server too.
    let mut c = Client::start();
    assert_eq!(c.wait(), 1);
}

#[test]
fn lsp_hover_shows_doc_comments_and_definition_reaches_the_standard_library() {
    let mut c = Client::start();
    let u = uri("stdlib_docs.dp");
    let text = "import nn\n/// Adds one.\nlet inc x = x + 1\nlet ys = map inc [1, 2]\nlet l = nn.linear\n";
    assert_eq!(c.open(&u, text), json!([]));
    // A prelude function, a member of an imported standard-library module, the document's own.
    let h = c.at("textDocument/hover", &u, 3, 10);
    assert!(h["contents"]["value"].as_str().unwrap().contains("applies `f` to each element"), "{h}");
    let h = c.at("textDocument/hover", &u, 4, 12);
    assert!(h["contents"]["value"].as_str().unwrap().contains("A dense layer"), "{h}");
    let h = c.at("textDocument/hover", &u, 3, 14);
    assert!(h["contents"]["value"].as_str().unwrap().contains("Adds one."), "{h}");
    // Go to definition: into the prelude and into nn, served as files.
    for (line, col, module, def) in [(3, 10, "prelude.dp", "let map "), (4, 12, "nn.dp", "let linear ")] {
        let d = c.at("textDocument/definition", &u, line, col);
        let target = d["uri"].as_str().expect("a location");
        assert!(target.starts_with("file://") && target.ends_with(module), "{d}");
        let path = target.trim_start_matches("file://");
        let source = std::fs::read_to_string(path).expect("the served standard-library file");
        let at = d["range"]["start"]["line"].as_u64().unwrap() as usize;
        assert!(source.lines().nth(at).unwrap().starts_with(def), "{d}");
    }
    assert_eq!(c.finish(), 0);
}
