//! Counting function and tool definitions: a definition and the parts of its JSON schema
//! that the formulas read, counted by the cookbook formula or rendered as the TypeScript
//! namespace the model is shown.

use serde_json::Value;

use super::messages::Counter;
use super::{CookbookConstants, MAX_SCHEMA_DEPTH, optional_array, optional_str, required_str};
use crate::error::{Path, UsageError};

/// A function definition, validated.
pub(super) struct FunctionDef<'v> {
    name: &'v str,
    description: Option<&'v str>,
    /// The top-level parameters object, when it has properties.
    params: Option<Schema<'v>>,
}

/// The parts of a JSON schema the formulas read.
struct Schema<'v> {
    description: Option<&'v str>,
    types: Vec<&'v str>,
    enum_values: Option<&'v [Value]>,
    /// `(name, schema)` in the map's order.
    properties: Vec<(&'v str, Schema<'v>)>,
    required: Vec<&'v str>,
    items: Option<Box<Schema<'v>>>,
}

impl<'v> FunctionDef<'v> {
    pub(super) fn parse(f: &'v Value, p: &Path<'_>) -> Result<FunctionDef<'v>, UsageError> {
        let obj = f
            .as_object()
            .ok_or_else(|| p.wrong_type("a function object", f))?;
        let name = required_str(obj, "name", p)?;
        let description = optional_str(obj, "description", p)?;
        let params = match obj.get("parameters") {
            None | Some(Value::Null) => None,
            Some(v) => Some(Schema::parse(v, &p.key("parameters"), 0)?),
        };
        Ok(FunctionDef {
            name,
            description,
            params,
        })
    }

    pub(super) fn cookbook(&self, counter: &Counter, c: &CookbookConstants) -> i64 {
        let mut n = c.func_init;
        let desc = self.description.map(strip_period).unwrap_or_default();
        let mut line = String::with_capacity(self.name.len() + 1 + desc.len());
        line.push_str(self.name);
        line.push(':');
        line.push_str(desc);
        n += counter.text(&line) as i64;
        if let Some(params) = &self.params {
            n += cookbook_properties(&params.properties, counter, c);
        }
        n
    }
}

/// `prop_init + Σ (prop_key + enum + tokens("name:type:description") +
/// nested)`, or 0 for no properties. Nested objects (a property's own
/// `properties`, or its `items`' properties) are counted the same way: the
/// cookbook's published function reads only the top level.
fn cookbook_properties(
    props: &[(&str, Schema<'_>)],
    counter: &Counter,
    c: &CookbookConstants,
) -> i64 {
    if props.is_empty() {
        return 0;
    }
    let mut n = c.prop_init;
    for (key, schema) in props {
        n += c.prop_key;
        n += cookbook_enum(schema, counter, c);
        let ty = schema.types.join(" | ");
        let mut line = String::from(*key);
        if !ty.is_empty() {
            line.push(':');
            line.push_str(&ty);
        }
        if let Some(desc) = schema.description {
            line.push(':');
            line.push_str(strip_period(desc));
        }
        n += counter.text(&line) as i64;
        n += cookbook_properties(&schema.properties, counter, c);
        if let Some(items) = &schema.items {
            n += cookbook_enum(items, counter, c);
            n += cookbook_properties(&items.properties, counter, c);
        }
    }
    n
}

fn cookbook_enum(schema: &Schema<'_>, counter: &Counter, c: &CookbookConstants) -> i64 {
    let Some(values) = schema.enum_values else {
        return 0;
    };
    let mut n = c.enum_init;
    for v in values {
        n += c.enum_item;
        n += match v {
            Value::String(s) => counter.text(s),
            other => counter.text(&other.to_string()),
        } as i64;
    }
    n
}

/// The cookbook drops one trailing period from descriptions.
fn strip_period(s: &str) -> &str {
    s.strip_suffix('.').unwrap_or(s)
}

impl<'v> Schema<'v> {
    fn parse(v: &'v Value, p: &Path<'_>, depth: usize) -> Result<Schema<'v>, UsageError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(p.too_deep(MAX_SCHEMA_DEPTH));
        }
        let obj = v
            .as_object()
            .ok_or_else(|| p.wrong_type("a JSON schema object", v))?;
        let description = optional_str(obj, "description", p)?;
        let types = match obj.get("type") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => {
                let tp = p.key("type");
                a.iter()
                    .enumerate()
                    .map(|(i, t)| {
                        t.as_str()
                            .ok_or_else(|| tp.index(i).wrong_type("a string", t))
                    })
                    .collect::<Result<_, _>>()?
            }
            Some(t) => {
                return Err(p
                    .key("type")
                    .wrong_type("a string or an array of strings", t));
            }
        };
        let enum_values = optional_array(obj, "enum", p)?.map(Vec::as_slice);
        let mut properties = Vec::new();
        match obj.get("properties") {
            None | Some(Value::Null) => {}
            Some(Value::Object(props)) => {
                let pp = p.key("properties");
                properties.reserve(props.len());
                for (k, s) in props {
                    properties.push((k.as_str(), Schema::parse(s, &pp.key(k), depth + 1)?));
                }
            }
            Some(v) => return Err(p.key("properties").wrong_type("an object", v)),
        }
        let mut required = Vec::new();
        if let Some(req) = optional_array(obj, "required", p)? {
            let rp = p.key("required");
            for (i, r) in req.iter().enumerate() {
                required.push(
                    r.as_str()
                        .ok_or_else(|| rp.index(i).wrong_type("a string", r))?,
                );
            }
        }
        // A tuple-style `items` array is not followed.
        let items = match obj.get("items") {
            Some(i @ Value::Object(_)) => {
                Some(Box::new(Schema::parse(i, &p.key("items"), depth + 1)?))
            }
            _ => None,
        };
        Ok(Schema {
            description,
            types,
            enum_values,
            properties,
            required,
            items,
        })
    }
}

/// hmarr/openai-chat-tokens `formatFunctionDefinitions`: the TypeScript namespace the model
/// is shown, written one definition at a time (the definitions need not all exist at once).
pub(super) struct NamespaceText(String);

impl NamespaceText {
    pub(super) fn new() -> Self {
        NamespaceText("namespace functions {\n".to_string())
    }

    fn line(&mut self, line: &str) {
        self.0.push('\n');
        self.0.push_str(line);
    }

    pub(super) fn add(&mut self, f: &FunctionDef<'_>) {
        if let Some(d) = f.description {
            self.line(&format!("// {d}"));
        }
        match &f.params {
            Some(params) if !params.properties.is_empty() => {
                self.line(&format!("type {} = (_: {{", f.name));
                self.line(&render_properties(params, 0));
                self.line("}) => any;");
            }
            _ => self.line(&format!("type {} = () => any;", f.name)),
        }
        self.line("");
    }

    pub(super) fn finish(mut self) -> String {
        self.line("} // namespace functions");
        self.0
    }
}

fn render_properties(obj: &Schema<'_>, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut lines: Vec<String> = Vec::new();
    for (name, param) in &obj.properties {
        if let Some(d) = param.description {
            lines.push(format!("{pad}// {d}"));
        }
        let optional = if obj.required.contains(name) { "" } else { "?" };
        lines.push(format!(
            "{pad}{name}{optional}: {},",
            render_type(param, indent)
        ));
    }
    lines.join("\n")
}

fn render_type(param: &Schema<'_>, indent: usize) -> String {
    let enum_list = |quote: bool| {
        param.enum_values.map(|values| {
            values
                .iter()
                .map(|v| match v {
                    Value::String(s) if quote => format!("\"{s}\""),
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" | ")
        })
    };
    match param.types.as_slice() {
        ["string"] => enum_list(true).unwrap_or_else(|| "string".into()),
        ["number" | "integer"] => enum_list(false).unwrap_or_else(|| "number".into()),
        ["boolean"] => "boolean".into(),
        ["null"] => "null".into(),
        ["object"] => format!("{{\n{}\n}}", render_properties(param, indent + 2)),
        ["array"] => match &param.items {
            Some(items) => format!("{}[]", render_type(items, indent)),
            None => "any[]".into(),
        },
        // Beyond hmarr: a type union, an untyped enum, or no type at all.
        _ => {
            if let Some(list) = enum_list(true) {
                list
            } else if param.types.len() > 1 {
                param.types.join(" | ")
            } else if !param.properties.is_empty() {
                format!("{{\n{}\n}}", render_properties(param, indent + 2))
            } else {
                "any".into()
            }
        }
    }
}
