//! The JSON Schema of the flow format, published by `palm flows schema` for editors and
//! agents. It is written by hand (the format has shorthands a derived schema would not
//! express) and tested against the parser's own list of node types.

/// The schema document (JSON Schema draft 2020-12).
pub const FLOW_SCHEMA: &str = include_str!("flow.schema.json");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::NODE_TYPES;

    #[test]
    fn schema_names_every_top_level_key() {
        let schema: serde_json::Value = serde_json::from_str(FLOW_SCHEMA).expect("valid JSON");
        let properties = schema["properties"].as_object().expect("properties");
        for key in crate::definition::parse::TOP_LEVEL_KEYS {
            assert!(
                properties.contains_key(*key),
                "`{key}` missing from the schema"
            );
        }
        assert_eq!(
            properties.len(),
            crate::definition::parse::TOP_LEVEL_KEYS.len()
        );
    }

    #[test]
    fn schema_is_json_and_names_every_node_type() {
        let schema: serde_json::Value = serde_json::from_str(FLOW_SCHEMA).expect("valid JSON");
        let node = &schema["$defs"]["node"]["oneOf"];
        let listed: Vec<String> = node
            .as_array()
            .expect("node is a oneOf")
            .iter()
            .filter_map(|alt| alt["$ref"].as_str())
            .map(|r| r.trim_start_matches("#/$defs/").to_owned())
            .collect();
        for node_type in NODE_TYPES {
            assert!(
                listed.iter().any(|l| l == node_type),
                "{node_type} missing from schema"
            );
            assert!(
                schema["$defs"][node_type].is_object(),
                "$defs/{node_type} missing"
            );
        }
    }
}
