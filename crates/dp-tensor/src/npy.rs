//! NumPy `.npy` files (format version 1.0–3.0), C order, either byte order. Everything becomes
//! float32 (dp's one tensor dtype) — but never silently wrongly: bool, int8/16/32/64, uint8/16/32
//! and float16/32/64 load when every value is represented (integers exactly; float64 rounded to
//! the nearest float32), and a file with an integer beyond float32's exact range (2^24) or a
//! finite float64 beyond float32's range is refused, naming the first such element.

use crate::{TResult, Tensor};

fn parse_header(h: &str) -> Result<(String, bool, Vec<usize>), String> {
    let field = |key: &str| -> Result<&str, String> {
        let i = h.find(&format!("'{key}'")).ok_or(format!("npy header lacks `{key}`"))?;
        Ok(h[i + key.len() + 2..].trim_start().trim_start_matches(':').trim_start())
    };
    let descr = field("descr")?;
    let descr = descr.strip_prefix('\'').ok_or("npy header: `descr` is not a quoted string")?;
    let descr = descr[..descr.find('\'').ok_or("npy header: bad `descr`")?].to_string();
    let fortran = field("fortran_order")?.starts_with("True");
    let shape_txt = field("shape")?;
    let inner = shape_txt.strip_prefix('(').ok_or("npy header: `shape` is not a tuple")?;
    let inner = &inner[..inner.find(')').ok_or("npy header: bad `shape`")?];
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| format!("npy header: bad dimension `{s}`")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr, fortran, shape))
}

/// Reads one element's bytes as an f64.
type Reader = Box<dyn Fn(&[u8]) -> f64>;

/// How to read one element: its width in bytes and a reader to f64 (exact for every integer
/// and float type up to 64 bits except integers beyond 2^53, which the range check refuses).
fn element_reader(descr: &str) -> Option<(usize, Reader)> {
    let (order, kind) = descr.split_at(descr.len().min(1));
    let big = match order {
        "<" | "=" | "|" => false,
        ">" => true,
        _ => return None,
    };
    macro_rules! read {
        ($t:ty) => {{
            let f: Reader = Box::new(move |b: &[u8]| {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                (if big { <$t>::from_be_bytes(a) } else { <$t>::from_le_bytes(a) }) as f64
            });
            Some((std::mem::size_of::<$t>(), f))
        }};
    }
    match kind {
        "b1" => Some((1, Box::new(|b: &[u8]| f64::from(u8::from(b[0] != 0))))),
        "u1" => read!(u8),
        "i1" => read!(i8),
        "u2" => read!(u16),
        "i2" => read!(i16),
        "u4" => read!(u32),
        "i4" => read!(i32),
        "u8" => read!(u64),
        "i8" => read!(i64),
        "bf2" => {
            let f: Reader = Box::new(move |b: &[u8]| {
                let bits = if big { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
                f64::from(f32::from_bits(u32::from(bits) << 16))
            });
            Some((2, f))
        }
        "f2" => {
            let f: Reader = Box::new(move |b: &[u8]| {
                let bits = if big { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
                half_to_f64(bits)
            });
            Some((2, f))
        }
        "f4" => read!(f32),
        "f8" => read!(f64),
        _ => None,
    }
}

fn half_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let frac = f64::from(h & 0x3ff);
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        0x1f if frac == 0.0 => f64::INFINITY,
        0x1f => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(i32::from(e) - 15),
    }
}

pub fn load(path: &str) -> TResult<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    decode(&bytes, path)
}

/// One `.npy` file's bytes as a tensor; `name` (a path, or an archive member) heads errors.
pub fn decode(bytes: &[u8], name: &str) -> TResult<Tensor> {
    let path = name;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(format!("`{path}` is not a NumPy .npy file").into());
    }
    let (hlen, start): (usize, usize) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        if bytes.len() < 12 {
            return Err(format!("`{path}`: truncated header").into());
        }
        (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
    };
    let header = bytes.get(start..start.saturating_add(hlen)).ok_or(format!("`{path}`: truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| format!("`{path}`: the header is not text"))?;
    let (descr, fortran, shape) = parse_header(header).map_err(|e| format!("`{path}`: {e}"))?;
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(
            format!("`{path}`: Fortran-ordered arrays are not supported (save with np.ascontiguousarray)").into()
        );
    }
    let data = &bytes[start + hlen..];
    if element_reader(&descr).is_none() {
        return Err(format!(
            "`{path}`: unsupported dtype `{descr}` (bool, int8–int64, uint8–uint64 and float16–float64 are)"
        )
        .into());
    }
    convert(&descr, &shape, data, path)
}

/// Elements of NumPy dtype `descr` (`<f8`, `|u1`, …; also `<bf2` for bfloat16, which NumPy
/// lacks but safetensors has) laid out in C order as a float32 tensor of `shape`: exactly, or
/// refused naming the first element that would change. Bytes past the data are ignored;
/// `what` names the source in errors.
pub fn convert(descr: &str, shape: &[usize], data: &[u8], what: &str) -> TResult<Tensor> {
    let path = what;
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let Some((width, read)) = element_reader(descr) else {
        return Err(format!("`{path}`: unsupported dtype `{descr}`").into());
    };
    let Some(size) = n.and_then(|n| n.checked_mul(width)).filter(|&s| s <= data.len()) else {
        return Err(format!("`{path}` is truncated: the shape {shape:?} needs more data than it holds").into());
    };
    if matches!(descr, "<f4" | "=f4") {
        // float32 in the machine's byte order is dp's own format: no conversion to check.
        let values = data[..size].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        return Tensor::from_vec(shape, values);
    }
    let integer = !descr.contains('f');
    let mut values = Vec::with_capacity(size / width);
    for (i, b) in data[..size].chunks_exact(width).enumerate() {
        let v = read(b);
        let x = v as f32;
        // Integers up to 2^24 are exact in float32; a float64 is rounded, but must stay in range.
        let exact = if integer { v.abs() <= 16_777_216.0 } else { x.is_finite() || !v.is_finite() };
        if !exact {
            let what =
                if integer { "an integer beyond float32's exact range (2^24)" } else { "beyond float32's range" };
            return Err(format!(
                "`{path}`: element {i} is {v}, {what}: dp's tensors are float32, and it would not be loaded exactly"
            )
            .into());
        }
        values.push(x);
    }
    Tensor::from_vec(shape, values)
}

pub fn save(path: &str, t: &Tensor) -> TResult<()> {
    Ok(std::fs::write(path, encode_tensor(t)).map_err(|e| format!("cannot write `{path}`: {e}"))?)
}

/// A tensor as the bytes of a `.npy` file (float32, little-endian, C order).
pub fn encode_tensor(t: &Tensor) -> Vec<u8> {
    let shape = t.shape();
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    encode("<f4", &shape_txt, &le_bytes(t))
}

/// A tensor's elements as little-endian float32 bytes, in C order.
pub fn le_bytes(t: &Tensor) -> Vec<u8> {
    match t.array().as_slice() {
        // The common case, a contiguous tensor on a little-endian machine, is one copy.
        Some(s) if cfg!(target_endian = "little") => bytemuck::cast_slice(s).to_vec(),
        _ => t.array().iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// A version 1.0 `.npy` file: the header (`shape_txt` as NumPy writes it, e.g. `(3,)`), padded
/// so that the data starts on a 64-byte boundary, then the data.
fn encode(descr: &str, shape_txt: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::load;

    fn file(descr: &str, shape: &str, data: &[u8]) -> String {
        let path = std::env::temp_dir().join(format!("dp-npy-{}-{}.npy", std::process::id(), rand_suffix()));
        std::fs::write(&path, super::encode(descr, shape, data)).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    fn values(path: &str) -> Vec<f32> {
        load(path).unwrap().array().iter().copied().collect()
    }

    #[test]
    fn every_numpy_dtype_loads_exactly_or_is_refused() {
        assert_eq!(values(&file("|b1", "(3,)", &[1, 0, 1])), [1.0, 0.0, 1.0]);
        assert_eq!(values(&file("|u1", "(2,)", &[255, 7])), [255.0, 7.0]);
        assert_eq!(values(&file(">f4", "(1,)", &1.5f32.to_be_bytes())), [1.5]);
        assert_eq!(values(&file(">i8", "(1,)", &(-3i64).to_be_bytes())), [-3.0]);
        assert_eq!(values(&file("<f2", "(1,)", &0x3e00u16.to_le_bytes())), [1.5]);
        let big = file("<i8", "(2,)", &[1i64.to_le_bytes(), (16_777_217i64).to_le_bytes()].concat());
        let e = load(&big).unwrap_err().to_string();
        assert!(e.contains("element 1 is 16777217") && e.contains("2^24"), "{e}");
        let huge = file("<f8", "(1,)", &1e300f64.to_le_bytes());
        assert!(load(&huge).unwrap_err().to_string().contains("beyond float32's range"));
        assert!(load(&file("<c8", "(1,)", &[0; 8])).unwrap_err().to_string().contains("unsupported dtype"));
    }

    #[test]
    fn malformed_headers_are_errors_not_panics() {
        for (descr, shape) in [
            ("<f4", ")"),
            ("<f4", ""),
            ("<f4", "(99999999999999999999,)"),
            ("<f4", "(4294967296, 4294967296, 4294967296)"),
        ] {
            let path = file(descr, shape, &[0; 8]);
            assert!(load(&path).is_err(), "{descr} {shape}");
        }
        // Every truncation of a good file, and every single-byte corruption of its header.
        let good = std::fs::read(file("<f4", "(2,)", &[0; 8])).unwrap();
        let path = std::env::temp_dir().join(format!("dp-npy-cut-{}.npy", std::process::id()));
        for cut in 0..good.len() {
            std::fs::write(&path, &good[..cut]).unwrap();
            let _ = load(path.to_str().unwrap());
        }
        for i in 0..good.len() - 8 {
            for b in [0u8, b'\'', b'(', b')', b',', 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                std::fs::write(&path, &bad).unwrap();
                let _ = load(path.to_str().unwrap());
            }
        }
    }
}
