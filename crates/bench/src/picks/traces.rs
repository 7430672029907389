//! A set of recorded samples (`../shared/data/arith-traces/set-*`): NumPy `.npz` files read
//! with `zip` and a small `.npy` reader of our own (the dtypes the sets use: `<i4`, `<i2`,
//! `|u1`, `|b1`, `<f2` and the UTF-32 strings `<U..`), and `vocab.json`.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Top log-probabilities per position in the sets.
pub const TOP_K: usize = 5;

/// Why a set could not be read.
#[derive(Debug)]
pub enum TracesError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A `.npz` is not a zip archive we can read.
    Zip(PathBuf, String),
    /// An array is missing, malformed or of an unexpected dtype or shape.
    Array {
        file: PathBuf,
        array: String,
        why: String,
    },
    /// `vocab.json` is not a map of ids to tokens.
    Vocab(PathBuf, String),
    /// No `traces_*.npz` in the directory.
    Empty(PathBuf),
}

impl fmt::Display for TracesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TracesError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            TracesError::Zip(p, e) => write!(f, "{}: not a readable .npz: {e}", p.display()),
            TracesError::Array { file, array, why } => {
                write!(f, "{}: array {array}: {why}", file.display())
            }
            TracesError::Vocab(p, e) => write!(f, "{}: {e}", p.display()),
            TracesError::Empty(p) => write!(f, "{}: no traces_*.npz files", p.display()),
        }
    }
}

impl std::error::Error for TracesError {}

/// One recorded sample of a problem.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Token ids, `<eos>` included when the sample finished.
    pub tokens: Vec<u8>,
    /// The sampled token's log-probability, per position.
    pub logprob: Vec<f32>,
    /// The top [`TOP_K`] token ids and log-probabilities per position, descending.
    pub top_ids: Vec<[u8; TOP_K]>,
    pub top_logprobs: Vec<[f32; TOP_K]>,
    /// Ended with `<eos>`.
    pub finished: bool,
    /// Its answer as the set records it (`""` when none).
    pub answer: String,
}

impl Sample {
    /// Tokens generated (`<eos>` included).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// One problem and its samples.
#[derive(Debug, Clone)]
pub struct Problem {
    /// `EXPR=\n`.
    pub prompt: String,
    pub answer: String,
    pub samples: Vec<Sample>,
}

/// A whole set.
#[derive(Debug, Clone)]
pub struct TraceSet {
    /// Token text by id (`<eos>` and the like included).
    pub vocab: Vec<String>,
    /// The id of `<eos>`.
    pub eos: u8,
    pub problems: Vec<Problem>,
}

impl TraceSet {
    /// Reads `dir/vocab.json` and every `dir/traces_*.npz`, in the order of their number.
    pub fn read(dir: &Path) -> Result<TraceSet, TracesError> {
        let vocab_path = dir.join("vocab.json");
        let text = std::fs::read_to_string(&vocab_path)
            .map_err(|e| TracesError::Io(vocab_path.clone(), e))?;
        let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text)
            .map_err(|e| TracesError::Vocab(vocab_path.clone(), e.to_string()))?;
        let mut vocab = vec![String::new(); map.len()];
        for (id, token) in map {
            let i: usize = id
                .parse()
                .ok()
                .filter(|&i| i < vocab.len())
                .ok_or_else(|| TracesError::Vocab(vocab_path.clone(), format!("bad id {id:?}")))?;
            vocab[i] = token;
        }
        let eos = vocab
            .iter()
            .position(|t| t == "<eos>")
            .ok_or_else(|| TracesError::Vocab(vocab_path.clone(), "no <eos> token".into()))?
            as u8;
        let entries = std::fs::read_dir(dir).map_err(|e| TracesError::Io(dir.to_path_buf(), e))?;
        let mut files: Vec<(u64, PathBuf)> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?;
                let n = name.strip_prefix("traces_")?.strip_suffix(".npz")?;
                Some((n.parse().ok()?, p))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(TracesError::Empty(dir.to_path_buf()));
        }
        let mut problems = Vec::new();
        for (_, file) in files {
            problems.extend(read_npz(&file, vocab.len())?);
        }
        Ok(TraceSet {
            vocab,
            eos,
            problems,
        })
    }

    /// The text of one token.
    pub fn token(&self, id: u8) -> &str {
        self.vocab.get(id as usize).map_or("", String::as_str)
    }
}

/// One `.npy` array: its shape and its data, decoded.
#[derive(Debug)]
struct Array {
    shape: Vec<usize>,
    data: Data,
}

#[derive(Debug)]
enum Data {
    Int(Vec<i64>),
    Float(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
}

fn read_npz(file: &Path, vocab: usize) -> Result<Vec<Problem>, TracesError> {
    let f = std::fs::File::open(file).map_err(|e| TracesError::Io(file.to_path_buf(), e))?;
    let mut zip =
        zip::ZipArchive::new(f).map_err(|e| TracesError::Zip(file.to_path_buf(), e.to_string()))?;
    let mut get = |name: &str| -> Result<Array, TracesError> {
        let bad = |why: String| TracesError::Array {
            file: file.to_path_buf(),
            array: name.to_string(),
            why,
        };
        let mut entry = zip
            .by_name(&format!("{name}.npy"))
            .map_err(|e| bad(e.to_string()))?;
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| bad(e.to_string()))?;
        parse_npy(&bytes).map_err(bad)
    };
    let ids = get("problem_ids")?;
    let levels = get("levels")?;
    let prompts = get("prompts")?;
    let answers = get("answers")?;
    let tokens = get("tokens")?;
    let lengths = get("lengths")?;
    let finished = get("finished")?;
    let logprob = get("logprob")?;
    let topk_ids = get("topk_ids")?;
    let topk_logprobs = get("topk_logprobs")?;
    let preds = get("pred_answers")?;
    let bad = |array: &str, why: String| TracesError::Array {
        file: file.to_path_buf(),
        array: array.into(),
        why,
    };
    let (p, n, l) = match tokens.shape[..] {
        [p, n, l] => (p, n, l),
        _ => {
            return Err(bad(
                "tokens",
                format!("shape {:?}, not [P, N, L]", tokens.shape),
            ));
        }
    };
    let expect = |a: &Array, name: &str, shape: &[usize]| {
        if a.shape == shape {
            Ok(())
        } else {
            Err(bad(
                name,
                format!("shape {:?}, expected {shape:?}", a.shape),
            ))
        }
    };
    for (a, name) in [
        (&ids, "problem_ids"),
        (&levels, "levels"),
        (&prompts, "prompts"),
        (&answers, "answers"),
    ] {
        expect(a, name, &[p])?;
    }
    for (a, name) in [
        (&lengths, "lengths"),
        (&finished, "finished"),
        (&preds, "pred_answers"),
    ] {
        expect(a, name, &[p, n])?;
    }
    expect(&logprob, "logprob", &[p, n, l])?;
    expect(&topk_ids, "topk_ids", &[p, n, l, TOP_K])?;
    expect(&topk_logprobs, "topk_logprobs", &[p, n, l, TOP_K])?;
    let (Data::Int(_), Data::Int(_), Data::Str(prompts), Data::Str(answers)) =
        (ids.data, levels.data, prompts.data, answers.data)
    else {
        return Err(bad(
            "problem_ids",
            "unexpected dtypes of the per-problem arrays".into(),
        ));
    };
    let (Data::Int(tokens), Data::Int(lengths), Data::Bool(finished), Data::Str(preds)) =
        (tokens.data, lengths.data, finished.data, preds.data)
    else {
        return Err(bad(
            "tokens",
            "unexpected dtypes of the per-sample arrays".into(),
        ));
    };
    let (Data::Float(logprob), Data::Int(topk_ids), Data::Float(topk_logprobs)) =
        (logprob.data, topk_ids.data, topk_logprobs.data)
    else {
        return Err(bad(
            "logprob",
            "unexpected dtypes of the log-probabilities".into(),
        ));
    };
    let mut problems = Vec::with_capacity(p);
    for i in 0..p {
        let mut samples = Vec::with_capacity(n);
        for j in 0..n {
            let s = i * n + j;
            let len = usize::try_from(lengths[s])
                .ok()
                .filter(|&len| len <= l)
                .ok_or_else(|| bad("lengths", format!("{} at [{i}, {j}]", lengths[s])))?;
            let base = s * l;
            let token = |t: i64| {
                u8::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < vocab)
                    .ok_or_else(|| bad("tokens", format!("token id {t} outside the vocabulary")))
            };
            let toks = tokens[base..base + len]
                .iter()
                .map(|&t| token(t))
                .collect::<Result<Vec<u8>, _>>()?;
            let mut top_ids = Vec::with_capacity(len);
            let mut top_lps = Vec::with_capacity(len);
            for pos in 0..len {
                let k0 = (base + pos) * TOP_K;
                let mut ids = [0u8; TOP_K];
                let mut lps = [0f32; TOP_K];
                for k in 0..TOP_K {
                    ids[k] = token(topk_ids[k0 + k])?;
                    lps[k] = topk_logprobs[k0 + k];
                }
                top_ids.push(ids);
                top_lps.push(lps);
            }
            samples.push(Sample {
                tokens: toks,
                logprob: logprob[base..base + len].to_vec(),
                top_ids,
                top_logprobs: top_lps,
                finished: finished[s],
                answer: preds[s].clone(),
            });
        }
        problems.push(Problem {
            prompt: prompts[i].clone(),
            answer: answers[i].clone(),
            samples,
        });
    }
    Ok(problems)
}

/// Parses one `.npy` file (format versions 1 to 3, C order, little-endian).
fn parse_npy(bytes: &[u8]) -> Result<Array, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes
        .get(start..start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("truncated header")?;
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
    let count: usize = shape.iter().product();
    let body = &bytes[start + header_len..];
    let need = |width: usize| -> Result<&[u8], String> {
        body.get(..count * width)
            .ok_or_else(|| format!("{} bytes of data, {} needed", body.len(), count * width))
    };
    let data = match descr {
        "|u1" => Data::Int(need(1)?.iter().map(|&b| i64::from(b)).collect()),
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
            let chars: usize = d[2..].parse().map_err(|_| format!("bad dtype {d}"))?;
            let width = chars * 4;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
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

    #[test]
    fn reads_the_dtypes_of_the_sets() {
        let a = parse_npy(&npy("<i2", "(2, 2)", &[1, 0, 255, 255, 3, 0, 0, 1])).unwrap();
        assert_eq!(a.shape, vec![2, 2]);
        assert!(matches!(a.data, Data::Int(ref v) if v == &[1, -1, 3, 256]));
        // 1.0 and -0.5 in half precision.
        let f = parse_npy(&npy("<f2", "(2,)", &[0x00, 0x3c, 0x00, 0xb8])).unwrap();
        assert!(matches!(f.data, Data::Float(ref v) if v == &[1.0, -0.5]));
        let mut utf32 = Vec::new();
        for c in ['8', '2', '5', '\0', '7', '\0', '\0', '\0'] {
            utf32.extend((c as u32).to_le_bytes());
        }
        let s = parse_npy(&npy("<U4", "(2,)", &utf32)).unwrap();
        assert!(matches!(s.data, Data::Str(ref v) if v == &["825", "7"]));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse_npy(b"not numpy").is_err());
        assert!(
            parse_npy(&npy("<f8", "(1,)", &[0; 8]))
                .unwrap_err()
                .contains("dtype")
        );
        assert!(
            parse_npy(&npy("<i4", "(4,)", &[0; 8]))
                .unwrap_err()
                .contains("needed")
        );
    }
}
