//! The gateway's layers run one way (docs/architecture.md, "Layers"): admission → client
//! APIs → answer → upstream → core, under the composition root that builds the routes and
//! holds the state. A module may name its own layer's modules and any layer below it,
//! never one above. Read from the source: every `crate::` and `super::` path outside
//! comments and string literals, `use` groups expanded, resolved to its top-level module.
//! (Cycles between sibling modules, at any depth, are `scripts/module-cycles.py`'s check.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, top first, and the top-level modules of each.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "root (routes, state, listener)",
        &[
            "", "state", "serving", "listen", "handlers", "check", "route", "count", "admin",
            "feedback", "console",
        ],
    ),
    ("admission", &["admission"]),
    ("client APIs", &["api"]),
    ("answer", &["answer", "traces"]),
    ("upstream", &["upstream"]),
    (
        "core",
        &[
            "config",
            "error",
            "metrics",
            "keyring",
            "keys",
            "counter",
            "quota",
            "records",
            "request",
            "wellformed",
            "stderr",
            "log_format",
            "test_log",
        ],
    ),
];

/// The layer of a top-level module (`""`: the crate root), by its index in [`LAYERS`].
fn layer(top: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path (`src/answer/finish.rs`: `["answer", "finish"]`; `mod.rs` and
/// `lib.rs` name their folder).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts == ["lib"] || parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a Rust file with its comments and the contents of its string and character
/// literals blanked (a path in a doc comment or a message is not a use).
fn code(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            'r' if matches!(c.get(i + 1), Some('#') | Some('"'))
                && !c[..i]
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
                if c.get(i + 1 + hashes) != Some(&'"') {
                    out.push(c[i]);
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                while i < c.len() {
                    if c[i] == '"' && c[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
                out.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' if c.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            '\'' if c.get(i + 2) == Some(&'\'') => {
                i += 3;
                out.push_str("' '");
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// Every path of the code that starts with `crate` or `super`, as its segments, with `use`
/// groups (`crate::{a, b::c}`) expanded to one path per item.
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let (word, end) = ident(code, i);
        if boundary && (word == "crate" || word == "super") {
            let mut head = vec![word.to_string()];
            let mut j = skip_space(code, end);
            // `super::super::x`: the leading `super`s belong to the head.
            while code[j..].starts_with("::") {
                let k = skip_space(code, j + 2);
                let (next, e) = ident(code, k);
                if next == "super" {
                    head.push(next.to_string());
                    j = skip_space(code, e);
                } else {
                    tail(code, k, head.clone(), &mut out);
                    break;
                }
            }
            i = j.max(end);
        } else {
            i = if word.is_empty() { i + 1 } else { end };
        }
    }
    out
}

/// The identifier at `i` (empty if none) and where it ends.
fn ident(code: &str, i: usize) -> (&str, usize) {
    let bytes = code.as_bytes();
    let end = (i..bytes.len())
        .find(|&j| !(bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_'))
        .unwrap_or(bytes.len());
    (&code[i..end], end)
}

/// The first byte at or after `i` that is not white space.
fn skip_space(code: &str, mut i: usize) -> usize {
    let bytes = code.as_bytes();
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// A path's segments from `i` (just after a `::`) pushed onto `head`, and the groups it
/// opens expanded, into `out`.
fn tail(code: &str, i: usize, head: Vec<String>, out: &mut Vec<Vec<String>>) {
    let bytes = code.as_bytes();
    let mut path = head;
    let mut i = skip_space(code, i);
    loop {
        if bytes.get(i) == Some(&b'{') {
            // A group: each item is a path of its own from here.
            let mut depth = 0;
            let mut start = i + 1;
            let mut j = i;
            while j < bytes.len() {
                match bytes[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => {
                        tail(code, start, path.clone(), out);
                        start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            tail(code, start, path.clone(), out);
            return;
        }
        let (name, end) = ident(code, i);
        if name.is_empty() || name == "self" {
            break;
        }
        path.push(name.to_string());
        let next = skip_space(code, end);
        if code[next..].starts_with("::") {
            i = skip_space(code, next + 2);
        } else {
            break;
        }
    }
    out.push(path);
}

/// The names the crate root re-exports (`pub use config::{Limits, ...}`), by the top-level
/// module that defines them: `crate::Limits` is a use of `config`.
fn reexports(root: &str) -> Vec<(String, String)> {
    let mut names = Vec::new();
    for path in paths(&code(root).replace("pub use ", "pub use crate::")) {
        if path.len() >= 3 && path[0] == "crate" {
            names.push((path[path.len() - 1].clone(), path[1].clone()));
        }
    }
    names
}

#[test]
fn the_gateways_layers_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.sort();
    let reexported = reexports(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let tops: BTreeSet<String> = all
        .iter()
        .filter_map(|f| module_of(&src, f).first().cloned())
        .collect();
    let mut unplaced: Vec<&String> = tops.iter().filter(|t| layer(t).is_none()).collect();
    unplaced.sort();
    assert!(
        unplaced.is_empty(),
        "top-level modules in no layer (place each in LAYERS and in docs/architecture.md): {unplaced:?}"
    );
    let mut upward = BTreeSet::new();
    let mut edges = 0;
    for file in &all {
        let module = module_of(&src, file);
        let top = module.first().map_or("", String::as_str);
        let from = layer(top).unwrap();
        for path in paths(&code(&std::fs::read_to_string(file).unwrap())) {
            // The path's absolute form, then its top-level module.
            let absolute: Vec<String> = if path[0] == "crate" {
                path[1..].to_vec()
            } else {
                let ups = path.iter().take_while(|p| *p == "super").count();
                let mut base = module.clone();
                // A `mod.rs` or the root names its own folder: `super` leaves it.
                base.truncate(base.len().saturating_sub(ups));
                base.extend(path[ups..].iter().cloned());
                base
            };
            let Some(first) = absolute.first() else {
                continue;
            };
            let target = match reexported.iter().find(|(name, _)| name == first) {
                Some((_, module)) if !tops.contains(first) => module.clone(),
                _ => first.clone(),
            };
            if !tops.contains(&target) || target == top {
                continue;
            }
            edges += 1;
            let to = layer(&target).unwrap();
            if to < from {
                upward.insert(format!(
                    "{} ({}) uses {} ({}): {}",
                    module.join("::"),
                    LAYERS[from].0,
                    target,
                    LAYERS[to].0,
                    path.join("::")
                ));
            }
        }
    }
    // The reading finds the uses it must: a check that sees nothing would pass anything.
    assert!(
        edges > 200,
        "only {edges} uses between top-level modules were read"
    );
    assert!(
        upward.is_empty(),
        "{} uses run up the layers:\n{}",
        upward.len(),
        upward.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The reader itself: groups, nested groups, `super` chains, comments and strings.
#[test]
fn the_path_reader_sees_uses_and_not_comments_or_strings() {
    let text = r#"
        use crate::{api::{ClientApi, Read}, error::ApiError, self};
        use super::super::ending::Cut;
        // use crate::state::Gateway;
        /* crate::route */
        let s = "crate::admission::layers";
        let c = '"'; let l: &'static str = "";
        let x = crate::upstream::engine::Run::new();
    "#;
    let found: Vec<String> = paths(&code(text)).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "crate::api::ClientApi",
            "crate::api::Read",
            "crate::error::ApiError",
            "crate",
            "super::super::ending::Cut",
            "crate::upstream::engine::Run::new",
        ]
    );
}
