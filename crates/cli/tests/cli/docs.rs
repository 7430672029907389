//! The commands of the docs that run offline, run as written.
//!
//! A shell block of README.md or docs/*.md fenced ```` ```sh offline ```` (GitHub shows it as
//! `sh`) holds commands that need no server, no network, no model and no long build: each of
//! its lines that starts with `choicewise ` runs here, through `sh` from the repository's root
//! with the built binary first on `PATH`, and must exit 0. A ```` ```text output ```` block
//! right after it (only blank lines between them) shows what its commands print: each of
//! its lines must be a line of their output. Other shell blocks are not run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One ```` ```sh offline ```` block: where it starts (`FILE:LINE`), its commands (a line
/// ending in `\` joined with the next), and the lines of the ```` ```text output ```` block
/// shown after it.
#[derive(Debug)]
struct Offline {
    at: String,
    commands: Vec<String>,
    shown: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every ```` ```sh offline ```` block of this markdown text.
fn offline_blocks(name: &str, text: &str) -> Vec<Offline> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks: Vec<Offline> = Vec::new();
    // The closing fence of the last ```sh offline block.
    let mut last_end: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_end();
        if fence != "```sh offline" && fence != "```text output" {
            i += 1;
            continue;
        }
        let start = i;
        let end = (start + 1..lines.len())
            .find(|&j| lines[j].trim_end() == "```")
            .unwrap_or_else(|| panic!("{name}:{}: a block without its end", start + 1));
        let body = &lines[start + 1..end];
        if fence == "```sh offline" {
            let mut commands = Vec::new();
            let mut pending = String::new();
            for line in body {
                match line.strip_suffix('\\') {
                    Some(head) => pending.push_str(head),
                    None => {
                        pending.push_str(line);
                        let command = std::mem::take(&mut pending);
                        if command.starts_with("choicewise ") {
                            commands.push(command);
                        }
                    }
                }
            }
            assert!(
                !commands.is_empty(),
                "{name}:{}: a ```sh offline block without a `choicewise` command",
                start + 1
            );
            blocks.push(Offline {
                at: format!("{name}:{}", start + 1),
                commands,
                shown: Vec::new(),
            });
            last_end = Some(end);
        } else {
            let right_after =
                last_end.is_some_and(|e| lines[e + 1..start].iter().all(|l| l.trim().is_empty()));
            assert!(
                right_after,
                "{name}:{}: a ```text output block not right after a ```sh offline one",
                start + 1
            );
            blocks.last_mut().unwrap().shown = body.iter().map(|l| l.to_string()).collect();
        }
        i = end + 1;
    }
    blocks
}

/// The ```` ```sh offline ```` blocks of README.md and docs/*.md, in file order.
fn docs_offline_blocks() -> Vec<Offline> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .iter()
        .flat_map(|file| {
            let name = file.strip_prefix(&root).unwrap().display().to_string();
            offline_blocks(&name, &std::fs::read_to_string(file).unwrap())
        })
        .collect()
}

#[test]
fn the_offline_blocks_are_read_with_their_commands_and_shown_output() {
    let text = "```sh offline\nchoicewise replay   # a comment\ncargo build\nchoicewise replay x \\\n  --json\n```\n\n\
                ```text output\nline one\n```\n```sh\nchoicewise chat hi\n```\n```sh offline\nchoicewise a\n```\n";
    let blocks = offline_blocks("t.md", text);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0].at, "t.md:1");
    assert_eq!(
        blocks[0].commands,
        [
            "choicewise replay   # a comment",
            "choicewise replay x   --json"
        ]
    );
    assert_eq!(blocks[0].shown, ["line one"]);
    assert_eq!(
        (blocks[1].at.as_str(), blocks[1].shown.len()),
        ("t.md:14", 0)
    );
    let misplaced = std::panic::catch_unwind(|| {
        offline_blocks("t.md", "```sh\nchoicewise x\n```\n```text output\ny\n```\n")
    });
    assert!(
        misplaced.is_err(),
        "an output block after an unmarked block"
    );
}

#[test]
fn every_offline_command_of_the_docs_runs_and_prints_what_is_shown() {
    let blocks = docs_offline_blocks();
    let count: usize = blocks.iter().map(|b| b.commands.len()).sum();
    // README.md's replays, docs/dialects.md's, docs/fan-out.md's confidence-guided vote.
    assert!(count >= 5, "only {count} offline commands: {blocks:?}");
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_choicewise"));
    let path = std::env::join_paths(
        std::iter::once(binary.parent().unwrap().to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let mut failed = Vec::new();
    for block in &blocks {
        let mut printed = String::new();
        for command in &block.commands {
            let out = Command::new("sh")
                .args(["-c", command])
                .current_dir(root())
                .env("PATH", &path)
                .env_remove("OPENAI_API_KEY")
                .env_remove("ANTHROPIC_API_KEY")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                failed.push(format!(
                    "{}: `{command}` exited {:?}\n{stdout}{stderr}",
                    block.at,
                    out.status.code()
                ));
            }
            printed.push_str(&stdout);
            printed.push_str(&stderr);
        }
        for line in &block.shown {
            if !printed.lines().any(|l| l.trim_end() == line.trim_end()) {
                failed.push(format!(
                    "{}: the shown line {line:?} was not printed:\n{printed}",
                    block.at
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
