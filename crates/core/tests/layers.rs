//! The modules of the crate depend on each other one way: no module reaches, directly or
//! through others, back to itself (docs/architecture.md shows the layers). Read from the
//! sources: every `crate::module` (or `super::module`) outside comments is an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name of a source file: `src/actor/choice.rs` is `actor::choice`; `src/actor/mod.rs`
/// is `actor`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p != "mod")
        .collect();
    parts.join("::")
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The edges `module -> module` the sources name.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let me = module_of(&src, file);
        if me == "lib" {
            continue;
        }
        let parent = me.rsplit_once("::").map(|(p, _)| p.to_string());
        let text = std::fs::read_to_string(file).unwrap();
        let mut deps = BTreeSet::new();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for (prefix, base) in [("crate::", None), ("super::", parent.as_deref())] {
                for (at, _) in code.match_indices(prefix) {
                    let rest = &code[at + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    let full = match base {
                        Some(b) => format!("{b}::{name}"),
                        None => name,
                    };
                    // The first segment names the module (`crate::actor::reader` is in `actor`
                    // for a module outside it; a submodule is its own file).
                    let target = if modules.contains(&full) {
                        full
                    } else {
                        full.split("::").next().unwrap_or_default().to_string()
                    };
                    let in_same_tree = target == me || me.starts_with(&format!("{target}::"));
                    if modules.contains(&target) && !in_same_tree {
                        deps.insert(target);
                    }
                }
            }
        }
        graph.insert(me, deps);
    }
    graph
}

/// A cycle through `node`, if any (depth-first).
fn cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|p| p == node) {
        let mut c = path[at..].to_vec();
        c.push(node.to_string());
        return Some(c);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(c) = cycle(graph, next, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let graph = graph();
    assert!(graph.len() > 15, "the sources were read: {graph:?}");
    assert!(
        graph["split"].contains("scan"),
        "edges are found: {graph:?}"
    );
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = cycle(&graph, node, &mut Vec::new(), &mut done) {
            panic!("module cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_pure_layers_reach_no_runtime_module() {
    let graph = graph();
    let runtime = [
        "shared",
        "feed",
        "actor",
        "completions",
        "choice",
        "stream",
        "arguments",
    ];
    for pure in [
        "wire",
        "merge",
        "scan",
        "split",
        "decode",
        "lifecycle",
        "demux",
        "event_log",
    ] {
        for dep in &graph[pure] {
            assert!(
                !runtime.contains(&dep.as_str()),
                "{pure} depends on the runtime module {dep}"
            );
        }
    }
}
