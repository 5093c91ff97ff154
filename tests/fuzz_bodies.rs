//! The file-format fuzz targets' bodies (fuzz/src/lib.rs) under plain `cargo test`: each runs
//! over its seed corpus (`fuzz/seeds/TARGET/`) and a few thousand seeded mutations of it. A
//! panic fails the test; the input is printed so it can be added to the seeds. The libFuzzer
//! runs (fuzz/README.md) search far wider; this keeps the bodies exercised in CI.

#[path = "../fuzz/src/lib.rs"]
mod bodies;

use std::path::Path;

/// A small xorshift generator: the mutations are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to the formats: quotes, separators, line breaks, digits, signs, the
/// `.npy` magic and header punctuation, ZIP record signatures, safetensors header keys.
const INTERESTING: &[&[u8]] = &[
    b"\"",
    b",",
    b"\n",
    b"\r\n",
    b"\r",
    b"\"\"",
    b"0",
    b"-",
    b"1e39",
    b"nan",
    b"inf",
    b" ",
    b"\xff",
    b"\x93NUMPY",
    b"'descr': '<f8'",
    b"'shape': (",
    b"), }",
    b"'fortran_order': True",
    b"\x00",
    b"\x01",
    b"\xff\xff\xff\xff",
    b"PK\x03\x04",
    b"PK\x01\x02",
    b"PK\x05\x06",
    b"\x08\x00",
    b"\"dtype\":\"F64\"",
    b"\"shape\":[",
    b"\"data_offsets\":[0,",
    b"\"__metadata__\"",
    b"BF16",
];

fn mutate(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at.min(end)..end);
            }
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            4 => {
                // Splice in a piece of another seed.
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                let to = (from + rng.below(64)).min(other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            _ => v.truncate(at),
        }
    }
    v
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    let seeds: Vec<Vec<u8>> = paths.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    assert!(seeds.len() >= 3, "{target}: expected at least 3 seeds in {}", dir.display());
    seeds
}

fn exercise(name: &str, body: fn(&[u8]), mutations: usize) {
    let seeds = seeds(name);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let mut inputs: Vec<Vec<u8>> = seeds.clone();
    for _ in 0..mutations {
        let seed = &seeds[rng.below(seeds.len())];
        inputs.push(mutate(&mut rng, seed, &seeds));
    }
    for input in inputs {
        let r = std::panic::catch_unwind(|| body(&input));
        assert!(r.is_ok(), "{name} panicked on {:?}", String::from_utf8_lossy(&input));
    }
}

#[test]
fn every_target_survives_its_seeds_and_their_mutations() {
    for (name, body) in bodies::TARGETS {
        exercise(name, *body, 3000);
    }
}
