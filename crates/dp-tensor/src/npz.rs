//! NumPy `.npz` archives: a ZIP file of `.npy` members, as `np.savez` (stored) and
//! `np.savez_compressed` (deflate) write them. Each member goes through the `.npy` codec.
//!
//! A small ZIP reader of our own rather than the `zip` crate: an archive of arrays needs the
//! central directory, ZIP64 sizes (NumPy writes every member with `force_zip64`), stored and
//! deflate members and a CRC check — a few hundred lines — while the `zip` crate brings a dozen
//! crates (zopfli, zlib-rs, zeroize, …) for encryption and methods no `.npz` uses. Inflating is
//! `miniz_oxide`'s, bounded by each member's declared size, so a malformed archive is an
//! error, never a panic or an unbounded allocation.

use crate::{npy, TResult, Tensor};

const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
const END64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;

fn u16_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?)))
}
fn u32_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?)))
}
fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

/// One member as the central directory describes it.
struct Member {
    name: String,
    method: u64,
    crc: u32,
    compressed: u64,
    size: u64,
    local: u64,
}

pub fn load(path: &str) -> TResult<Vec<(String, Tensor)>> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    decode(&bytes, path)
}

/// The arrays of an archive's bytes, in archive order, named without `.npy`.
pub fn decode(bytes: &[u8], path: &str) -> TResult<Vec<(String, Tensor)>> {
    let members = directory(bytes).ok_or_else(|| format!("`{path}` is not a ZIP archive (.npz) or is damaged"))?;
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        let what = format!("{path}` member `{}", m.name);
        let data = member_data(bytes, &m).map_err(|e| format!("`{what}`: {e}"))?;
        let name = m.name.strip_suffix(".npy").ok_or_else(|| format!("`{what}` is not a .npy array"))?;
        out.push((name.to_string(), npy::decode(&data, &what)?));
    }
    Ok(out)
}

/// The central directory's members, or None when the archive's structure is broken.
fn directory(b: &[u8]) -> Option<Vec<Member>> {
    // The end record is in the last 22 + 65535 (its comment) bytes; search back for it.
    let floor = b.len().saturating_sub(22 + 0xffff);
    let end = (floor..=b.len().checked_sub(22)?).rev().find(|&i| u32_at(b, i) == Some(END.into()))?;
    let (mut count, mut offset) = (u16_at(b, end + 10)?, u32_at(b, end + 16)?);
    if count == 0xffff || offset == 0xffff_ffff {
        let loc = end.checked_sub(20)?;
        if u32_at(b, loc)? != u64::from(LOCATOR64) {
            return None;
        }
        let e64 = usize::try_from(u64_at(b, loc + 8)?).ok()?;
        if u32_at(b, e64)? != u64::from(END64) {
            return None;
        }
        (count, offset) = (u64_at(b, e64 + 32)?, u64_at(b, e64 + 48)?);
    }
    let mut at = usize::try_from(offset).ok()?;
    let mut members = Vec::new();
    for _ in 0..count {
        if u32_at(b, at)? != u64::from(CENTRAL) {
            return None;
        }
        let (flags, method) = (u16_at(b, at + 8)?, u16_at(b, at + 10)?);
        let crc = u32_at(b, at + 16)? as u32;
        let (mut compressed, mut size) = (u32_at(b, at + 20)?, u32_at(b, at + 24)?);
        let (n, e, c) = (u16_at(b, at + 28)? as usize, u16_at(b, at + 30)? as usize, u16_at(b, at + 32)? as usize);
        let mut local = u32_at(b, at + 42)?;
        let name = std::str::from_utf8(b.get(at + 46..at + 46 + n)?).ok()?.to_string();
        // ZIP64: the sizes and offset that do not fit in 32 bits are in extra field 1, in order.
        let mut extra = b.get(at + 46 + n..at + 46 + n + e)?;
        while extra.len() >= 4 {
            let (id, len) = (u16_at(extra, 0)?, u16_at(extra, 2)? as usize);
            let body = extra.get(4..4 + len)?;
            if id == 1 {
                let mut i = 0;
                for field in [&mut size, &mut compressed, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64_at(body, i)?;
                        i += 8;
                    }
                }
            }
            extra = &extra[4 + len..];
        }
        if flags & 1 != 0 {
            return None; // encrypted
        }
        members.push(Member { name, method, crc, compressed, size, local });
        at += 46 + n + e + c;
    }
    Some(members)
}

/// A member's uncompressed bytes, checked against its size and CRC.
fn member_data(b: &[u8], m: &Member) -> Result<Vec<u8>, String> {
    let broken = || "the archive is damaged (a member lies outside it)".to_string();
    let local = usize::try_from(m.local).map_err(|_| broken())?;
    if u32_at(b, local) != Some(LOCAL.into()) {
        return Err(broken());
    }
    let n = u16_at(b, local + 26).ok_or_else(broken)? as usize;
    let e = u16_at(b, local + 28).ok_or_else(broken)? as usize;
    let start = local + 30 + n + e;
    let len = usize::try_from(m.compressed).map_err(|_| broken())?;
    let raw = b.get(start..start.checked_add(len).ok_or_else(broken)?).ok_or_else(broken)?;
    let size = usize::try_from(m.size).map_err(|_| broken())?;
    let data = match m.method {
        0 => raw.to_vec(),
        8 => miniz_oxide::inflate::decompress_to_vec_with_limit(raw, size)
            .map_err(|e| format!("cannot inflate it ({:?})", e.status))?,
        other => return Err(format!("compression method {other} is not supported (stored and deflate are)")),
    };
    if data.len() != size {
        return Err(format!("it holds {} bytes, but the archive says {size}", data.len()));
    }
    if crc32fast::hash(&data) != m.crc {
        return Err("its CRC does not match (the archive is damaged)".into());
    }
    Ok(data)
}

/// Writes `arrays` as an uncompressed archive (as `np.savez` does), members named `NAME.npy`.
pub fn save(path: &str, arrays: &[(String, &Tensor)]) -> TResult<()> {
    let bytes = encode(arrays).map_err(|e| format!("cannot write `{path}`: {e}"))?;
    Ok(std::fs::write(path, bytes).map_err(|e| format!("cannot write `{path}`: {e}"))?)
}

fn encode(arrays: &[(String, &Tensor)]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    let too_big = || "archives over 4 GiB are not supported".to_string();
    for (i, (name, t)) in arrays.iter().enumerate() {
        if arrays[..i].iter().any(|(n, _)| n == name) {
            return Err(format!("two arrays are named `{name}`"));
        }
        let file = format!("{name}.npy");
        let data = npy::encode_tensor(t).map_err(|e| e.to_string())?;
        let size = u32::try_from(data.len()).map_err(|_| too_big())?;
        let offset = u32::try_from(out.len()).map_err(|_| too_big())?;
        let name_len = u16::try_from(file.len()).map_err(|_| format!("the name `{name}` is too long"))?;
        let crc = crc32fast::hash(&data);
        // Shared by the local and central headers: version 2.0, no flags, stored, a DOS time of
        // 1980-01-01 00:00, CRC, sizes, name length, no extra field.
        let mut common = Vec::with_capacity(26);
        for v in [20u16, 0, 0, 0, 0x21] {
            common.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, size, size] {
            common.extend_from_slice(&v.to_le_bytes());
        }
        common.extend_from_slice(&name_len.to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&LOCAL.to_le_bytes());
        out.extend_from_slice(&common);
        out.extend_from_slice(file.as_bytes());
        out.extend_from_slice(&data);
        central.extend_from_slice(&CENTRAL.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by: version 2.0
        central.extend_from_slice(&common);
        central.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(file.as_bytes());
    }
    let count = u16::try_from(arrays.len()).map_err(|_| "more than 65535 arrays are not supported".to_string())?;
    let cd_offset = u32::try_from(out.len()).map_err(|_| too_big())?;
    let cd_size = u32::try_from(central.len()).map_err(|_| too_big())?;
    out.extend_from_slice(&central);
    out.extend_from_slice(&END.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // this disk, the directory's disk
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // no comment
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_order() {
        let a = Tensor::from_vec(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = Tensor::from_vec(&[3], vec![-1.0, 0.5, 7.0]).unwrap();
        let bytes = encode(&[("z".into(), &a), ("a".into(), &b)]).unwrap();
        let back = decode(&bytes, "t").unwrap();
        assert_eq!(back.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["z", "a"]);
        assert_eq!(back[0].1.shape(), [2, 2]);
        assert_eq!(back[1].1.data(), [-1.0, 0.5, 7.0]);
    }

    #[test]
    fn malformed_archives_are_errors_not_panics() {
        let a = Tensor::from_vec(&[2], vec![1.0, 2.0]).unwrap();
        let good = encode(&[("x".into(), &a), ("y".into(), &a)]).unwrap();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut], "cut").is_err());
        }
        for i in 0..good.len() {
            for v in [0u8, 0xff, 0x01, 0x08] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = decode(&bad, "bad");
            }
        }
        assert!(decode(b"PK\x05\x06", "tiny").is_err());
    }
}
