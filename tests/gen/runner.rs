//! Runs many generated programs on all cores: each worker takes the next program index,
//! writes the program under one temporary directory, runs it and checks the result. A failing
//! program is saved there (with its output) and reported with its source.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    /// The exit status, or None when killed (by the timeout or a signal).
    pub code: Option<i32>,
    pub timed_out: bool,
}

/// Runs a command with a time limit, capturing its output.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Outcome {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start a process");
    // Drain both pipes on threads so a chatty program cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for a process") {
            break st;
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("wait for a killed process");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Outcome {
        stdout: String::from_utf8_lossy(&out_t.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_t.join().unwrap()).into_owned(),
        code: status.code(),
        timed_out,
    }
}

/// When to stop: after `count` programs, or when `seconds` have passed (whichever first).
pub struct Budget {
    pub count: usize,
    pub seconds: Option<u64>,
}

pub struct Summary {
    pub ran: usize,
    pub elapsed: Duration,
    pub failures: Vec<String>,
    pub dir: PathBuf,
}

/// Calls `check(index, dir)` for program indices 0, 1, … on every core until the budget is
/// spent; `check` returns a failure report or None. At most `keep` reports are kept.
pub fn run_many(label: &str, budget: &Budget, check: &(dyn Fn(usize, &Path) -> Option<String> + Sync)) -> Summary {
    let dir = std::env::temp_dir().join(format!("dp-gen-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the programs' directory");
    let next = AtomicUsize::new(0);
    let ran = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let start = Instant::now();
    let deadline = budget.seconds.map(|s| start + Duration::from_secs(s));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if deadline.is_some_and(|d| Instant::now() > d) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= budget.count {
                    break;
                }
                if let Some(report) = check(i, &dir) {
                    let mut f = failures.lock().unwrap();
                    if f.len() < 50 {
                        f.push(report);
                    }
                }
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    Summary { ran: ran.into_inner(), elapsed: start.elapsed(), failures, dir }
}

/// The faults that are dp's bugs whatever the program: a panic, an internal error.
pub fn dp_fault(o: &Outcome) -> Option<&'static str> {
    let both = format!("{}{}", o.stdout, o.stderr);
    if o.timed_out {
        Some("did not finish in time")
    } else if o.code == Some(101) || both.contains("panicked") {
        Some("the interpreter panicked")
    } else if both.contains("internal:") || both.contains("internal error") {
        Some("an `internal:` fault (an unsound check or an interpreter bug)")
    } else if both.contains("this is a bug in dp") {
        Some("dp reported a bug in itself")
    } else if o.code.is_none() {
        Some("killed by a signal")
    } else {
        None
    }
}

/// Keeps a failing program and its output under `dir/failures/`, returning the report text.
pub fn save_failure(dir: &Path, name: &str, what: &str, files: &[(&str, &str)], o: &Outcome) -> String {
    let fdir = dir.join("failures");
    let _ = std::fs::create_dir_all(&fdir);
    let mut report = format!("{name}: {what}\n");
    for (ext, text) in files {
        let path = fdir.join(format!("{name}.{ext}"));
        let _ = std::fs::write(&path, text);
        report.push_str(&format!("--- {} ({})\n{text}\n", ext, path.display()));
    }
    let out = format!("exit: {:?}\n--- stdout\n{}\n--- stderr\n{}", o.code, o.stdout, o.stderr);
    let _ = std::fs::write(fdir.join(format!("{name}.out")), &out);
    report.push_str(&out);
    report
}
