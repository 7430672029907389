//! `picks record`'s items (ITEMS.jsonl): one JSON object a line, each with its id, its prompt
//! or messages and its answer; read whole, a line that is not an item named, and items that
//! share an id or a prompt refused before any request.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::Exit;

/// How much of an event's data an error quotes.
const QUOTED: usize = 200;

/// `text` cut to its first [`QUOTED`] bytes (at a character boundary), with its length when
/// cut: an error names what was wrong without repeating a hostile server's megabytes.
pub(super) fn quoted(text: &str) -> String {
    if text.len() <= QUOTED {
        return text.to_string();
    }
    let mut end = QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// One line of ITEMS.jsonl.
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// Its line in ITEMS.jsonl (from 1).
    pub(super) line: usize,
    pub(super) id: String,
    /// The conversation, when the item gave `messages`.
    pub(super) messages: Option<Vec<Value>>,
    /// The prompt, or the last user message's text.
    pub(super) prompt: String,
    pub(super) answer: String,
}

impl Item {
    pub(super) fn messages(&self) -> Vec<Value> {
        self.messages
            .clone()
            .unwrap_or_else(|| vec![json!({"role": "user", "content": self.prompt})])
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn read_items(path: &Path) -> Result<Vec<Item>, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |why: &str| format!("{}:{}: {why}", path.display(), n + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| at(&format!("not JSON: {e}")))?;
        let id = v
            .get("id")
            .and_then(scalar)
            .unwrap_or_else(|| n.to_string());
        let answer = (v.get("answer").and_then(scalar))
            .ok_or_else(|| at("no \"answer\""))?
            .trim()
            .to_string();
        let (messages, prompt) = match (v.get("messages"), v.get("prompt")) {
            (Some(Value::Array(m)), _) if !m.is_empty() => {
                let last_user = (m.iter().rev())
                    .find(|m| m["role"] == "user")
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("")
                    .to_string();
                (Some(m.clone()), last_user)
            }
            (_, Some(Value::String(p))) => (None, p.clone()),
            _ => return Err(at("no \"prompt\" (a string) or \"messages\" (an array)").into()),
        };
        items.push(Item {
            line: n + 1,
            id,
            messages,
            prompt,
            answer,
        });
    }
    if items.is_empty() {
        return Err(format!("{}: no item", path.display()).into());
    }
    refuse_repeats(path, &items)?;
    Ok(items)
}

/// Items that share an id or a prompt (the whole conversation asked) cannot be told apart
/// when the set is replayed: refused before any sample is asked, every repeat named (exit 2).
fn refuse_repeats(path: &Path, items: &[Item]) -> Result<(), Exit> {
    let mut ids: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut prompts: Vec<(String, Vec<&Item>)> = Vec::new();
    let mut id_at: HashMap<&str, usize> = HashMap::new();
    let mut prompt_at: HashMap<String, usize> = HashMap::new();
    for item in items {
        match id_at.get(item.id.as_str()) {
            Some(&k) => ids[k].1.push(item.line),
            None => {
                id_at.insert(&item.id, ids.len());
                ids.push((&item.id, vec![item.line]));
            }
        }
        let asked = Value::Array(item.messages()).to_string();
        match prompt_at.get(&asked) {
            Some(&k) => prompts[k].1.push(item),
            None => {
                prompt_at.insert(asked.clone(), prompts.len());
                prompts.push((asked, vec![item]));
            }
        }
    }
    let lines = |l: &[usize]| {
        let l: Vec<String> = l.iter().map(usize::to_string).collect();
        l.join(", ")
    };
    let mut repeats: Vec<String> = (ids.iter())
        .filter(|(_, at)| at.len() > 1)
        .map(|(id, at)| format!("id {id:?} on lines {}", lines(at)))
        .collect();
    for (_, same) in prompts.iter().filter(|(_, same)| same.len() > 1) {
        let at: Vec<usize> = same.iter().map(|i| i.line).collect();
        let named: Vec<String> = same.iter().map(|i| format!("{:?}", i.id)).collect();
        repeats.push(format!(
            "one prompt on lines {} (ids {}): {}",
            lines(&at),
            named.join(", "),
            quoted(&same[0].prompt)
        ));
    }
    if repeats.is_empty() {
        return Ok(());
    }
    Err(Exit {
        message: format!(
            "{}: {} repeated, and a replay cannot tell such items apart (nothing was asked): {}",
            path.display(),
            repeats.len(),
            repeats.join("; ")
        ),
        code: 2,
    })
}
