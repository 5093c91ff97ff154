//! Generates the parser from grammar/dp.lalrpop and the table of embedded stdlib modules.
use std::{env, fs, path::Path};

fn main() {
    let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    lalrpop::Configuration::new()
        .set_in_dir("grammar")
        .set_out_dir(&out)
        .emit_rerun_directives(true)
        .process()
        .expect("grammar generation failed");

    let mut table = String::from("pub const STDLIB: &[(&str, &str)] = &[\n");
    let mut names: Vec<_> = fs::read_dir("stdlib")
        .expect("stdlib/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "dp"))
        .collect();
    names.sort();
    for p in names {
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        let abs = fs::canonicalize(&p).unwrap();
        table.push_str(&format!("    ({stem:?}, include_str!({:?})),\n", abs.display().to_string()));
    }
    table.push_str("];\n");
    fs::write(Path::new(&out).join("stdlib_table.rs"), table).unwrap();
    println!("cargo:rerun-if-changed=stdlib");
}
