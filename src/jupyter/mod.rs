//! The Jupyter kernel (`dp jupyter kernel CONNECTION_FILE`) and its installer (`dp jupyter
//! install`). The session runs on the calling thread (`engine`); the five sockets run on a
//! tokio runtime of their own thread and talk to it through channels. ZeroMQ is the pure-Rust
//! `zeromq` crate, so building dp needs no C library.

pub mod engine;
pub mod install;
pub mod wire;

use engine::{Engine, Job, Publish};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use wire::{Key, Message};
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// What the connection file (written by the Jupyter client) says.
#[derive(Debug)]
pub struct Connection {
    pub transport: String,
    pub ip: String,
    pub shell_port: u16,
    pub iopub_port: u16,
    pub stdin_port: u16,
    pub control_port: u16,
    pub hb_port: u16,
    pub key: String,
}

impl Connection {
    pub fn parse(text: &str) -> Result<Connection, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let port = |name: &str| -> Result<u16, String> {
            v[name].as_u64().and_then(|p| u16::try_from(p).ok()).ok_or(format!("no valid `{name}`"))
        };
        let scheme = v["signature_scheme"].as_str().unwrap_or("hmac-sha256");
        if scheme != "hmac-sha256" {
            return Err(format!("signature scheme `{scheme}` is not supported (only hmac-sha256)"));
        }
        let transport = v["transport"].as_str().unwrap_or("tcp").to_string();
        if transport != "tcp" {
            return Err(format!("transport `{transport}` is not supported (only tcp)"));
        }
        Ok(Connection {
            transport,
            ip: v["ip"].as_str().unwrap_or("127.0.0.1").to_string(),
            shell_port: port("shell_port")?,
            iopub_port: port("iopub_port")?,
            stdin_port: port("stdin_port")?,
            control_port: port("control_port")?,
            hb_port: port("hb_port")?,
            key: v["key"].as_str().unwrap_or("").to_string(),
        })
    }

    fn endpoint(&self, port: u16) -> String {
        format!("{}://{}:{port}", self.transport, self.ip)
    }
}

/// `dp jupyter kernel FILE`: serves one notebook until a shutdown request; the exit code.
pub fn kernel(connection_file: &str, stack_limit: usize) -> u8 {
    let conn =
        match std::fs::read_to_string(connection_file).map_err(|e| e.to_string()).and_then(|t| Connection::parse(&t)) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: connection file `{connection_file}`: {e}");
                return 1;
            }
        };
    let session = match crate::cli::new_session(stack_limit) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let interrupt = session.interrupt_flag();
    // A stray SIGINT (Ctrl-C in the terminal that started Jupyter) interrupts the cell, as in
    // the REPL, instead of killing the kernel.
    let flag = interrupt.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let (publish_tx, publish_rx) = mpsc::unbounded_channel();
    let (job_tx, job_rx) = std::sync::mpsc::channel();
    let engine = Engine::new(session, publish_tx.clone());
    let sockets = std::thread::Builder::new().name("dp-jupyter-sockets".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("dp kernel: cannot start the socket runtime: {e}");
                end_process(1);
            }
        };
        let server =
            Server { key: Key::new(&conn.key), session: uuid::Uuid::new_v4().to_string(), publish: publish_tx };
        if let Err(e) = runtime.block_on(server.run(&conn, publish_rx, job_tx, interrupt)) {
            eprintln!("dp kernel: {e}");
            end_process(1);
        }
        // A shutdown request: the reply is sent; end the process, session thread included.
        end_process(0);
    });
    if let Err(e) = sockets {
        eprintln!("dp kernel: cannot start the socket thread: {e}");
        return 1;
    }
    engine.serve(job_rx);
    0
}

/// Ends the process from the socket thread, the GPU quiesced first (`gpu::shutdown`, as
/// `main` does): the session thread may have left GPU work under way, or be running a cell.
fn end_process(code: i32) -> ! {
    crate::tensor::gpu::shutdown();
    std::process::exit(code)
}

struct Server {
    key: Key,
    /// The kernel's session id (every message's `header.session`).
    session: String,
    publish: mpsc::UnboundedSender<Publish>,
}

async fn bind<S: Socket>(conn: &Connection, port: u16) -> Result<S, String> {
    let mut socket = S::new();
    let endpoint = conn.endpoint(port);
    socket.bind(&endpoint).await.map_err(|e| format!("cannot bind {endpoint}: {e}"))?;
    Ok(socket)
}

impl Server {
    async fn run(
        self,
        conn: &Connection,
        publish_rx: mpsc::UnboundedReceiver<Publish>,
        jobs: std::sync::mpsc::Sender<Job>,
        interrupt: Arc<AtomicBool>,
    ) -> Result<(), String> {
        let shell: zeromq::RouterSocket = bind(conn, conn.shell_port).await?;
        let control: zeromq::RouterSocket = bind(conn, conn.control_port).await?;
        let iopub: zeromq::PubSocket = bind(conn, conn.iopub_port).await?;
        // The stdin socket is bound so that clients connect, but never used: a cell cannot ask
        // for input (`read_line` reads the kernel's own standard input, which Jupyter closes).
        let _stdin: zeromq::RouterSocket = bind(conn, conn.stdin_port).await?;
        let heartbeat: zeromq::RepSocket = bind(conn, conn.hb_port).await?;
        let server = Arc::new(self);
        tokio::spawn(heartbeat_loop(heartbeat));
        tokio::spawn(iopub_loop(iopub, server.key.clone(), server.session.clone(), publish_rx));
        let shutdown = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(server.clone().shell_loop(shell, jobs, shutdown.clone()));
        let control = tokio::spawn(server.clone().control_loop(control, interrupt, shutdown.clone()));
        shutdown.notified().await;
        control.abort();
        // Let the shutdown reply and the last IOPub messages leave before the process ends.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        Ok(())
    }

    /// Receives and verifies one message; a bad one is logged and dropped. None: the socket
    /// is closed.
    async fn receive<S: SocketRecv>(&self, socket: &mut S, name: &str) -> Option<Option<Message>> {
        match socket.recv().await {
            Ok(m) => match Message::parse(m.into_vec(), &self.key) {
                Ok(m) => Some(Some(m)),
                Err(e) => {
                    eprintln!("dp kernel: dropped a message on {name}: {e}");
                    Some(None)
                }
            },
            Err(e) => {
                eprintln!("dp kernel: {name} socket: {e}");
                None
            }
        }
    }

    async fn send<S: SocketSend>(&self, socket: &mut S, m: Message) {
        let frames = m.frames(&self.key);
        match ZmqMessage::try_from(frames) {
            Ok(z) => {
                if let Err(e) = socket.send(z).await {
                    eprintln!("dp kernel: cannot send a {}: {e}", m.msg_type());
                }
            }
            Err(e) => eprintln!("dp kernel: cannot frame a {}: {e}", m.msg_type()),
        }
    }

    fn status(&self, parent: &Value, state: &str) {
        let _ = self.publish.send(Publish {
            parent: parent.clone(),
            msg_type: "status",
            content: json!({"execution_state": state}),
        });
    }

    async fn shell_loop(
        self: Arc<Self>,
        mut shell: zeromq::RouterSocket,
        jobs: std::sync::mpsc::Sender<Job>,
        shutdown: Arc<tokio::sync::Notify>,
    ) {
        while let Some(m) = self.receive(&mut shell, "shell").await {
            let Some(m) = m else { continue };
            self.status(&m.header, "busy");
            let reply = match m.msg_type() {
                "shutdown_request" => Some(self.shutdown_reply(&m)),
                _ => self.shell_reply(&m, &jobs).await,
            };
            if let Some(content) = reply {
                self.send(&mut shell, m.reply(content, &self.session)).await;
            }
            self.status(&m.header, "idle");
            if m.msg_type() == "shutdown_request" {
                shutdown.notify_one();
            }
        }
    }

    /// The content of the reply to a shell request (None: the message wants no reply).
    async fn shell_reply(&self, m: &Message, jobs: &std::sync::mpsc::Sender<Job>) -> Option<Value> {
        let c = &m.content;
        let code = c["code"].as_str().unwrap_or("").to_string();
        let cursor = c["cursor_pos"].as_u64().map_or(code.chars().count(), |p| p as usize);
        let (reply, answer) = oneshot::channel();
        let job = match m.msg_type() {
            "kernel_info_request" => return Some(kernel_info()),
            "history_request" => return Some(json!({"status": "ok", "history": []})),
            "comm_info_request" => return Some(json!({"status": "ok", "comms": {}})),
            // No comms (widgets): opening one is refused by closing it, as the protocol says.
            "comm_open" => {
                let close = json!({"comm_id": c["comm_id"], "data": {}});
                let _ = self.publish.send(Publish { parent: m.header.clone(), msg_type: "comm_close", content: close });
                return None;
            }
            "comm_msg" | "comm_close" => return None,
            "execute_request" => Job::Execute {
                code,
                silent: c["silent"].as_bool().unwrap_or(false),
                store_history: c["store_history"].as_bool().unwrap_or(true),
                parent: m.header.clone(),
                reply,
            },
            "complete_request" => Job::Complete { code, cursor, reply },
            "inspect_request" => Job::Inspect { code, cursor, reply },
            "is_complete_request" => Job::IsComplete { code, reply },
            other => {
                eprintln!("dp kernel: `{other}` is not supported; no reply");
                return None;
            }
        };
        if jobs.send(job).is_err() {
            return Some(
                json!({"status": "error", "ename": "KernelError", "evalue": "the session has ended", "traceback": []}),
            );
        }
        // The session thread answers every job; a lost answer means it died.
        Some(answer.await.unwrap_or_else(
            |_| json!({"status": "error", "ename": "KernelError", "evalue": "the session has ended", "traceback": []}),
        ))
    }

    fn shutdown_reply(&self, m: &Message) -> Value {
        json!({"status": "ok", "restart": m.content["restart"].as_bool().unwrap_or(false)})
    }

    async fn control_loop(
        self: Arc<Self>,
        mut control: zeromq::RouterSocket,
        interrupt: Arc<AtomicBool>,
        shutdown: Arc<tokio::sync::Notify>,
    ) {
        while let Some(m) = self.receive(&mut control, "control").await {
            let Some(m) = m else { continue };
            let content = match m.msg_type() {
                // As Ctrl-C in the REPL: the machine stops at its next call and the cell
                // reports the interruption; the session keeps its definitions.
                "interrupt_request" => {
                    interrupt.store(true, Ordering::SeqCst);
                    json!({"status": "ok"})
                }
                "shutdown_request" => self.shutdown_reply(&m),
                "kernel_info_request" => kernel_info(),
                other => {
                    eprintln!("dp kernel: `{other}` is not supported on the control socket; no reply");
                    continue;
                }
            };
            self.send(&mut control, m.reply(content, &self.session)).await;
            if m.msg_type() == "shutdown_request" {
                shutdown.notify_one();
                return;
            }
        }
    }
}

fn kernel_info() -> Value {
    json!({
        "status": "ok",
        "protocol_version": wire::PROTOCOL_VERSION,
        "implementation": "dp",
        "implementation_version": env!("CARGO_PKG_VERSION"),
        "language_info": {
            "name": "dp",
            "version": env!("CARGO_PKG_VERSION"),
            "mimetype": "text/x-dp",
            "file_extension": ".dp",
            // dp's syntax is ML's: CodeMirror's and Pygments' OCaml modes colour it well.
            "codemirror_mode": "mllike",
            "pygments_lexer": "ocaml",
        },
        "banner": format!("dp {} — a differentiable functional language. :help lists the REPL's commands.", env!("CARGO_PKG_VERSION")),
        "help_links": [],
    })
}

async fn heartbeat_loop(mut hb: zeromq::RepSocket) {
    while let Ok(ping) = hb.recv().await {
        if hb.send(ping).await.is_err() {
            return;
        }
    }
}

/// Publishes the session's messages in order. Consecutive output of one stream waiting in the
/// queue goes out as one message: a loop that prints a line per step does not flood the
/// notebook with thousands of messages, yet nothing waits for more output to come.
async fn iopub_loop(mut iopub: zeromq::PubSocket, key: Key, session: String, mut rx: mpsc::UnboundedReceiver<Publish>) {
    let mut held: Option<Publish> = None;
    loop {
        let mut next = match held.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        if next.msg_type == "stream" {
            while let Ok(more) = rx.try_recv() {
                let same = more.msg_type == "stream"
                    && more.content["name"] == next.content["name"]
                    && more.parent == next.parent;
                if !same {
                    held = Some(more);
                    break;
                }
                let text = format!(
                    "{}{}",
                    next.content["text"].as_str().unwrap_or(""),
                    more.content["text"].as_str().unwrap_or("")
                );
                next.content["text"] = Value::String(text);
            }
        }
        let mut m = Message::new(&next.parent, next.msg_type, next.content, &session);
        // The topic: subscribers filter on it; Jupyter clients subscribe to everything.
        m.identities = vec![bytes::Bytes::from(format!("kernel.{}", next.msg_type))];
        let frames = m.frames(&key);
        if let Ok(z) = ZmqMessage::try_from(frames) {
            if let Err(e) = iopub.send(z).await {
                eprintln!("dp kernel: cannot publish a {}: {e}", m.msg_type());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_files() {
        let text = r#"{"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003, "control_port": 5004,
            "hb_port": 5005, "ip": "127.0.0.1", "key": "k", "transport": "tcp",
            "signature_scheme": "hmac-sha256", "kernel_name": "dp"}"#;
        let c = Connection::parse(text).unwrap();
        assert_eq!((c.shell_port, c.hb_port, c.key.as_str()), (5001, 5005, "k"));
        assert_eq!(c.endpoint(c.iopub_port), "tcp://127.0.0.1:5002");
        assert!(Connection::parse("{").unwrap_err().starts_with("not JSON"));
        assert!(Connection::parse(&text.replace("5005", "70000")).unwrap_err().contains("hb_port"));
        assert!(Connection::parse(&text.replace("hmac-sha256", "hmac-md5")).unwrap_err().contains("hmac-md5"));
        assert!(Connection::parse(&text.replace("\"tcp\"", "\"ipc\"")).unwrap_err().contains("ipc"));
    }
}
