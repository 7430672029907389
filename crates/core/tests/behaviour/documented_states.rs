//! docs/architecture.md names the lifecycles' states: the "Who owns which state" table (a
//! choice's `ChoiceCore` phases, a slot's `Life`, the completion's `CompletionPhase`) and the
//! router's diagram of a slot (`Held`, `SlotState`, `Life`). Each is read here and checked
//! against the enums in the code, so that a state added or renamed in one place and not the
//! other fails.

use std::collections::BTreeSet;

const ARCHITECTURE: &str = include_str!("../../../../docs/architecture.md");
const LIFECYCLE: &str = include_str!("../../../proto/src/lifecycle.rs");
const ROUTER: &str = include_str!("../../../proto/src/router.rs");
const COMPLETION: &str = include_str!("../../src/completion.rs");

type Names = BTreeSet<String>;

/// The variants of `enum name` in `source`: the identifiers that open a line at the
/// enum's own indentation plus four, between its braces.
fn variants(source: &str, name: &str) -> Names {
    let mut lines = source.lines();
    let head = (lines.by_ref())
        .find(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub ")
                .or(l.strip_prefix("pub(crate) "))
                .unwrap_or(l);
            l.strip_prefix("enum ")
                .is_some_and(|rest| rest.split(|c: char| !c.is_alphanumeric()).next() == Some(name))
        })
        .unwrap_or_else(|| panic!("no enum {name}"));
    let indent = head.len() - head.trim_start().len();
    let inner = " ".repeat(indent + 4);
    let names: Names = lines
        .take_while(|l| l.trim_end() != format!("{}}}", " ".repeat(indent)))
        .filter_map(|l| l.strip_prefix(&inner))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| identifiers(l).into_iter().next().unwrap())
        .collect();
    assert!(!names.is_empty(), "enum {name} has no variant");
    names
}

/// The identifiers that start with a capital in `text`.
fn identifiers(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(str::to_string)
        .collect()
}

fn set(names: &[&str]) -> Names {
    names.iter().map(|n| n.to_string()).collect()
}

/// The rows of the table under `## Who owns which state`.
fn state_rows(doc: &str) -> Vec<&str> {
    let section = doc
        .split("## Who owns which state")
        .nth(1)
        .expect("the section");
    let section = section.split("\n## ").next().unwrap();
    (section.lines())
        .skip_while(|l| !l.starts_with("| state |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect()
}

/// The states a table cell gives the lifecycle `name`: the backticked items of the chain
/// (`` `A` → `B` ``) that follows `` `name` `` in the cell, up to the next `;`, the
/// parenthesis that closes the chain, or a `with` (what a state carries).
fn chain_after(cell: &str, name: &str) -> Names {
    let marker = format!("`{name}`");
    let at = cell
        .find(&marker)
        .unwrap_or_else(|| panic!("{name} in {cell}"));
    let rest = &cell[at + marker.len()..];
    let rest = rest.split(" with ").next().unwrap();
    let mut names = Names::new();
    let mut depth = 0i32;
    let mut in_code = false;
    let mut item = String::new();
    for c in rest.chars() {
        match c {
            '`' if in_code => {
                names.extend(identifiers(&item));
                item.clear();
                in_code = false;
            }
            '`' => in_code = true,
            _ if in_code => item.push(c),
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            ';' | '|' => break,
            _ => {}
        }
    }
    names
}

#[test]
fn the_state_tables_lifecycles_are_the_codes() {
    let rows = state_rows(ARCHITECTURE);
    let row = |name: &str| {
        let marker = format!("`{name}`");
        let found: Vec<_> = rows.iter().filter(|r| r.contains(&marker)).collect();
        assert_eq!(found.len(), 1, "one row names {name}: {rows:#?}");
        *found[0]
    };
    // A choice: `Phase`'s states, `Closed`'s inside `Closed(..)`.
    let mut choice = variants(LIFECYCLE, "Phase");
    choice.extend(variants(LIFECYCLE, "Closed"));
    assert_eq!(chain_after(row("ChoiceCore"), "ChoiceCore"), choice);
    // A slot's `Life`, as the router keeps it.
    assert_eq!(chain_after(row("Life"), "Life"), variants(ROUTER, "Life"));
    // The completion's phase, and what it reads its samples from.
    assert_eq!(
        chain_after(row("CompletionPhase"), "CompletionPhase"),
        variants(COMPLETION, "CompletionPhase")
    );
    assert_eq!(
        chain_after(row("Mode"), "Mode"),
        variants(COMPLETION, "Mode")
    );
}

#[test]
fn every_state_the_docs_name_by_its_path_is_in_the_code() {
    for (name, source) in [
        ("Held", ROUTER),
        ("SlotState", ROUTER),
        ("Life", ROUTER),
        ("Phase", LIFECYCLE),
        ("Closed", LIFECYCLE),
        ("CompletionPhase", COMPLETION),
    ] {
        let known = variants(source, name);
        let prefix = format!("`{name}::");
        for (at, _) in ARCHITECTURE.match_indices(&prefix) {
            let rest = &ARCHITECTURE[at + prefix.len()..];
            let variant = identifiers(rest).into_iter().next().unwrap_or_default();
            assert!(
                known.contains(&variant),
                "{name}::{variant} is not in {known:?}"
            );
        }
    }
}

#[test]
fn the_routers_diagram_is_the_codes() {
    let diagram = ARCHITECTURE
        .split("```text\nHeld:\n")
        .nth(1)
        .expect("the router's diagram")
        .split("```")
        .next()
        .unwrap();
    let (held, life) = diagram
        .split_once("Life (beside Held):")
        .expect("the diagram's Life");
    // Who holds a slot's state: `Held`'s states, and the slot's other states than an
    // actor's.
    let mut slot = variants(ROUTER, "Held");
    slot.extend(variants(ROUTER, "SlotState"));
    slot.remove("Actor");
    assert_eq!(identifiers(held).into_iter().collect::<Names>(), slot);
    let mut life: Names = identifiers(life).into_iter().collect();
    life.remove("Held");
    assert_eq!(life, variants(ROUTER, "Life"));
}

#[test]
fn the_readers_of_the_docs_read_what_they_should() {
    let source = "pub enum Phase {\n    /// A.\n    Open,\n    Closed(Closed),\n    Settled {\n        \
                  x: u8,\n    },\n}\nenum Other {\n    Not,\n}\n";
    assert_eq!(
        variants(source, "Phase"),
        set(&["Open", "Closed", "Settled"])
    );
    let cell = "a choice's state (`Core`: `Open` → `Closed(Ended \\| Failed(e))` → `Settled`), \
                its `Other`";
    assert_eq!(
        chain_after(cell, "Core"),
        set(&["Open", "Closed", "Ended", "Failed", "Settled"])
    );
}
