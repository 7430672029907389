//! A set of recorded samples in the format of `arith-traces` (its README): NumPy `.npz` files
//! read and written with `zip` and a small `.npy` reader and writer of our own (the dtypes the
//! sets use: `<i4`, `<i2`, `|u1`, `<u2`, `<u4`, `|b1`, `<f2` and the UTF-32 strings `<U..`), and
//! `vocab.json` (token id → token text).
//!
//! ```
//! use choicewise_picks::traces::{Problem, Sample, TraceSet, TOP_K};
//! let vocab = vec!["<eos>".to_string(), "4".to_string()];
//! let sample = Sample {
//!     tokens: vec![1, 0],
//!     logprob: vec![-0.5, -0.25],
//!     top_ids: vec![[1; TOP_K], [0; TOP_K]],
//!     top_logprobs: vec![[-0.5; TOP_K], [-0.25; TOP_K]], // half precision: exact
//!     finished: true,
//!     answer: "4".into(),
//! };
//! let problem = Problem { prompt: "2+2=\n".into(), answer: "4".into(), samples: vec![sample], ..Problem::default() };
//! let set = TraceSet { vocab, eos: 0, problems: vec![problem] };
//! let dir = std::env::temp_dir().join(format!("choicewise-picks-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! set.write_vocab(&dir).unwrap();
//! set.write_npz(&dir.join("traces_0.npz"), &set.problems).unwrap();
//! let back = TraceSet::read(&dir).unwrap();
//! assert_eq!(back.problems, set.problems);
//! assert_eq!(back.text(&back.problems[0].samples[0]), "4");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

mod npy;

use npy::*;

/// Top log-probabilities per position in the sets.
pub const TOP_K: usize = 5;

/// Why a set could not be read or written.
#[derive(Debug)]
pub enum TracesError {
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A `.npz` is not a zip archive we can read (or could not be written).
    Zip(PathBuf, String),
    /// An array is missing, malformed or of an unexpected dtype or shape.
    Array {
        /// The `.npz` file.
        file: PathBuf,
        /// The array's name.
        array: String,
        /// What is wrong with it.
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Token ids, `<eos>` included when the sample finished with one.
    pub tokens: Vec<u32>,
    /// The sampled token's log-probability, per position.
    pub logprob: Vec<f32>,
    /// The top [`TOP_K`] token ids per position, descending.
    pub top_ids: Vec<[u32; TOP_K]>,
    /// Their log-probabilities.
    pub top_logprobs: Vec<[f32; TOP_K]>,
    /// Ended with `<eos>` (a recorded set: with `finish_reason: "stop"`).
    pub finished: bool,
    /// Its answer as the set records it (`""` when none).
    pub answer: String,
}

impl Sample {
    /// Tokens generated (`<eos>` included).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// No token at all.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// One problem and its samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Problem {
    /// Its number in its set (`problem_ids`).
    pub id: i64,
    /// Its level (`levels`; the arithmetic sets: the number of operands; a recorded set: 0).
    pub level: i64,
    /// The user message (the arithmetic sets: `EXPR=\n`).
    pub prompt: String,
    /// The whole conversation asked, as a JSON array of messages, when the problem was not
    /// one user message (the optional array `messages`; `None`: `[{"role": "user",
    /// "content": prompt}]`).
    pub messages: Option<String>,
    /// Its name in the items it was recorded from (the optional array `item_ids`).
    pub name: Option<String>,
    /// The right answer.
    pub answer: String,
    /// Its samples, in the order they were drawn.
    pub samples: Vec<Sample>,
    /// Each sample's milliseconds from its request to its first token and to its finish, as
    /// the server gave them (`choicewise picks record`; the optional arrays `first_token_ms`
    /// and `total_ms`); -1 where not recorded; empty when none were.
    pub times_ms: Vec<[i32; 2]>,
    /// The answers graded right by a command (`choicewise picks report --grade`): an answer
    /// is right when it is one of them. `None`: when it is [`answer`](Self::answer).
    pub graded: Option<std::collections::BTreeSet<String>>,
}

impl Problem {
    /// Whether `answer` (a pick's, a sample's) is right: one of the [`graded`](Self::graded)
    /// answers, or else the problem's [`answer`](Self::answer); an empty answer never is.
    ///
    /// ```
    /// use choicewise_picks::traces::Problem;
    /// let mut p = Problem { answer: "4".into(), ..Problem::default() };
    /// assert!(p.is_right("4") && !p.is_right("5") && !p.is_right(""));
    /// p.graded = Some(["5".to_string()].into());
    /// assert!(p.is_right("5") && !p.is_right("4"));
    /// ```
    pub fn is_right(&self, answer: &str) -> bool {
        !answer.is_empty()
            && match &self.graded {
                Some(right) => right.contains(answer),
                None => answer == self.answer,
            }
    }

    /// The messages that ask it: the recorded conversation, or its prompt as one user message.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        self.messages
            .as_deref()
            .and_then(|m| serde_json::from_str::<Vec<serde_json::Value>>(m).ok())
            .unwrap_or_else(|| vec![serde_json::json!({"role": "user", "content": self.prompt})])
    }
}

/// A whole set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceSet {
    /// Token text by id (`<eos>` and the like included).
    pub vocab: Vec<String>,
    /// The id of `<eos>` (the first token of that text).
    pub eos: u32,
    /// The problems, in the order of their files and rows.
    pub problems: Vec<Problem>,
}

/// `traces_N.npz` files of a directory, in the order of N.
pub fn npz_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, TracesError> {
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
    Ok(files)
}

/// Reads `dir/vocab.json`: token text by id.
pub fn read_vocab(dir: &Path) -> Result<Vec<String>, TracesError> {
    let vocab_path = dir.join("vocab.json");
    let text =
        std::fs::read_to_string(&vocab_path).map_err(|e| TracesError::Io(vocab_path.clone(), e))?;
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
    Ok(vocab)
}

impl TraceSet {
    /// Reads `dir/vocab.json` and every `dir/traces_*.npz`, in the order of their number.
    pub fn read(dir: &Path) -> Result<TraceSet, TracesError> {
        let vocab = read_vocab(dir)?;
        let vocab_path = dir.join("vocab.json");
        let eos = vocab
            .iter()
            .position(|t| t == "<eos>")
            .ok_or_else(|| TracesError::Vocab(vocab_path.clone(), "no <eos> token".into()))?
            as u32;
        let files = npz_files(dir)?;
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

    /// Reads the problems of one `.npz` file, whose token ids are below `vocab`.
    pub fn read_npz(file: &Path, vocab: usize) -> Result<Vec<Problem>, TracesError> {
        read_npz(file, vocab)
    }

    /// The text of one token.
    pub fn token(&self, id: u32) -> &str {
        self.vocab.get(id as usize).map_or("", String::as_str)
    }

    /// A sample's text: its tokens before `<eos>`, decoded.
    pub fn text(&self, s: &Sample) -> String {
        s.tokens
            .iter()
            .take_while(|&&t| t != self.eos)
            .map(|&t| self.token(t))
            .collect()
    }

    /// Every sample's [`answer`](Sample::answer) read from its text by `rule` (a recorded set
    /// stores none: its answers are read when it is replayed).
    pub fn read_answers(&mut self, rule: &crate::AnswerRule) {
        let texts: Vec<Vec<String>> = (self.problems.iter())
            .map(|p| p.samples.iter().map(|s| self.text(s)).collect())
            .collect();
        for (p, texts) in self.problems.iter_mut().zip(texts) {
            for (s, text) in p.samples.iter_mut().zip(texts) {
                s.answer = rule.of(&text);
            }
        }
    }

    /// Every sample has its log-probabilities (a set recorded from an upstream that gave
    /// none has none: its `top_logprobs` are all zero).
    pub fn has_logprobs(&self) -> bool {
        (self.problems.iter().flat_map(|p| &p.samples))
            .filter(|s| !s.is_empty())
            .all(|s| {
                s.top_logprobs
                    .iter()
                    .any(|top| top.iter().any(|&l| l != 0.0))
            })
    }

    /// Writes `dir/vocab.json` (id → token), through a temporary file and a rename.
    pub fn write_vocab(&self, dir: &Path) -> Result<(), TracesError> {
        let map: serde_json::Map<String, serde_json::Value> = (self.vocab.iter().enumerate())
            .map(|(i, t)| (i.to_string(), serde_json::Value::String(t.clone())))
            .collect();
        let text = serde_json::to_string_pretty(&map).unwrap_or_default();
        write_atomically(&dir.join("vocab.json"), text.as_bytes())
    }

    /// Writes `problems` as one `.npz` at `path` (through a temporary file and a rename), in
    /// the sets' format: P problems × N samples (the fewest any of them has) × L positions
    /// (the longest), token ids in the narrowest unsigned dtype that holds them (`|u1`, `<u2`
    /// or `<u4`), `correct` = the recorded answer is the problem's. The arrays `messages` and
    /// `item_ids` are written when a problem has them.
    pub fn write_npz(&self, path: &Path, problems: &[Problem]) -> Result<(), TracesError> {
        let p = problems.len();
        let n = problems.iter().map(|q| q.samples.len()).min().unwrap_or(0);
        let l = (problems.iter().flat_map(|q| &q.samples[..n]))
            .map(Sample::len)
            .max()
            .unwrap_or(0);
        let samples = || problems.iter().flat_map(|q| &q.samples[..n]);
        let max_id = samples()
            .flat_map(|s| s.tokens.iter().chain(s.top_ids.iter().flatten()))
            .copied()
            .max()
            .unwrap_or(0);
        let ids = IdType::narrowest(max_id);
        let mut tokens = vec![0u32; p * n * l];
        let mut logprob = vec![0f32; p * n * l];
        let mut topk_ids = vec![0u32; p * n * l * TOP_K];
        let mut topk_lps = vec![0f32; p * n * l * TOP_K];
        for (k, s) in samples().enumerate() {
            let base = k * l;
            tokens[base..base + s.len()].copy_from_slice(&s.tokens);
            logprob[base..base + s.len()].copy_from_slice(&s.logprob);
            for (pos, (ids, lps)) in s.top_ids.iter().zip(&s.top_logprobs).enumerate() {
                let at = (base + pos) * TOP_K;
                topk_ids[at..at + TOP_K].copy_from_slice(ids);
                topk_lps[at..at + TOP_K].copy_from_slice(lps);
            }
        }
        let lengths: Vec<i64> = samples().map(|s| s.len() as i64).collect();
        let wide = lengths.iter().any(|&x| x > i64::from(i16::MAX));
        let strs = |f: &dyn Fn(&Problem) -> String| problems.iter().map(f).collect::<Vec<_>>();
        let ints = |f: &dyn Fn(&Problem) -> i64| problems.iter().map(f).collect::<Vec<_>>();
        let mut arrays: Vec<(&str, Vec<u8>)> = vec![
            ("problem_ids", npy_ints(&ints(&|q| q.id), I4, &[p])),
            ("levels", npy_ints(&ints(&|q| q.level), I2, &[p])),
            ("prompts", npy_str(&strs(&|q| q.prompt.clone()), &[p])),
            ("answers", npy_str(&strs(&|q| q.answer.clone()), &[p])),
            ("tokens", npy_ids(&tokens, ids, &[p, n, l])),
            (
                "lengths",
                npy_ints(&lengths, if wide { I4 } else { I2 }, &[p, n]),
            ),
            (
                "finished",
                npy_bool(&samples().map(|s| s.finished).collect::<Vec<_>>(), &[p, n]),
            ),
            ("logprob", npy_f16(&logprob, &[p, n, l])),
            ("topk_ids", npy_ids(&topk_ids, ids, &[p, n, l, TOP_K])),
            ("topk_logprobs", npy_f16(&topk_lps, &[p, n, l, TOP_K])),
            (
                "pred_answers",
                npy_str(
                    &samples().map(|s| s.answer.clone()).collect::<Vec<_>>(),
                    &[p, n],
                ),
            ),
            (
                "correct",
                npy_bool(
                    &(problems.iter())
                        .flat_map(|q| {
                            q.samples[..n]
                                .iter()
                                .map(|s| !s.answer.is_empty() && s.answer == q.answer)
                        })
                        .collect::<Vec<_>>(),
                    &[p, n],
                ),
            ),
        ];
        if problems.iter().any(|q| q.messages.is_some()) {
            let m = strs(&|q| q.messages.clone().unwrap_or_default());
            arrays.push(("messages", npy_str(&m, &[p])));
        }
        if problems.iter().any(|q| q.name.is_some()) {
            let m = strs(&|q| q.name.clone().unwrap_or_default());
            arrays.push(("item_ids", npy_str(&m, &[p])));
        }
        if problems.iter().any(|q| !q.times_ms.is_empty()) {
            for (name, which) in [("first_token_ms", 0), ("total_ms", 1)] {
                let v: Vec<i64> = (problems.iter())
                    .flat_map(|q| (0..n).map(move |j| q.times_ms.get(j).map_or(-1, |t| t[which])))
                    .map(i64::from)
                    .collect();
                arrays.push((name, npy_ints(&v, I4, &[p, n])));
            }
        }
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        let zerr = |e: &dyn fmt::Display| TracesError::Zip(path.to_path_buf(), e.to_string());
        for (name, bytes) in arrays {
            zip.start_file(format!("{name}.npy"), options)
                .map_err(|e| zerr(&e))?;
            zip.write_all(&bytes).map_err(|e| zerr(&e))?;
        }
        let bytes = zip.finish().map_err(|e| zerr(&e))?.into_inner();
        write_atomically(path, &bytes)
    }
}

/// Writes `bytes` to `path` through `path.tmp` and a rename: a reader sees the old file or the
/// new one, never half of one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TracesError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let io = |e| TracesError::Io(path.to_path_buf(), e);
    {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}

/// The most data bytes one array of a `.npz` of `file_size` bytes may hold: its arrays
/// compress a few times over at most (the sets': 17 to 36 times), far from a zip bomb's
/// thousand.
fn max_array_bytes(file_size: u64) -> u64 {
    file_size
        .saturating_mul(MAX_EXPANSION)
        .saturating_add(1 << 20)
}

/// The most elements of a set's per-position arrays (P × N × L) per byte of its `.npz`: the
/// sets hold about 2; each real position costs several compressed bytes of log-probabilities.
const MAX_POSITIONS_PER_BYTE: u64 = 16;

/// How many times its compressed size an array may be.
const MAX_EXPANSION: u64 = 128;

/// Reads one `.npy` entry of a `.npz`: its header first (dtype and shape), then exactly the
/// bytes they say, once they are checked against the entry's size and `max_bytes`.
fn get_array(
    zip: &mut zip::ZipArchive<std::fs::File>,
    file: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<Array, TracesError> {
    let bad = |why: String| TracesError::Array {
        file: file.to_path_buf(),
        array: name.to_string(),
        why,
    };
    let entry = zip
        .by_name(&format!("{name}.npy"))
        .map_err(|e| bad(e.to_string()))?;
    let declared = entry.size();
    read_npy(entry, declared, max_bytes).map_err(bad)
}

fn read_npz(file: &Path, vocab: usize) -> Result<Vec<Problem>, TracesError> {
    let f = std::fs::File::open(file).map_err(|e| TracesError::Io(file.to_path_buf(), e))?;
    let file_size = f
        .metadata()
        .map_err(|e| TracesError::Io(file.to_path_buf(), e))?
        .len();
    let max_bytes = max_array_bytes(file_size);
    let mut zip =
        zip::ZipArchive::new(f).map_err(|e| TracesError::Zip(file.to_path_buf(), e.to_string()))?;
    let has = |zip: &zip::ZipArchive<std::fs::File>, name: &str| {
        zip.index_for_name(&format!("{name}.npy")).is_some()
    };
    let optional = |zip: &mut zip::ZipArchive<std::fs::File>, name: &str| {
        if has(zip, name) {
            get_array(zip, file, name, max_bytes).map(Some)
        } else {
            Ok(None)
        }
    };
    let messages = optional(&mut zip, "messages")?;
    let item_ids = optional(&mut zip, "item_ids")?;
    let first_token_ms = optional(&mut zip, "first_token_ms")?;
    let total_ms = optional(&mut zip, "total_ms")?;
    let mut get = |name: &str| get_array(&mut zip, file, name, max_bytes);
    let ids = get("problem_ids")?;
    let levels = get("levels")?;
    let prompts = get("prompts")?;
    let answers = get("answers")?;
    let tokens = get("tokens")?;
    // P × N × L, bounded by the file's size before the arrays of that many elements (and
    // their top-k, five times more) are read.
    let positions: u64 = tokens.shape.iter().map(|&d| d as u64).product();
    let most = file_size
        .saturating_mul(MAX_POSITIONS_PER_BYTE)
        .saturating_add(1 << 16);
    if positions > most {
        return Err(TracesError::Array {
            file: file.to_path_buf(),
            array: "tokens".into(),
            why: format!(
                "shape {:?}: {positions} positions, more than a file of {file_size} bytes may hold ({most}): a damaged or hostile file",
                tokens.shape
            ),
        });
    }
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
    let strings = |a: Option<Array>, name: &str| -> Result<Option<Vec<String>>, TracesError> {
        match a {
            None => Ok(None),
            Some(Array {
                shape,
                data: Data::Str(v),
            }) if shape == [p] => Ok(Some(v)),
            Some(_) => Err(bad(name, format!("not {p} strings"))),
        }
    };
    let messages = strings(messages, "messages")?;
    let item_ids = strings(item_ids, "item_ids")?;
    let times = |a: Option<Array>, name: &str| -> Result<Option<Vec<i32>>, TracesError> {
        match a {
            None => Ok(None),
            Some(Array {
                shape,
                data: Data::Int(v),
            }) if shape == [p, n] => Ok(Some(
                v.into_iter()
                    .map(|x| i32::try_from(x).unwrap_or(-1))
                    .collect(),
            )),
            Some(_) => Err(bad(name, format!("not [{p}, {n}] integers"))),
        }
    };
    let first_token_ms = times(first_token_ms, "first_token_ms")?;
    let total_ms = times(total_ms, "total_ms")?;
    let (Data::Int(ids), Data::Int(levels), Data::Str(prompts), Data::Str(answers)) =
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
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < vocab)
                    .ok_or_else(|| bad("tokens", format!("token id {t} outside the vocabulary")))
            };
            let toks = tokens[base..base + len]
                .iter()
                .map(|&t| token(t))
                .collect::<Result<Vec<u32>, _>>()?;
            let mut top_ids = Vec::with_capacity(len);
            let mut top_lps = Vec::with_capacity(len);
            for pos in 0..len {
                let k0 = (base + pos) * TOP_K;
                let mut ids = [0u32; TOP_K];
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
        let some =
            |v: &Option<Vec<String>>| v.as_ref().map(|v| v[i].clone()).filter(|m| !m.is_empty());
        problems.push(Problem {
            id: ids[i],
            level: levels[i],
            prompt: prompts[i].clone(),
            messages: some(&messages),
            name: some(&item_ids),
            answer: answers[i].clone(),
            samples,
            times_ms: match (&first_token_ms, &total_ms) {
                (Some(f), Some(t)) => (0..n).map(|j| [f[i * n + j], t[i * n + j]]).collect(),
                _ => Vec::new(),
            },
            graded: None,
        });
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

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
                .contains("needs 16 bytes of data, and the entry holds 8")
        );
    }

    #[test]
    fn wrapped_dimensions_and_short_entries_are_errors_not_panics() {
        let e = parse_npy(&npy("|u1", "(4294967296, 4294967296, 4294967296)", &[])).unwrap_err();
        assert!(e.contains("number of elements overflows"), "{e}");
        let e = parse_npy(&npy("<i4", "(4611686018427387904,)", &[])).unwrap_err();
        assert!(e.contains("size in bytes overflows"), "{e}");
        let e = parse_npy(&npy("<U4611686018427387904", "(2,)", &[])).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
        // A shape larger than what the entry holds: refused before any data is read.
        let e = parse_npy(&npy("<i4", "(1000000000,)", &[0; 8])).unwrap_err();
        assert!(
            e.contains("4000000000 bytes of data, and the entry holds 8"),
            "{e}"
        );
        // Zero-width strings of a huge count cost no bytes, but are bounded all the same.
        let e = read_npy(&npy("<U0", "(1000000000000,)", &[])[..], 128, 1 << 20).unwrap_err();
        assert!(e.contains("hostile"), "{e}");
    }

    /// A `.npz` of the per-problem arrays of one problem, and `tokens` of shape `[1, 1, L]`
    /// holding `L` zeros (deflated: about a thousandth of their size).
    fn bomb(path: &Path, l: usize) {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(l > u32::MAX as usize);
        let arrays = [
            ("problem_ids", npy_ints(&[0], I4, &[1])),
            ("levels", npy_ints(&[0], I2, &[1])),
            ("prompts", npy_str(&["p".into()], &[1])),
            ("answers", npy_str(&["a".into()], &[1])),
        ];
        for (name, bytes) in arrays {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.start_file("tokens.npy", options).unwrap();
        zip.write_all(&npy("|u1", &format!("(1, 1, {l})"), &[]))
            .unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..l >> 20 {
            zip.write_all(&zeros).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn a_zip_bomb_is_refused_before_its_arrays_are_read() {
        let dir = temp_dir("bomb");
        let file = dir.join("traces_0.npz");
        bomb(&file, 64 << 20);
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size < 1 << 20, "a bomb of {size} bytes");
        let e = TraceSet::read_npz(&file, 3).unwrap_err().to_string();
        assert!(e.contains("array tokens"), "{e}");
        assert!(e.contains("a damaged or hostile file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("choicewise-picks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The dtype of `array` in the `.npz` at `path`.
    fn dtype(path: &Path, array: &str) -> String {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
        let mut bytes = Vec::new();
        zip.by_name(&format!("{array}.npy"))
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        let header = String::from_utf8_lossy(&bytes[10..80]).to_string();
        header.split('\'').nth(3).unwrap().to_string()
    }

    #[test]
    fn set_a_read_written_and_read_again_is_the_same() {
        let set_a =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/arith-traces/set-a");
        if !set_a.exists() {
            eprintln!("skipped: no {}", set_a.display());
            return;
        }
        let set = TraceSet::read(&set_a).unwrap();
        assert_eq!(
            (set.problems.len(), set.problems[0].samples.len()),
            (100, 64)
        );
        let dir = temp_dir("round-trip");
        set.write_vocab(&dir).unwrap();
        for (i, chunk) in set.problems.chunks(40).enumerate() {
            set.write_npz(&dir.join(format!("traces_{i}.npz")), chunk)
                .unwrap();
        }
        assert_eq!(dtype(&dir.join("traces_0.npz"), "tokens"), "|u1");
        let back = TraceSet::read(&dir).unwrap();
        assert!(back == set, "the set read back differs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn token_ids_take_the_narrowest_unsigned_dtype_and_read_back() {
        for (vocab, expected) in [(200usize, "|u1"), (300, "<u2"), (70_000, "<u4")] {
            let mut words: Vec<String> = (0..vocab).map(|i| format!("t{i}")).collect();
            words[0] = "<eos>".into();
            let last = (vocab - 1) as u32;
            let sample = Sample {
                tokens: vec![last, 1, 0],
                logprob: vec![-0.5; 3],
                top_ids: vec![[last, 1, 2, 3, 4]; 3],
                top_logprobs: vec![[-0.5, -1.0, -2.0, -3.0, -4.0]; 3],
                finished: true,
                answer: String::new(),
            };
            let set = TraceSet {
                vocab: words,
                eos: 0,
                problems: vec![Problem {
                    prompt: "p".into(),
                    messages: Some(r#"[{"role":"user","content":"p"}]"#.into()),
                    name: Some("item-1".into()),
                    answer: "a".into(),
                    samples: vec![
                        sample.clone(),
                        Sample {
                            tokens: vec![1],
                            logprob: vec![0.0],
                            top_ids: vec![[1; TOP_K]],
                            top_logprobs: vec![[0.0; TOP_K]],
                            finished: false,
                            answer: String::new(),
                        },
                    ],
                    ..Problem::default()
                }],
            };
            let dir = temp_dir(&format!("ids-{vocab}"));
            set.write_vocab(&dir).unwrap();
            set.write_npz(&dir.join("traces_0.npz"), &set.problems)
                .unwrap();
            assert_eq!(dtype(&dir.join("traces_0.npz"), "tokens"), expected);
            assert_eq!(dtype(&dir.join("traces_0.npz"), "topk_ids"), expected);
            assert_eq!(TraceSet::read(&dir).unwrap(), set, "vocabulary of {vocab}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
