//! NumPy's `.npy` arrays as the sets hold them (the dtypes `<i4`, `<i2`, `|u1`, `<u2`,
//! `<u4`, `|b1`, `<f2` and the UTF-32 strings `<U..`): written whole, and read with every
//! size checked against the bytes the entry declares before anything is allocated.

use std::io::Read;

/// The dtype of the token ids written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdType {
    U1,
    U2,
    U4,
}

impl IdType {
    pub(super) fn narrowest(max: u32) -> IdType {
        if max <= u32::from(u8::MAX) {
            IdType::U1
        } else if max <= u32::from(u16::MAX) {
            IdType::U2
        } else {
            IdType::U4
        }
    }
}

pub(super) const I2: &str = "<i2";
pub(super) const I4: &str = "<i4";

/// A `.npy` file (version 1.0) of `descr` and `shape` with this data.
pub(super) fn npy(descr: &str, shape: &[usize], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(body);
    out
}

pub(super) fn npy_ints(v: &[i64], descr: &str, shape: &[usize]) -> Vec<u8> {
    let mut body = Vec::new();
    for &x in v {
        if descr == I2 {
            body.extend((x as i16).to_le_bytes());
        } else {
            body.extend((x as i32).to_le_bytes());
        }
    }
    npy(descr, shape, &body)
}

pub(super) fn npy_ids(v: &[u32], t: IdType, shape: &[usize]) -> Vec<u8> {
    let (descr, body): (&str, Vec<u8>) = match t {
        IdType::U1 => ("|u1", v.iter().map(|&x| x as u8).collect()),
        IdType::U2 => (
            "<u2",
            v.iter().flat_map(|&x| (x as u16).to_le_bytes()).collect(),
        ),
        IdType::U4 => ("<u4", v.iter().flat_map(|&x| x.to_le_bytes()).collect()),
    };
    npy(descr, shape, &body)
}

pub(super) fn npy_bool(v: &[bool], shape: &[usize]) -> Vec<u8> {
    npy(
        "|b1",
        shape,
        &v.iter().map(|&b| u8::from(b)).collect::<Vec<_>>(),
    )
}

pub(super) fn npy_f16(v: &[f32], shape: &[usize]) -> Vec<u8> {
    let body: Vec<u8> = (v.iter())
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    npy("<f2", shape, &body)
}

pub(super) fn npy_str(v: &[String], shape: &[usize]) -> Vec<u8> {
    let chars = v
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut body = Vec::with_capacity(v.len() * chars * 4);
    for s in v {
        let mut k = 0;
        for c in s.chars() {
            body.extend((c as u32).to_le_bytes());
            k += 1;
        }
        body.extend(std::iter::repeat_n(0u8, (chars - k) * 4));
    }
    npy(&format!("<U{chars}"), shape, &body)
}

/// One `.npy` array: its shape and its data, decoded.
#[derive(Debug)]
pub(super) struct Array {
    pub(super) shape: Vec<usize>,
    pub(super) data: Data,
}

#[derive(Debug)]
pub(super) enum Data {
    Int(Vec<i64>),
    Float(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
}

/// The most bytes of a `.npy` header.
pub(super) const MAX_HEADER: usize = 64 << 10;

/// One `.npy` from `reader`, an entry of `declared` bytes: the header, its checks, the data.
pub(super) fn read_npy(reader: impl Read, declared: u64, max_bytes: u64) -> Result<Array, String> {
    let mut reader = reader.take(declared);
    let mut head = [0u8; 12];
    reader
        .read_exact(&mut head[..10])
        .map_err(|_| "not a .npy file".to_string())?;
    if &head[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (header_len, start) = match head[6] {
        1 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        2 | 3 => {
            reader
                .read_exact(&mut head[10..12])
                .map_err(|_| "truncated header".to_string())?;
            let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
            (len, 12)
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    if header_len > MAX_HEADER {
        return Err(format!(
            "a header of {header_len} bytes (at most {MAX_HEADER})"
        ));
    }
    let mut header = vec![0u8; header_len];
    reader
        .read_exact(&mut header)
        .map_err(|_| "truncated header".to_string())?;
    let header = std::str::from_utf8(&header).map_err(|_| "truncated header".to_string())?;
    let (descr, shape) = parse_header(header)?;
    let (count, bytes) = data_size(&descr, &shape)?;
    let room = declared.saturating_sub((start + header_len) as u64);
    if bytes > room {
        return Err(format!(
            "shape {shape:?} of {descr} needs {bytes} bytes of data, and the entry holds {room}"
        ));
    }
    if bytes.max(count as u64) > max_bytes {
        return Err(format!(
            "shape {shape:?} of {descr} needs {bytes} bytes of data, more than a file of this size may hold ({max_bytes}): a damaged or hostile file"
        ));
    }
    let mut body = Vec::with_capacity(bytes as usize);
    (&mut reader)
        .take(bytes)
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    if (body.len() as u64) < bytes {
        return Err(format!("{} bytes of data, {bytes} needed", body.len()));
    }
    decode(&descr, shape, count, &body)
}

/// The bytes of one element of a dtype.
pub(super) fn width(descr: &str) -> Result<usize, String> {
    Ok(match descr {
        "|u1" | "|b1" => 1,
        "<u2" | "<i2" | "<f2" => 2,
        "<u4" | "<i4" => 4,
        d if d.starts_with("<U") => {
            let chars: usize = d[2..].parse().map_err(|_| format!("bad dtype {d}"))?;
            chars
                .checked_mul(4)
                .ok_or_else(|| format!("dtype {d}: its width overflows"))?
        }
        d => return Err(format!("unsupported dtype {d}")),
    })
}

/// The elements of a shape and their bytes, each product checked: a shape whose product
/// wraps is an error, never a small number.
pub(super) fn data_size(descr: &str, shape: &[usize]) -> Result<(usize, u64), String> {
    let count = (shape.iter())
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?}: its number of elements overflows"))?;
    let bytes = count
        .checked_mul(width(descr)?)
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| format!("shape {shape:?} of {descr}: its size in bytes overflows"))?;
    Ok((count, bytes))
}

/// Parses one `.npy` file (format versions 1 to 3, C order, little-endian) held in memory.
#[cfg(test)]
pub(super) fn parse_npy(bytes: &[u8]) -> Result<Array, String> {
    read_npy(bytes, bytes.len() as u64, u64::MAX)
}

/// A `.npy` header's dtype and shape.
pub(super) fn parse_header(header: &str) -> Result<(String, Vec<usize>), String> {
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}':"))
            .ok_or(format!("no {key} in the header"))?;
        Ok(header[at + key.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("bad descr")?;
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran order is not supported".into());
    }
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("bad shape")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|e| format!("bad shape: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr.to_string(), shape))
}

/// The data of `count` elements of `descr` from `body` (at least their bytes).
pub(super) fn decode(
    descr: &str,
    shape: Vec<usize>,
    count: usize,
    body: &[u8],
) -> Result<Array, String> {
    let need = |width: usize| -> Result<&[u8], String> {
        let bytes = count
            .checked_mul(width)
            .ok_or_else(|| format!("shape {shape:?}: its size in bytes overflows"))?;
        body.get(..bytes)
            .ok_or_else(|| format!("{} bytes of data, {bytes} needed", body.len()))
    };
    let data = match descr {
        "|u1" => Data::Int(need(1)?.iter().map(|&b| i64::from(b)).collect()),
        "<u2" => Data::Int(
            need(2)?
                .chunks_exact(2)
                .map(|c| i64::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
        "<u4" => Data::Int(
            need(4)?
                .chunks_exact(4)
                .map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        "|b1" => Data::Bool(need(1)?.iter().map(|&b| b != 0).collect()),
        "<i2" => Data::Int(
            need(2)?
                .chunks_exact(2)
                .map(|c| i64::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
        "<i4" => Data::Int(
            need(4)?
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        "<f2" => Data::Float(
            need(2)?
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        d if d.starts_with("<U") => {
            let width = width(d)?;
            if width == 0 {
                Data::Str(vec![String::new(); count])
            } else {
                Data::Str(
                    need(width)?
                        .chunks_exact(width)
                        .map(|c| {
                            c.chunks_exact(4)
                                .map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]))
                                .take_while(|&u| u != 0)
                                .map(|u| char::from_u32(u).ok_or(format!("bad UTF-32 code {u}")))
                                .collect::<Result<String, _>>()
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
        }
        d => return Err(format!("unsupported dtype {d}")),
    };
    Ok(Array { shape, data })
}
