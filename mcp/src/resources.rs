//! MCP resources: the agent card and guide (static text shipped in the binary), and the
//! templates `palm://flows/{name}` and `palm://jobs/{id}`, answered by control requests.

use super::control_link::ControlLink;
use super::tools::ask;
use palm_api::protocol::Request;
use rmcp::ErrorData;
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use serde_json::json;

/// The short card: what Palm is, which tool first, how waits work.
pub const CARD: &str = include_str!("../../docs/mcp-card.md");

/// The full guide.
pub const GUIDE: &str = include_str!("../../docs/mcp.md");

/// URI of the card.
pub const CARD_URI: &str = "palm://agent/card";

/// URI of the guide.
pub const GUIDE_URI: &str = "palm://agent/guide";

/// Stored flows listed as concrete resources (more are still readable by template).
pub const FLOWS_LISTED_MAX: usize = 100;

/// The fixed resources, then one per stored flow.
pub async fn list(link: &ControlLink) -> Vec<Resource> {
    let mut resources = vec![
        Resource::new(CARD_URI, "agent-card")
            .with_title("Palm agent card")
            .with_description("Read first: what Palm is, which tool to call first, how waits work.")
            .with_mime_type("text/markdown")
            .with_size(CARD.len() as u64),
        Resource::new(GUIDE_URI, "agent-guide")
            .with_title("Palm guide for agents")
            .with_description("Every tool, waits and progress, writing flows, errors, resources.")
            .with_mime_type("text/markdown")
            .with_size(GUIDE.len() as u64),
    ];
    // The flow list is a convenience: a node that cannot answer it leaves the fixed ones.
    if let Ok(flows) = ask(link, Request::FlowsList).await {
        for flow in flows["flows"]
            .as_array()
            .into_iter()
            .flatten()
            .take(FLOWS_LISTED_MAX)
        {
            let Some(name) = flow["name"].as_str() else {
                continue;
            };
            let mut resource =
                Resource::new(format!("palm://flows/{name}"), format!("flow {name}"))
                    .with_mime_type("application/json");
            if let Some(description) = flow["description"].as_str() {
                resource = resource.with_description(description);
            }
            resources.push(resource);
        }
    }
    resources
}

/// The resource templates.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("palm://flows/{name}", "flow")
            .with_title("A stored flow")
            .with_description("A stored flow definition: revisions, inputs and source.")
            .with_mime_type("application/json"),
        ResourceTemplate::new("palm://jobs/{id}", "job")
            .with_title("A job")
            .with_description("A job's status view: status, waits, state, error, effects.")
            .with_mime_type("application/json"),
    ]
}

/// Decodes `%XX` escapes (a client may escape the template variable).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(byte) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn not_found(uri: &str, why: impl std::fmt::Display) -> ErrorData {
    ErrorData::resource_not_found(
        format!("{uri}: {why}"),
        Some(
            json!({"uri": uri, "known": [CARD_URI, GUIDE_URI, "palm://flows/{name}", "palm://jobs/{id}"]}),
        ),
    )
}

/// Reads one resource.
pub async fn read(link: &ControlLink, uri: &str) -> Result<ResourceContents, ErrorData> {
    let text = |mime: &str, text: String| {
        ResourceContents::text(text, uri.to_owned()).with_mime_type(mime.to_owned())
    };
    match uri {
        CARD_URI => return Ok(text("text/markdown", CARD.to_owned())),
        GUIDE_URI => return Ok(text("text/markdown", GUIDE.to_owned())),
        _ => {}
    }
    let Some(rest) = uri.strip_prefix("palm://") else {
        return Err(not_found(uri, "not a palm:// resource"));
    };
    let (kind, id) = rest.split_once('/').unwrap_or((rest, ""));
    let id = percent_decoded(id);
    if id.is_empty() || id.contains('/') {
        return Err(not_found(
            uri,
            "expected palm://flows/NAME or palm://jobs/ID",
        ));
    }
    let request = match kind {
        "flows" => Request::FlowsShow {
            name: id,
            revision: None,
        },
        "jobs" => Request::Status { job: id },
        _ => return Err(not_found(uri, "unknown resource")),
    };
    match ask(link, request).await {
        Ok(value) => {
            let body = serde_json::to_string_pretty(&value)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            Ok(text("application/json", body))
        }
        Err(err) if matches!(err.kind.as_str(), "unknown_flow" | "unknown_job") => {
            Err(not_found(uri, err.message))
        }
        Err(err) => Err(ErrorData::internal_error(err.text(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_is_short_and_names_the_first_tool() {
        assert!(CARD.len() < 3_000, "the card is {} bytes", CARD.len());
        assert!(CARD.contains("palm_assist"));
        assert!(CARD.contains("palm_continue"));
        assert!(GUIDE.len() > CARD.len());
        for tool in super::super::tools::specs() {
            assert!(
                GUIDE.contains(tool.name),
                "the guide does not mention {}",
                tool.name
            );
        }
    }

    #[test]
    fn escapes_decode() {
        assert_eq!(percent_decoded("ab-1"), "ab-1");
        assert_eq!(percent_decoded("my%20flow"), "my flow");
        assert_eq!(percent_decoded("bad%zz"), "bad%zz");
        assert_eq!(percent_decoded("end%2"), "end%2");
    }
}
