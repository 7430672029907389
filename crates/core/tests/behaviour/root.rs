//! The crate root stays small: what an application uses, at most 50 names; the finer pieces
//! live in modules (`policy`, `select`, `arguments`, `confidence`, ...). Counted from
//! `src/lib.rs` itself, so a name added to the root without taking one out fails here.

/// The most names the crate root may hold.
const MOST: usize = 50;

/// The names `source` (a `lib.rs`) makes public at its root: each `pub use` (every name in
/// its braces, or its last segment, or its `as` name) and each `pub` item, outside the
/// bodies of its inline modules. Modules themselves are not counted.
fn root_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut statement: Option<String> = None;
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default().trim();
        if let Some(open) = statement.as_mut() {
            open.push(' ');
            open.push_str(code);
        } else if depth == 0 && code.starts_with("pub use ") {
            statement = Some(code.to_string());
        } else if depth == 0 {
            for kind in ["fn", "struct", "enum", "trait", "type", "const", "static"] {
                if let Some(rest) = code.strip_prefix(&format!("pub {kind} ")) {
                    let name = rest
                        .split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next();
                    names.extend(name.map(str::to_string));
                }
            }
        }
        if let Some(done) = statement.take_if(|s| s.ends_with(';')) {
            names.extend(used_names(&done));
        }
        if statement.is_none() {
            depth += code.matches('{').count();
            depth = depth.saturating_sub(code.matches('}').count());
        }
    }
    names
}

/// The names one `pub use ...;` statement brings in.
fn used_names(statement: &str) -> Vec<String> {
    let path = statement
        .trim_start_matches("pub use ")
        .trim_end_matches(';');
    let items = match (path.find('{'), path.rfind('}')) {
        (Some(open), Some(close)) => path[open + 1..close].split(',').collect::<Vec<_>>(),
        _ => vec![path],
    };
    (items.into_iter())
        .map(str::trim)
        .filter(|item| !item.is_empty() && *item != "self")
        .map(|item| match item.split_once(" as ") {
            Some((_, alias)) => alias.trim().to_string(),
            None => item.rsplit("::").next().unwrap_or(item).to_string(),
        })
        .collect()
}

#[test]
fn the_crate_root_holds_at_most_50_names() {
    let source = include_str!("../../src/lib.rs");
    let names = root_names(source);
    // The reading itself: the everyday names are found, each once.
    for everyday in [
        "Completions",
        "Choice",
        "ChoiceEvent",
        "Error",
        "Policy",
        "Source",
    ] {
        assert!(
            names.iter().filter(|n| *n == everyday).count() == 1,
            "{everyday} in {names:?}"
        );
    }
    assert!(
        names.len() <= MOST,
        "the crate root holds {} names, more than {MOST}: move the ones an application rarely \
         needs into their module ({names:?})",
        names.len()
    );
}

#[test]
fn the_count_reads_braces_paths_aliases_and_items() {
    let source = "pub use a::{B, C as D,\n    E};\npub use f::G;\npub mod h {\n    pub use \
                  i::J;\n}\n#[cfg(feature = \"x\")]\npub use k::L;\npub fn m() {}\npub struct N;\n";
    assert_eq!(root_names(source), ["B", "D", "E", "G", "L", "m", "N"]);
}
