//! Events the caller parsed already, and the typed dialects' events (Responses, Anthropic
//! Messages): decoded by the reader into its one choice's updates.

use serde_json::Value;

use super::*;

impl Splitter {
    /// One event that the caller parsed already: a Chat Completions chunk, or an event of
    /// the Responses or Anthropic Messages API (its `type` says which). `line` stands for
    /// the event's position in the stream (its count).
    pub fn parsed_event(&mut self, value: Value, line: u64) -> Result<(), Error> {
        let Value::Object(object) = &value else {
            return Err(Error::from(ErrorDetail::Json {
                line,
                offset: 0,
                message: format!("expected a JSON object, found {}", json_type(&value)),
            }));
        };
        if self.dialect.is_none() {
            let kind = object.get("type").and_then(Value::as_str);
            let record = || dialect_of_record(|k| object.contains_key(k));
            self.dialect = Some(match kind {
                None => record().unwrap_or_else(|| dialect_from(None, "")),
                kind => dialect_from(kind, ""),
            });
        }
        if self.typed_dialect() {
            return self.typed_value("", value, line, 0).map(drop);
        }
        if let Some(kind) = object.get("type").and_then(Value::as_str)
            && let Some(found) = dialect_of(kind)
        {
            return Err(Error::from(ErrorDetail::WrongDialect {
                expected: Dialect::Chat,
                found: format!("{kind} (of the {found} dialect)"),
                line,
            }));
        }
        let chunk = ChatCompletionChunk::deserialize(value).map_err(|e| ErrorDetail::Json {
            line,
            offset: 0,
            message: e.to_string(),
        })?;
        self.parsed(chunk, line)
    }

    /// One event of a typed dialect (Responses, Anthropic): decoded here into the update of
    /// the stream's one choice (index 0), its facts and its usage.
    pub(super) fn typed_event(
        &mut self,
        event: &str,
        data: &str,
        line: u64,
        offset: u64,
        data_lines: DataLines<'_>,
    ) -> Result<Flow, Error> {
        // A tree of what the dialect reads: the members it never reads (a response's echoed
        // `tools`, `instructions`, `metadata`, its `output` list, log-probabilities) are left
        // out, and the rest is built within a budget of the event's bytes.
        let value: Value = match crate::tree::bounded(
            data,
            TYPED_UNREAD,
            crate::tree::budget(data.len()),
        ) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Err(Error::from(ErrorDetail::Json {
                    line: data_lines.line(0).unwrap_or(line),
                    offset,
                    message: "expected a JSON object".to_string(),
                }));
            }
            Err(crate::tree::TreeError::Json(e)) => {
                return Err(json_error(&e, line, offset, data_lines));
            }
            Err(crate::tree::TreeError::TooCostly) => {
                return Err(Error::from(ErrorDetail::Json {
                    line: data_lines.line(0).unwrap_or(line),
                    offset,
                    message: format!(
                        "an event of {} bytes whose JSON tree would cost more than {} bytes (too many small values)",
                        data.len(),
                        crate::tree::budget(data.len())
                    ),
                }));
            }
        };
        self.typed_value(event, value, line, offset)
    }

    /// One parsed event of a typed dialect; `event` its `event:` line, if any.
    pub(super) fn typed_value(
        &mut self,
        event: &str,
        value: Value,
        line: u64,
        offset: u64,
    ) -> Result<Flow, Error> {
        // Only called once the stream's dialect is known to be a typed one.
        let dialect = self.dialect.unwrap_or_default();
        let typed = value.get("type").and_then(Value::as_str);
        if typed.is_none() && value.get("choices").is_some() {
            return Err(Error::from(ErrorDetail::WrongDialect {
                expected: dialect,
                found: "chat.completion.chunk".to_string(),
                line,
            }));
        }
        let reader = match &mut self.typed {
            Some(reader) => reader,
            None => {
                let reader = Reader::new(dialect, &self.custom_tools).ok_or_else(|| {
                    Error::from(ErrorDetail::WrongDialect {
                        expected: dialect,
                        found: typed.unwrap_or(event).to_string(),
                        line,
                    })
                })?;
                self.typed.insert(Box::new(reader))
            }
        };
        let decoded = reader.event(typed, event, &value, (line, offset))?;
        if let Some(kind) = decoded.warning {
            self.warnings.push(Warning {
                choice: None,
                line,
                kind,
            });
        }
        // An event that ends the message (Anthropic's `message_stop`) ends its choices, a
        // stop reason or not: a choice without one then ended as a Chat Completions choice
        // does at `[DONE]` without its `finish_reason` (no finish, not a cut stream).
        let stopped = decoded.ends_message;
        for (index, update) in decoded.updates {
            let slot = self.slot_for(i64::from(index), line)?;
            if update.finish_reason.is_some() || stopped {
                self.finish(slot);
            }
            self.slots[slot].batch.updates.push(RawUpdate {
                line,
                offset,
                body: Body::Update(Box::new(update)),
            });
        }
        let usage = decoded.usage;
        // A running count of the whole request, all choices' (Gemini's `usageMetadata`):
        // the last one is the usage.
        if let Some(shared) = decoded.shared_usage {
            self.meta.usage.last_shared = Some(shared);
        }
        self.facts(
            Facts {
                id: decoded.id.map(Cow::Owned),
                model: decoded.model.map(Cow::Owned),
                created: decoded.created,
                usage,
                ..Facts::default()
            },
            [],
            line,
        );
        Ok(Flow::Continue)
    }
}

/// The members of a typed dialect's events that its reader never reads, left out of their
/// trees at any depth (the readers of `dialect/` read types, ids, names, deltas, items,
/// usage, stop reasons and errors).
const TYPED_UNREAD: &[&str] = &[
    "tools",
    "instructions",
    "metadata",
    "output",
    "logprobs",
    "top_logprobs",
    "annotations",
    "include",
    "prompt",
];
