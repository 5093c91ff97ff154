//! NumPy `.npy` files (format version 1.0–3.0), C order, either byte order. A file keeps its
//! dtype where dp has it — bool, int64, float32, float64 — and the others widen exactly:
//! int8/16/32 and uint8/16/32 to int64 (uint64 too, when every value fits), float16 to
//! float32 (and bfloat16, which safetensors files hold). Nothing is rounded: a uint64 beyond
//! int64's range is refused, naming the element. The element conversion (`convert`) is
//! shared with `.npz` archives and safetensors checkpoints.

use crate::{DType, TResult, Tensor};
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

/// What one element of a file is: its kind and width in bytes.
#[derive(Clone, Copy)]
enum Kind {
    Bool,
    Signed(usize),
    Unsigned(usize),
    Float(usize),
    BFloat16,
}

/// The element kind of a `descr` and whether it is big-endian.
fn element_kind(descr: &str) -> Option<(Kind, bool)> {
    let (order, kind) = descr.split_at(descr.len().min(1));
    let big = match order {
        "<" | "=" | "|" => false,
        ">" => true,
        _ => return None,
    };
    let kind = match kind {
        "b1" => Kind::Bool,
        "i1" => Kind::Signed(1),
        "i2" => Kind::Signed(2),
        "i4" => Kind::Signed(4),
        "i8" => Kind::Signed(8),
        "u1" => Kind::Unsigned(1),
        "u2" => Kind::Unsigned(2),
        "u4" => Kind::Unsigned(4),
        "u8" => Kind::Unsigned(8),
        "f2" => Kind::Float(2),
        "f4" => Kind::Float(4),
        "f8" => Kind::Float(8),
        "bf2" => Kind::BFloat16,
        _ => return None,
    };
    Some((kind, big))
}

impl Kind {
    fn width(self) -> usize {
        match self {
            Kind::Bool => 1,
            Kind::BFloat16 => 2,
            Kind::Signed(w) | Kind::Unsigned(w) | Kind::Float(w) => w,
        }
    }
}

/// `b` (at most 8 bytes) as an unsigned integer of its width, in the file's byte order.
fn unsigned(b: &[u8], big: bool) -> u64 {
    let mut a = [0u8; 8];
    if big {
        a[8 - b.len()..].copy_from_slice(b);
        u64::from_be_bytes(a)
    } else {
        a[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(a)
    }
}

/// `b` as a two's-complement signed integer of its width.
fn signed(b: &[u8], big: bool) -> i64 {
    let shift = 64 - 8 * b.len() as u32;
    ((unsigned(b, big) << shift) as i64) >> shift
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
    if element_kind(&descr).is_none() {
        return Err(format!(
            "`{path}`: unsupported dtype `{descr}` (bool, int8–int64, uint8–uint64 and float16–float64 are)"
        )
        .into());
    }
    convert(&descr, &shape, &bytes[start + hlen..], path)
}

/// Elements of NumPy dtype `descr` (`<f8`, `|u1`, …; also `<bf2` for bfloat16, which NumPy
/// lacks but safetensors has) laid out in C order as a tensor of `shape`, in the dtype dp
/// keeps for it (above): exactly, or refused naming the first element that does not fit.
/// Bytes past the data are ignored; `what` names the source in errors.
pub fn convert(descr: &str, shape: &[usize], data: &[u8], what: &str) -> TResult<Tensor> {
    let path = what;
    let Some((kind, big)) = element_kind(descr) else {
        return Err(format!("`{path}`: unsupported dtype `{descr}`").into());
    };
    let width = kind.width();
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let Some(size) = n.and_then(|n| n.checked_mul(width)).filter(|&s| s <= data.len()) else {
        return Err(format!("`{path}` is truncated: the shape {shape:?} needs more data than it holds").into());
    };
    let data = &data[..size];
    let elements = data.chunks_exact(width);
    // The common cases — a dtype dp holds, in this machine's byte order — are one copy
    // (`pod_collect_to_vec` also copes with data that is not aligned in the file).
    if big == cfg!(target_endian = "big") {
        match kind {
            Kind::Float(4) => return Tensor::from_vec(shape, bytemuck::pod_collect_to_vec(data)),
            Kind::Float(8) => return Tensor::from_f64s(shape, bytemuck::pod_collect_to_vec(data)),
            Kind::Signed(8) => return Tensor::from_i64s(shape, bytemuck::pod_collect_to_vec(data)),
            _ => {}
        }
    }
    match kind {
        Kind::Bool => Tensor::from_bools(shape, elements.map(|b| b[0] != 0).collect()),
        Kind::Signed(_) => Tensor::from_i64s(shape, elements.map(|b| signed(b, big)).collect()),
        Kind::Unsigned(_) => {
            let values: Vec<u64> = elements.map(|b| unsigned(b, big)).collect();
            if let Some(i) = values.iter().position(|&v| i64::try_from(v).is_err()) {
                return Err(format!(
                    "`{path}`: element {i} is {}, beyond int64's range: it would not be loaded exactly",
                    values[i]
                )
                .into());
            }
            Tensor::from_i64s(shape, values.into_iter().map(|v| v as i64).collect())
        }
        Kind::Float(2) => {
            Tensor::from_vec(shape, elements.map(|b| half_to_f64(unsigned(b, big) as u16) as f32).collect())
        }
        // bfloat16 is the top half of a float32.
        Kind::BFloat16 => {
            Tensor::from_vec(shape, elements.map(|b| f32::from_bits((unsigned(b, big) as u32) << 16)).collect())
        }
        Kind::Float(4) => Tensor::from_vec(shape, elements.map(|b| f32::from_bits(unsigned(b, big) as u32)).collect()),
        Kind::Float(_) => Tensor::from_f64s(shape, elements.map(|b| f64::from_bits(unsigned(b, big))).collect()),
    }
}

/// The tensor as a `.npy` file of its own dtype (an error only when a GPU read-back fails).
pub fn encode_tensor(t: &Tensor) -> TResult<Vec<u8>> {
    let shape = t.shape();
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    Ok(encode(descr_of(t.dtype()), &shape_txt, &le_bytes(t)?))
}

/// NumPy's name of a dtype, little-endian.
pub fn descr_of(d: DType) -> &'static str {
    match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
    }
}

/// A tensor's elements as little-endian bytes of its dtype, in C order (an error only when a
/// GPU read-back fails).
pub fn le_bytes(t: &Tensor) -> TResult<Vec<u8>> {
    fn bytes<T: Copy, const N: usize>(a: &ndarray::ArrayD<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        a.iter().flat_map(|&x| f(x)).collect()
    }
    Ok(match (t.f32s()?, t.i64s(), t.bools()) {
        (Some(a), _, _) => match a.as_slice() {
            // The common case, a contiguous tensor on a little-endian machine, is one copy.
            Some(s) if cfg!(target_endian = "little") => bytemuck::cast_slice(s).to_vec(),
            _ => bytes(a, f32::to_le_bytes),
        },
        (_, Some(a), _) => bytes(a, i64::to_le_bytes),
        (_, _, Some(a)) => bytes(a, |b| [u8::from(b)]),
        _ => t.to_f64s()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
    })
}

pub fn save(path: &str, t: &Tensor) -> TResult<()> {
    Ok(std::fs::write(path, encode_tensor(t)?).map_err(|e| format!("cannot write `{path}`: {e}"))?)
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
    use crate::{DType, Tensor};

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

    fn values(path: &str) -> (DType, Vec<f64>) {
        let t = load(path).unwrap();
        (t.dtype(), t.to_f64s().unwrap())
    }

    #[test]
    fn every_numpy_dtype_loads_exactly_or_is_refused() {
        use DType::*;
        assert_eq!(values(&file("|b1", "(3,)", &[1, 0, 1])), (Bool, vec![1.0, 0.0, 1.0]));
        assert_eq!(values(&file("|u1", "(2,)", &[255, 7])), (I64, vec![255.0, 7.0]));
        assert_eq!(values(&file("|i1", "(2,)", &[255, 7])), (I64, vec![-1.0, 7.0]));
        assert_eq!(values(&file(">i2", "(1,)", &(-300i16).to_be_bytes())), (I64, vec![-300.0]));
        assert_eq!(values(&file(">f4", "(1,)", &1.5f32.to_be_bytes())), (F32, vec![1.5]));
        assert_eq!(values(&file(">i8", "(1,)", &(-3i64).to_be_bytes())), (I64, vec![-3.0]));
        assert_eq!(values(&file("<f2", "(1,)", &0x3e00u16.to_le_bytes())), (F32, vec![1.5]));
        assert_eq!(values(&file("<f8", "(1,)", &0.1f64.to_le_bytes())), (F64, vec![0.1]));
        // int64 keeps every bit (2^53 + 1 is not a float64).
        let big = load(&file("<i8", "(1,)", &(9_007_199_254_740_993i64).to_le_bytes())).unwrap();
        assert_eq!(big.i64s().unwrap().as_slice().unwrap(), [9_007_199_254_740_993]);
        let too_big = file("<u8", "(2,)", &[1u64.to_le_bytes(), u64::MAX.to_le_bytes()].concat());
        let e = load(&too_big).unwrap_err().to_string();
        assert!(e.contains("element 1 is 18446744073709551615") && e.contains("int64"), "{e}");
        assert!(load(&file("<c8", "(1,)", &[0; 8])).unwrap_err().to_string().contains("unsupported dtype"));
    }

    #[test]
    fn every_dtype_saves_as_itself() {
        let path = std::env::temp_dir().join(format!("dp-npy-save-{}.npy", std::process::id()));
        let path = path.to_str().unwrap();
        for t in [
            Tensor::from_f64s(&[2], vec![0.1, -2.5]).unwrap(),
            Tensor::from_i64s(&[1, 2], vec![i64::MIN, 7]).unwrap(),
            Tensor::from_bools(&[3], vec![true, false, true]).unwrap(),
            Tensor::from_vec(&[], vec![1.25]).unwrap(),
        ] {
            super::save(path, &t).unwrap();
            let back = load(path).unwrap();
            assert_eq!(
                (back.dtype(), back.shape(), back.to_f64s().unwrap()),
                (t.dtype(), t.shape(), t.to_f64s().unwrap())
            );
        }
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
