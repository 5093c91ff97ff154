//! safetensors files (the format of Hugging Face's `safetensors`, read by PyTorch, JAX and
//! NumPy): an 8-byte little-endian header length, a JSON header mapping each tensor's name to
//! its `dtype`, `shape` and `data_offsets` (plus an optional `__metadata__` of strings), then
//! the data, little-endian and C order.
//!
//! Written here rather than with the `safetensors` crate: the format is one JSON object and a
//! byte range per tensor; doing it ourselves writes each tensor's bytes straight from its
//! buffer (no copy into an intermediate map of views), converts on load with the same exactness
//! rules as `.npy` files (`npy::convert`), and adds no dependency beyond the JSON parser the
//! workspace already has.

use crate::{npy, DType, TResult, Tensor};
use std::io::Write;

/// The header may not be larger than this (the `safetensors` package's own limit): a corrupt
/// length is refused before anything that large is read as JSON.
const MAX_HEADER: usize = 100_000_000;

/// One tensor's entry in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    /// The safetensors dtype: `F32`, `F64`, `I64`, `BOOL`, …
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    begin: usize,
    end: usize,
}

/// A file read whole: its entries (sorted by name, as the format stores them) and its bytes.
pub struct File {
    pub entries: Vec<Entry>,
    bytes: Vec<u8>,
    data_start: usize,
    path: String,
}

/// What a tensor in the file holds, for the writer: a tensor (in its dtype), or one float64 scalar
/// (a Float of the interpreter, stored without rounding).
pub enum Leaf<'a> {
    Tensor(&'a Tensor),
    Scalar(f64),
}

/// The NumPy dtype (`npy::convert`'s `descr`) of a safetensors dtype, if dp can load it.
fn descr(dtype: &str) -> Option<&'static str> {
    Some(match dtype {
        "BOOL" => "|b1",
        "U8" => "|u1",
        "I8" => "|i1",
        "U16" => "<u2",
        "I16" => "<i2",
        "U32" => "<u4",
        "I32" => "<i4",
        "U64" => "<u8",
        "I64" => "<i8",
        "F16" => "<f2",
        "BF16" => "<bf2",
        "F32" => "<f4",
        "F64" => "<f8",
        _ => return None,
    })
}

/// Whether dp can load tensors of this dtype.
pub fn loadable(dtype: &str) -> bool {
    descr(dtype).is_some()
}

fn width(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" | "C64" => 8,
        _ => return None,
    })
}

pub fn read(path: &str) -> TResult<File> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    parse(bytes, path)
}

/// Checks the header of a file's bytes; `path` heads errors.
pub fn parse(bytes: Vec<u8>, path: &str) -> TResult<File> {
    let bad = |why: String| format!("`{path}` is not a safetensors file: {why}");
    let len = bytes.get(..8).ok_or_else(|| bad("it is shorter than its 8-byte header length".into()))?;
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    let len = usize::try_from(len).ok().filter(|&l| l <= MAX_HEADER && l <= bytes.len() - 8).ok_or_else(|| {
        bad(format!("the header length {len} is larger than the file ({} bytes) or than 100 MB", bytes.len()))
    })?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..8 + len]).map_err(|e| bad(format!("the header is not JSON ({e})")))?;
    let serde_json::Value::Object(map) = header else {
        return Err(bad("the header is not a JSON object".into()).into());
    };
    let data_len = bytes.len() - 8 - len;
    let mut entries = Vec::new();
    for (name, info) in map {
        if name == "__metadata__" {
            continue;
        }
        let field = |k: &str| info.get(k).ok_or_else(|| bad(format!("tensor `{name}` has no `{k}`")));
        let dtype = field("dtype")?.as_str().ok_or_else(|| bad(format!("tensor `{name}`: `dtype` is not a string")))?;
        let numbers = |k: &str| -> TResult<Vec<usize>> {
            let list = field(k)?.as_array().ok_or_else(|| bad(format!("tensor `{name}`: `{k}` is not a list")))?;
            Ok(list
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad(format!("tensor `{name}`: `{k}` holds something other than sizes")))?)
        };
        let shape = numbers("shape")?;
        let offsets = numbers("data_offsets")?;
        let [begin, end] = offsets[..] else {
            return Err(bad(format!("tensor `{name}`: `data_offsets` is not [begin, end]")).into());
        };
        if begin > end || end > data_len {
            return Err(bad(format!(
                "tensor `{name}`: its data [{begin}, {end}) lies outside the {data_len} bytes of data"
            ))
            .into());
        }
        let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if let Some(w) = width(dtype) {
            if elements.and_then(|n| n.checked_mul(w)) != Some(end - begin) {
                return Err(bad(format!(
                    "tensor `{name}`: shape {shape:?} of {dtype} needs a different number of bytes than its {}",
                    end - begin
                ))
                .into());
            }
        }
        entries.push(Entry { name, dtype: dtype.to_string(), shape, begin, end });
    }
    Ok(File { entries, bytes, data_start: 8 + len, path: path.to_string() })
}

impl File {
    /// The entry named `name`.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// An entry's data as a tensor in the dtype dp keeps for it, exactly or refused (`npy::convert`).
    pub fn tensor(&self, e: &Entry) -> TResult<Tensor> {
        let what = format!("{}` tensor `{}", self.path, e.name);
        let d = descr(&e.dtype).ok_or_else(|| format!("`{what}`: dp cannot load dtype {}", e.dtype))?;
        npy::convert(d, &e.shape, &self.bytes[self.data_start + e.begin..self.data_start + e.end], &what)
    }

    /// A 0-d entry as a float64, exactly: Floats are saved as F64 and come back unrounded.
    pub fn scalar(&self, e: &Entry) -> TResult<f64> {
        let data = &self.bytes[self.data_start + e.begin..self.data_start + e.end];
        if e.dtype == "F64" && data.len() == 8 {
            return Ok(f64::from_le_bytes(data.try_into().expect("8 bytes")));
        }
        Ok(self.tensor(e)?.to_f64s()?.first().copied().unwrap_or(f64::NAN))
    }
}

/// Writes `leaves` (name, data) to `path`, with `metadata` as the header's `__metadata__`.
pub fn write(path: &str, leaves: &[(String, Leaf)], metadata: &[(&str, &str)]) -> TResult<()> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m = metadata.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut offset = 0usize;
    for (name, leaf) in leaves {
        let (dtype, shape, bytes) = match leaf {
            Leaf::Tensor(t) => {
                let (name, width) = match t.dtype() {
                    DType::F32 => ("F32", 4),
                    DType::F64 => ("F64", 8),
                    DType::I64 => ("I64", 8),
                    DType::Bool => ("BOOL", 1),
                };
                (name, t.shape().to_vec(), t.len() * width)
            }
            Leaf::Scalar(_) => ("F64", Vec::new(), 8),
        };
        if header.contains_key(name) {
            return Err(format!("cannot write `{path}`: two tensors are named `{name}`").into());
        }
        let entry = serde_json::json!({ "dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes] });
        header.insert(name.clone(), entry);
        offset += bytes;
    }
    let mut text = serde_json::to_string(&serde_json::Value::Object(header)).map_err(|e| e.to_string())?;
    // The data starts 8-byte aligned, as the safetensors package writes it (readers may map it).
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let err = |e: std::io::Error| format!("cannot write `{path}`: {e}");
    let file = std::fs::File::create(path).map_err(err)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(&(text.len() as u64).to_le_bytes()).map_err(err)?;
    out.write_all(text.as_bytes()).map_err(err)?;
    for (_, leaf) in leaves {
        match leaf {
            Leaf::Scalar(x) => out.write_all(&x.to_le_bytes()).map_err(err)?,
            Leaf::Tensor(t) => match t.cpu().and_then(|a| a.as_slice()) {
                Some(s) if cfg!(target_endian = "little") => out.write_all(bytemuck::cast_slice(s)).map_err(err)?,
                _ => out.write_all(&npy::le_bytes(t)?).map_err(err)?,
            },
        }
    }
    out.flush().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> String {
        std::env::temp_dir().join(format!("dp-st-{}-{name}", std::process::id())).to_string_lossy().into_owned()
    }

    #[test]
    fn round_trip_and_header_layout() {
        let path = temp("rt.safetensors");
        let t = Tensor::from_vec(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5]).unwrap();
        write(&path, &[("w".into(), Leaf::Tensor(&t)), ("b".into(), Leaf::Scalar(0.1))], &[("format", "pt")]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!((8 + n) % 8, 0, "the data is 8-byte aligned");
        let f = read(&path).unwrap();
        let names: Vec<&str> = f.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["b", "w"]);
        assert_eq!(f.scalar(f.get("b").unwrap()).unwrap(), 0.1);
        assert_eq!(f.tensor(f.get("w").unwrap()).unwrap().data(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.5]);
    }

    #[test]
    fn malformed_files_are_errors_not_panics() {
        let path = temp("good.safetensors");
        let t = Tensor::from_vec(&[2], vec![1.0, 2.0]).unwrap();
        write(&path, &[("w".into(), Leaf::Tensor(&t))], &[]).unwrap();
        let good = std::fs::read(&path).unwrap();
        for cut in 0..good.len() {
            if let Ok(f) = parse(good[..cut].to_vec(), "cut") {
                for e in f.entries.clone() {
                    let _ = f.tensor(&e);
                }
            }
        }
        for i in 0..good.len() {
            for b in [0u8, b'"', b'[', b'9', 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                if let Ok(f) = parse(bad, "bad") {
                    for e in f.entries.clone() {
                        let _ = f.tensor(&e);
                        let _ = f.scalar(&e);
                    }
                }
            }
        }
        let huge = [u64::MAX.to_le_bytes().to_vec(), b"{}".to_vec()].concat();
        assert!(parse(huge, "h").err().is_some_and(|e| e.msg.contains("header length")));
    }
}
