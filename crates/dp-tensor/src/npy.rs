//! NumPy `.npy` files (format version 1.0–3.0), little-endian float32/float64/int32/int64,
//! C order. Everything becomes float32 (dp's one tensor dtype): float64 is rounded, integers
//! are converted exactly up to 2^24.

use crate::{TResult, Tensor};

fn parse_header(h: &str) -> Result<(String, bool, Vec<usize>), String> {
    let field = |key: &str| -> Result<&str, String> {
        let i = h.find(&format!("'{key}'")).ok_or(format!("npy header lacks `{key}`"))?;
        Ok(h[i + key.len() + 2..].trim_start().trim_start_matches(':').trim_start())
    };
    let descr = field("descr")?;
    let descr = descr.trim_start_matches('\'');
    let descr = descr[..descr.find('\'').ok_or("bad descr")?].to_string();
    let fortran = field("fortran_order")?.starts_with("True");
    let shape_txt = field("shape")?;
    let inner = &shape_txt[1..shape_txt.find(')').ok_or("bad shape")?];
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr, fortran, shape))
}

pub fn load(path: &str) -> TResult<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(format!("`{path}` is not a NumPy .npy file").into());
    }
    let (hlen, start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        if bytes.len() < 12 {
            return Err(format!("`{path}`: truncated header").into());
        }
        (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
    };
    let header =
        std::str::from_utf8(bytes.get(start..start + hlen).ok_or("truncated header")?).map_err(|e| e.to_string())?;
    let (descr, fortran, shape) = parse_header(header).map_err(|e| format!("`{path}`: {e}"))?;
    if fortran {
        return Err(
            format!("`{path}`: Fortran-ordered arrays are not supported (save with np.ascontiguousarray)").into()
        );
    }
    let data = &bytes[start + hlen..];
    let n: usize = shape.iter().product();
    let (width, conv): (usize, fn(&[u8]) -> f32) = match descr.as_str() {
        "<f4" => (4, |b| f32::from_le_bytes(b.try_into().unwrap())),
        "<f8" => (8, |b| f64::from_le_bytes(b.try_into().unwrap()) as f32),
        "<i4" => (4, |b| i32::from_le_bytes(b.try_into().unwrap()) as f32),
        "<i8" => (8, |b| i64::from_le_bytes(b.try_into().unwrap()) as f32),
        other => {
            return Err(format!("`{path}`: unsupported dtype `{other}` (float32, float64, int32, int64 are)").into())
        }
    };
    if data.len() < n * width {
        return Err(format!("`{path}`: expected {n} values, the file is truncated").into());
    }
    let values: Vec<f32> = data[..n * width].chunks_exact(width).map(conv).collect();
    Tensor::from_vec(&shape, values)
}

pub fn save(path: &str, t: &Tensor) -> TResult<()> {
    let shape = t.shape();
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_txt}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for x in t.array().iter() {
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(std::fs::write(path, out).map_err(|e| format!("cannot write `{path}`: {e}"))?)
}
