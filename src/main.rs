//! The `dp` command line: `dp run`, `dp check`, `dp` (the REPL). No logic lives here.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Large freed blocks kept for the next request of their size (src/memory.rs).
#[global_allocator]
static ALLOCATOR: dp::memory::Reusing = dp::memory::Reusing::new();

#[derive(Parser)]
#[command(name = "dp", version, about = "dp: a differentiable functional language with native shift/reset")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Maximum dp call depth before "stack limit exceeded".
    #[arg(long, global = true, default_value_t = dp::eval::machine::DEFAULT_STACK_LIMIT)]
    stack_limit: usize,
    /// Where new tensors go: `cpu`, `gpu` (an error without a GPU adapter) or `auto` (the GPU
    /// when there is one, else the CPU, said once on stderr).
    #[arg(long, global = true, default_value = "cpu", value_parser = ["cpu", "gpu", "auto"])]
    device: String,
    /// Colour in reports and the REPL's prompt: `auto` (on a terminal, unless `NO_COLOR` is set
    /// or `TERM=dumb`), `always` or `never`.
    #[arg(long, global = true, default_value = "auto", value_parser = ["auto", "always", "never"])]
    color: String,
}

#[derive(Subcommand)]
enum Command {
    /// Type-check and run a program; arguments after the file go to `args`.
    Run {
        file: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Type-check a program without running it.
    Check { file: String },
    /// Start the interactive REPL (the default).
    Repl,
    /// Run the language server (LSP over standard input and output).
    Lsp,
    /// The Jupyter kernel: `dp jupyter install` registers it, Jupyter runs `dp jupyter kernel`.
    Jupyter {
        #[command(subcommand)]
        action: Jupyter,
    },
    /// Write the standard library's reference (names, types, doc comments) as Markdown.
    Doc {
        #[arg(default_value = "docs/stdlib.md")]
        out: String,
    },
}

#[derive(Subcommand)]
enum Jupyter {
    /// Register dp's kernel spec with Jupyter (by default in the user's Jupyter data directory).
    Install {
        /// Into the user's data directory (`JUPYTER_DATA_DIR`, else the platform's default).
        #[arg(long, conflicts_with = "prefix")]
        user: bool,
        /// Into `DIR/share/jupyter` (a virtual environment, or a directory named by `JUPYTER_PATH`).
        #[arg(long, value_name = "DIR")]
        prefix: Option<String>,
    },
    /// Run the kernel on the connection file Jupyter wrote (Jupyter starts this itself).
    Kernel { connection_file: String },
}

/// Applies `--device`; false (after saying why) when it cannot be honoured.
fn set_device(device: &str) -> bool {
    let choice = match dp::tensor::gpu::DeviceChoice::parse(device) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: --device: {e}");
            return false;
        }
    };
    match dp::tensor::gpu::set_default_device(choice) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("error: --device {device}: {e}");
            false
        }
    }
}

/// Runs the command on the interpreter's thread; returns the exit code.
fn run_command(cli: Cli) -> u8 {
    match cli.command {
        Some(Command::Run { .. })
        | Some(Command::Repl)
        | Some(Command::Jupyter { action: Jupyter::Kernel { .. } })
        | None
            if !set_device(&cli.device) =>
        {
            1
        }
        Some(Command::Run { file, args }) => dp::cli::run_file(&file, args, cli.stack_limit, false),
        Some(Command::Check { file }) => dp::cli::run_file(&file, Vec::new(), cli.stack_limit, true),
        Some(Command::Repl) | None => dp::repl::start(cli.stack_limit),
        Some(Command::Lsp) => dp::lsp::serve(),
        Some(Command::Doc { out }) => dp::cli::doc(&out),
        Some(Command::Jupyter { action: Jupyter::Install { prefix, .. } }) => {
            dp::jupyter::install::command(prefix, &cli.device)
        }
        Some(Command::Jupyter { action: Jupyter::Kernel { connection_file } }) => {
            dp::jupyter::kernel(&connection_file, cli.stack_limit)
        }
    }
}

fn main() -> ExitCode {
    dp::memory::keep_freed_memory();
    let cli = Cli::parse();
    dp::cli::set_color(dp::cli::ColorChoice::parse(&cli.color).unwrap_or(dp::cli::ColorChoice::Auto));
    // The checker recurses on the syntax tree; give it room for deeply nested programs.
    let handle = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            dp_tensor::cpu::subnormals::apply_to_this_thread();
            run_command(cli)
        })
        .expect("spawn the interpreter thread");
    let joined = handle.join();
    // Every command ends here, the program's GPU work submitted and finished before `exit`
    // (a no-op when the GPU was never used; docs/gpu.md).
    dp_tensor::gpu::shutdown();
    match joined {
        Ok(code) => ExitCode::from(code),
        Err(_) => {
            eprintln!("dp: internal error (a panic); please report it with the program that caused it");
            ExitCode::from(101)
        }
    }
}
