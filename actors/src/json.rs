//! `Json`: a `serde_json::Value` that survives compact binary encodings.
//!
//! Journal events and store records are encoded with postcard, which (like every
//! non-self-describing format) cannot deserialize a `serde_json::Value`. `Json` therefore
//! encodes itself as JSON text when the serializer is not human readable, and as the plain
//! value when it is (so `palm inspect --json` shows real JSON, not strings of JSON).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut};

/// A JSON value that encodes as text inside binary formats. See the module docs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Json(pub serde_json::Value);

impl Json {
    /// The JSON `null`.
    pub const NULL: Json = Json(serde_json::Value::Null);

    /// An empty JSON object.
    pub fn object() -> Json {
        Json(serde_json::Value::Object(serde_json::Map::new()))
    }

    /// Unwraps into the inner value.
    pub fn into_inner(self) -> serde_json::Value {
        self.0
    }
}

impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Self {
        Json(value)
    }
}

impl Deref for Json {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.0
    }
}

impl DerefMut for Json {
    fn deref_mut(&mut self) -> &mut serde_json::Value {
        &mut self.0
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            self.0.serialize(serializer)
        } else {
            let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
            serializer.serialize_str(&text)
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            serde_json::Value::deserialize(deserializer).map(Json)
        } else {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            serde_json::from_str(&text)
                .map(Json)
                .map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_number_read_back_is_the_number_written() {
        // Without serde_json's float_roundtrip, 1e42 came back as 9.999999999999999e41
        // (found by the frame_codec fuzz target).
        for number in [1e42, 0.1, 2.0f64.powi(60) + 1.0, f64::MAX, 5e-324] {
            let value = Json(json!(number));
            let bytes = postcard::to_stdvec(&value).expect("encode");
            let back: Json = postcard::from_bytes(&bytes).expect("decode");
            assert_eq!(back, value, "{number:e}");
        }
    }

    #[test]
    fn round_trips_through_postcard_and_json() {
        let value = Json(json!({"a": [1, 2.5, "x", null, {"b": true}]}));
        let bytes = postcard::to_stdvec(&value).expect("encode");
        let back: Json = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, value);
        let text = serde_json::to_string(&value).expect("encode json");
        assert_eq!(text, r#"{"a":[1,2.5,"x",null,{"b":true}]}"#);
    }
}
