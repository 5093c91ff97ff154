//! `dp jupyter install`: writes the kernel spec (`kernels/dp/kernel.json`) where Jupyter looks
//! for kernels, following `jupyter kernelspec install`'s conventions.

use serde_json::json;
use std::path::{Path, PathBuf};

/// Where the kernel spec goes.
pub enum Target {
    /// The user's Jupyter data directory (`JUPYTER_DATA_DIR`, else the platform's default).
    User,
    /// `PREFIX/share/jupyter` (a virtual environment's prefix, or a test's directory, which
    /// `JUPYTER_PATH=PREFIX/share/jupyter` then makes visible).
    Prefix(PathBuf),
}

/// The user's Jupyter data directory, as jupyter_core computes it: `JUPYTER_DATA_DIR`, else
/// `$XDG_DATA_HOME/jupyter` or `~/.local/share/jupyter` (Linux), `~/Library/Jupyter` (macOS),
/// `%APPDATA%\jupyter` (Windows).
pub fn user_data_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("JUPYTER_DATA_DIR") {
        return Some(dir);
    }
    if cfg!(windows) {
        return var("APPDATA").map(|a| a.join("jupyter"));
    }
    let home = var("HOME")?;
    if cfg!(target_os = "macos") {
        return Some(home.join("Library").join("Jupyter"));
    }
    Some(var("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local").join("share")).join("jupyter"))
}

/// The kernel spec of the `dp` at `exe`, whose kernel puts tensors on `device` (`--device`).
pub fn kernel_json(exe: &Path, device: &str) -> serde_json::Value {
    let mut argv = vec![exe.to_string_lossy().to_string()];
    if device != "cpu" {
        argv.extend(["--device".to_string(), device.to_string()]);
    }
    argv.extend(["jupyter", "kernel", "{connection_file}"].map(String::from));
    json!({
        "argv": argv,
        "display_name": "dp",
        "language": "dp",
        "interrupt_mode": "message",
        "metadata": {},
    })
}

/// Writes the spec of this very `dp` executable; returns the spec's directory.
pub fn install(target: &Target, device: &str) -> Result<PathBuf, String> {
    let data = match target {
        Target::User => {
            user_data_dir().ok_or("cannot tell the Jupyter data directory: set JUPYTER_DATA_DIR or HOME")?
        }
        Target::Prefix(p) => p.join("share").join("jupyter"),
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot tell where this dp is: {e}"))?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let dir = data.join("kernels").join("dp");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let text = serde_json::to_string_pretty(&kernel_json(&exe, device)).unwrap_or_default();
    let file = dir.join("kernel.json");
    std::fs::write(&file, text + "\n").map_err(|e| format!("cannot write `{}`: {e}", file.display()))?;
    Ok(dir)
}

/// `dp [--device D] jupyter install [--user | --prefix DIR]`: the exit code.
pub fn command(prefix: Option<String>, device: &str) -> u8 {
    let target = prefix.map_or(Target::User, |p| Target::Prefix(p.into()));
    match install(&target, device) {
        Ok(dir) => {
            println!("installed the dp kernel spec in {}", dir.display());
            println!("start `jupyter lab` (or `jupyter notebook`) and choose the kernel \"dp\"");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_flag_is_recorded_unless_it_is_the_default() {
        let exe = Path::new("/opt/dp");
        assert_eq!(kernel_json(exe, "cpu")["argv"], json!(["/opt/dp", "jupyter", "kernel", "{connection_file}"]));
        assert_eq!(
            kernel_json(exe, "auto")["argv"],
            json!(["/opt/dp", "--device", "auto", "jupyter", "kernel", "{connection_file}"])
        );
    }
}
