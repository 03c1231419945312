//! A strict subset of JSON Schema, for `wait` inputs and flow inputs.
//!
//! A full validator crate would bring a regex engine, a URL resolver and a long dependency
//! tail for features flows do not need. This subset covers what a person writes to describe
//! an input (types, required fields, enums, ranges, lengths, item schemas, combinators), and
//! refuses any keyword it does not implement, so a schema never silently checks less than
//! its author believes.

use serde_json::{Map, Value};
use std::fmt;

/// Keywords that only annotate and never constrain.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "format",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
];

/// A compiled schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    source: Value,
    rule: Rule,
}

#[derive(Clone, Debug, PartialEq, Default)]
struct Rule {
    always: Option<bool>,
    types: Option<Vec<JsonType>>,
    enumeration: Option<Vec<Value>>,
    constant: Option<Value>,
    properties: Vec<(String, Rule)>,
    required: Vec<String>,
    additional: Option<Box<Rule>>,
    items: Option<Box<Rule>>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    any_of: Vec<Rule>,
    all_of: Vec<Rule>,
    one_of: Vec<Rule>,
    not: Option<Box<Rule>>,
}

/// A JSON type name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonType {
    /// `null`
    Null,
    /// `boolean`
    Boolean,
    /// `integer` (a number with no fractional part)
    Integer,
    /// `number`
    Number,
    /// `string`
    String,
    /// `array`
    Array,
    /// `object`
    Object,
}

impl JsonType {
    fn parse(name: &str) -> Option<JsonType> {
        Some(match name {
            "null" => JsonType::Null,
            "boolean" => JsonType::Boolean,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "string" => JsonType::String,
            "array" => JsonType::Array,
            "object" => JsonType::Object,
            _ => return None,
        })
    }

    /// The schema name of the type.
    pub fn name(self) -> &'static str {
        match self {
            JsonType::Null => "null",
            JsonType::Boolean => "boolean",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::String => "string",
            JsonType::Array => "array",
            JsonType::Object => "object",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            JsonType::Null => value.is_null(),
            JsonType::Boolean => value.is_boolean(),
            JsonType::Integer => {
                value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            JsonType::Number => value.is_number(),
            JsonType::String => value.is_string(),
            JsonType::Array => value.is_array(),
            JsonType::Object => value.is_object(),
        }
    }
}

/// The JSON type of a value, for messages.
pub fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A problem in a schema itself: where (a JSON pointer into the schema) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    /// JSON pointer into the schema.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at {}: {}", self.pointer, self.message)
        }
    }
}

/// A value that does not satisfy a schema: where (a JSON pointer into the value) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the value (empty for the root).
    pub pointer: String,
    /// What was expected.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at {}: {}", self.pointer, self.message)
        }
    }
}

impl Schema {
    /// Compiles a schema, refusing keywords this subset does not implement.
    pub fn compile(source: &Value) -> Result<Schema, SchemaError> {
        let rule = compile_rule(source, "")?;
        Ok(Schema {
            source: source.clone(),
            rule,
        })
    }

    /// The schema as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Checks a value; returns every violation found (empty when valid).
    pub fn validate(&self, value: &Value) -> Vec<Violation> {
        let mut out = Vec::new();
        check(&self.rule, value, &mut String::new(), &mut out);
        out
    }
}

fn err(pointer: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        pointer: pointer.to_owned(),
        message: message.into(),
    }
}

fn non_negative(value: &Value, pointer: &str) -> Result<u64, SchemaError> {
    value
        .as_u64()
        .ok_or_else(|| err(pointer, "must be a non-negative integer"))
}

fn number(value: &Value, pointer: &str) -> Result<f64, SchemaError> {
    value
        .as_f64()
        .ok_or_else(|| err(pointer, "must be a number"))
}

fn compile_list(value: &Value, pointer: &str) -> Result<Vec<Rule>, SchemaError> {
    let items = value
        .as_array()
        .ok_or_else(|| err(pointer, "must be a list of schemas"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| compile_rule(item, &format!("{pointer}/{i}")))
        .collect()
}

fn compile_rule(source: &Value, pointer: &str) -> Result<Rule, SchemaError> {
    let object: &Map<String, Value> = match source {
        Value::Bool(b) => {
            return Ok(Rule {
                always: Some(*b),
                ..Rule::default()
            });
        }
        Value::Object(object) => object,
        other => {
            return Err(err(
                pointer,
                format!(
                    "a schema must be an object or a boolean, found {}",
                    type_of(other)
                ),
            ));
        }
    };
    let mut rule = Rule::default();
    for (key, value) in object {
        let here = format!("{pointer}/{key}");
        match key.as_str() {
            "type" => {
                let names: Vec<&Value> = match value {
                    Value::Array(list) => list.iter().collect(),
                    single => vec![single],
                };
                let mut types = Vec::new();
                for name in names {
                    let parsed = name.as_str().and_then(JsonType::parse).ok_or_else(|| {
                        err(&here, format!("unknown type {name}; expected one of null, boolean, integer, number, string, array, object"))
                    })?;
                    types.push(parsed);
                }
                rule.types = Some(types);
            }
            "enum" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| err(&here, "must be a list of values"))?;
                rule.enumeration = Some(list.clone());
            }
            "const" => rule.constant = Some(value.clone()),
            "properties" => {
                let props = value
                    .as_object()
                    .ok_or_else(|| err(&here, "must be a mapping of property schemas"))?;
                for (name, schema) in props {
                    let prop = compile_rule(schema, &format!("{here}/{name}"))?;
                    rule.properties.push((name.clone(), prop));
                }
            }
            "required" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| err(&here, "must be a list of property names"))?;
                for name in list {
                    let name = name
                        .as_str()
                        .ok_or_else(|| err(&here, "property names must be strings"))?;
                    rule.required.push(name.to_owned());
                }
            }
            "additionalProperties" => {
                rule.additional = Some(Box::new(compile_rule(value, &here)?));
            }
            "items" => rule.items = Some(Box::new(compile_rule(value, &here)?)),
            "minItems" => rule.min_items = Some(non_negative(value, &here)?),
            "maxItems" => rule.max_items = Some(non_negative(value, &here)?),
            "minLength" => rule.min_length = Some(non_negative(value, &here)?),
            "maxLength" => rule.max_length = Some(non_negative(value, &here)?),
            "minimum" => rule.minimum = Some(number(value, &here)?),
            "maximum" => rule.maximum = Some(number(value, &here)?),
            "exclusiveMinimum" => rule.exclusive_minimum = Some(number(value, &here)?),
            "exclusiveMaximum" => rule.exclusive_maximum = Some(number(value, &here)?),
            "anyOf" => rule.any_of = compile_list(value, &here)?,
            "allOf" => rule.all_of = compile_list(value, &here)?,
            "oneOf" => rule.one_of = compile_list(value, &here)?,
            "not" => rule.not = Some(Box::new(compile_rule(value, &here)?)),
            annotation if ANNOTATIONS.contains(&annotation) => {}
            // `x-` keywords are extensions that only annotate (as in OpenAPI): a wizard's
            // step rides on its wait's schema as `x-palm-wizard`.
            extension if extension.starts_with("x-") => {}
            unsupported => {
                return Err(err(
                    &here,
                    format!(
                        "keyword `{unsupported}` is not supported; supported: type, enum, const, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum, anyOf, allOf, oneOf, not"
                    ),
                ));
            }
        }
    }
    Ok(rule)
}

fn push(out: &mut Vec<Violation>, pointer: &str, message: String) {
    out.push(Violation {
        pointer: pointer.to_owned(),
        message,
    });
}

fn check(rule: &Rule, value: &Value, pointer: &mut String, out: &mut Vec<Violation>) {
    if let Some(always) = rule.always {
        if !always {
            push(out, pointer, "no value is allowed here".to_owned());
        }
        return;
    }
    if let Some(types) = &rule.types
        && !types.iter().any(|t| t.matches(value))
    {
        let expected: Vec<&str> = types.iter().map(|t| t.name()).collect();
        push(
            out,
            pointer,
            format!(
                "expected {}, found {}",
                expected.join(" or "),
                type_of(value)
            ),
        );
        return;
    }
    if let Some(options) = &rule.enumeration
        && !options.contains(value)
    {
        let listed: Vec<String> = options.iter().map(Value::to_string).collect();
        push(
            out,
            pointer,
            format!("expected one of {}, found {value}", listed.join(", ")),
        );
    }
    if let Some(constant) = &rule.constant
        && constant != value
    {
        push(out, pointer, format!("expected {constant}, found {value}"));
    }
    match value {
        Value::Object(object) => {
            for name in &rule.required {
                if !object.contains_key(name) {
                    push(out, pointer, format!("missing required property `{name}`"));
                }
            }
            for (name, field) in object {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(name);
                match rule.properties.iter().find(|(prop, _)| prop == name) {
                    Some((_, prop_rule)) => check(prop_rule, field, pointer, out),
                    None => {
                        if let Some(additional) = &rule.additional {
                            if additional.always == Some(false) {
                                push(out, pointer, format!("unexpected property `{name}`"));
                            } else {
                                check(additional, field, pointer, out);
                            }
                        }
                    }
                }
                pointer.truncate(len);
            }
        }
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(min) = rule.min_items
                && count < min
            {
                push(
                    out,
                    pointer,
                    format!("expected at least {min} items, found {count}"),
                );
            }
            if let Some(max) = rule.max_items
                && count > max
            {
                push(
                    out,
                    pointer,
                    format!("expected at most {max} items, found {count}"),
                );
            }
            if let Some(item_rule) = &rule.items {
                for (i, item) in items.iter().enumerate() {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&i.to_string());
                    check(item_rule, item, pointer, out);
                    pointer.truncate(len);
                }
            }
        }
        Value::String(text) => {
            let count = text.chars().count() as u64;
            if let Some(min) = rule.min_length
                && count < min
            {
                push(
                    out,
                    pointer,
                    format!("expected at least {min} characters, found {count}"),
                );
            }
            if let Some(max) = rule.max_length
                && count > max
            {
                push(
                    out,
                    pointer,
                    format!("expected at most {max} characters, found {count}"),
                );
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = rule.minimum
                && x < min
            {
                push(
                    out,
                    pointer,
                    format!("expected a number >= {min}, found {n}"),
                );
            }
            if let Some(max) = rule.maximum
                && x > max
            {
                push(
                    out,
                    pointer,
                    format!("expected a number <= {max}, found {n}"),
                );
            }
            if let Some(min) = rule.exclusive_minimum
                && x <= min
            {
                push(
                    out,
                    pointer,
                    format!("expected a number > {min}, found {n}"),
                );
            }
            if let Some(max) = rule.exclusive_maximum
                && x >= max
            {
                push(
                    out,
                    pointer,
                    format!("expected a number < {max}, found {n}"),
                );
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
    for sub in &rule.all_of {
        check(sub, value, pointer, out);
    }
    if !rule.any_of.is_empty() {
        let passing = rule.any_of.iter().any(|sub| {
            let mut scratch = Vec::new();
            check(sub, value, &mut pointer.clone(), &mut scratch);
            scratch.is_empty()
        });
        if !passing {
            push(
                out,
                pointer,
                "matches none of the `anyOf` schemas".to_owned(),
            );
        }
    }
    if !rule.one_of.is_empty() {
        let passing = rule
            .one_of
            .iter()
            .filter(|sub| {
                let mut scratch = Vec::new();
                check(sub, value, &mut pointer.clone(), &mut scratch);
                scratch.is_empty()
            })
            .count();
        if passing != 1 {
            push(
                out,
                pointer,
                format!("must match exactly one of the `oneOf` schemas, matches {passing}"),
            );
        }
    }
    if let Some(not) = &rule.not {
        let mut scratch = Vec::new();
        check(not, value, &mut pointer.clone(), &mut scratch);
        if scratch.is_empty() {
            push(out, pointer, "matches the schema under `not`".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn violations(schema: Value, value: Value) -> Vec<String> {
        Schema::compile(&schema)
            .expect("schema compiles")
            .validate(&value)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn approval_schema() {
        let schema = json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}});
        assert!(violations(schema.clone(), json!({"ok": true})).is_empty());
        assert_eq!(
            violations(schema.clone(), json!({"ok": "yes"})),
            vec!["at /ok: expected boolean, found string"]
        );
        assert_eq!(
            violations(schema.clone(), json!({})),
            vec!["missing required property `ok`"]
        );
        assert_eq!(
            violations(schema, json!("nope")),
            vec!["expected object, found string"]
        );
    }

    #[test]
    fn numbers_strings_arrays_and_enums() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "n": {"type": "integer", "minimum": 1, "maximum": 5},
                "s": {"type": "string", "minLength": 2},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
            }
        });
        assert!(violations(schema.clone(), json!({"n": 3, "s": "ab", "tags": ["a"]})).is_empty());
        let got = violations(
            schema,
            json!({"n": 9, "s": "a", "tags": ["a", "c", "b"], "extra": 1}),
        );
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(got.contains(&"at /extra: unexpected property `extra`".to_owned()));
        assert!(got.contains(&"at /tags/1: expected one of \"a\", \"b\", found \"c\"".to_owned()));
    }

    #[test]
    fn combinators() {
        let schema = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        assert!(violations(schema.clone(), json!(3)).is_empty());
        assert_eq!(violations(schema, json!(true)).len(), 1);
        let schema = json!({"oneOf": [{"type": "number"}, {"type": "integer"}]});
        assert_eq!(violations(schema, json!(3)).len(), 1, "3 matches both");
        let schema = json!({"not": {"type": "null"}});
        assert_eq!(violations(schema, Value::Null).len(), 1);
    }

    #[test]
    fn unsupported_keywords_are_refused() {
        let err = Schema::compile(&json!({"type": "string", "pattern": "^a"})).unwrap_err();
        assert_eq!(err.pointer, "/pattern");
        let err = Schema::compile(&json!({"properties": {"x": {"$ref": "#/x"}}})).unwrap_err();
        assert_eq!(err.pointer, "/properties/x/$ref");
        let err = Schema::compile(&json!({"type": "text"})).unwrap_err();
        assert!(err.message.contains("unknown type"), "{err}");
    }
}
