//! Errors as `application/problem+json` (RFC 9457): `type` (`urn:palm:problem:KIND`),
//! `title`, `status`, `detail`, plus Palm's `kind`, `hint` and `exit` (the exit code the
//! CLI would use for the same failure).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use palm_api::protocol::ErrorBody;
use serde_json::json;

/// The media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A failed request, ready to answer.
#[derive(Clone, Debug)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// The control error.
    pub body: ErrorBody,
}

impl Problem {
    /// A problem from a control error, its status chosen by kind and exit code.
    pub fn from_error(body: ErrorBody) -> Problem {
        Problem {
            status: status_of(&body),
            body,
        }
    }

    /// A problem with an explicit status.
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Problem {
        let exit = if status.is_client_error() { 2 } else { 1 };
        Problem {
            status,
            body: ErrorBody {
                kind: kind.to_owned(),
                message: message.into(),
                hint: None,
                exit,
            },
        }
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Problem {
        self.body.hint = Some(hint.into());
        self
    }
}

/// The HTTP status of a control error.
pub fn status_of(body: &ErrorBody) -> StatusCode {
    let kind = body.kind.as_str();
    if kind.starts_with("unknown_") || kind.ends_with("_not_found") || kind == "not_found" {
        return StatusCode::NOT_FOUND;
    }
    match kind {
        "not_waiting" | "job_finished" | "refused" | "already_running" | "conflict" | "revoked"
        | "not_ended" | "not_retryable" | "already_applied" | "not_applied" | "patch_blocked"
        | "patch_violation" => StatusCode::CONFLICT,
        "not_root" | "forbidden" => StatusCode::FORBIDDEN,
        "unauthorized" => StatusCode::UNAUTHORIZED,
        "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        "unavailable" | "shutting_down" | "busy" | "too_many_tokens" => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ if body.exit == 2 => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error").to_owned();
        let mut document = json!({
            "type": format!("urn:palm:problem:{}", self.body.kind),
            "title": title,
            "status": self.status.as_u16(),
            "detail": self.body.message,
            "kind": self.body.kind,
            "exit": self.body.exit,
        });
        if let Some(hint) = &self.body.hint {
            document["hint"] = json!(hint);
        }
        let mut response = (self.status, document.to_string()).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"palm\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_kinds_and_exit_codes() {
        let body = |kind: &str, exit: u8| ErrorBody {
            kind: kind.into(),
            message: String::new(),
            hint: None,
            exit,
        };
        assert_eq!(status_of(&body("unknown_job", 2)), StatusCode::NOT_FOUND);
        assert_eq!(status_of(&body("not_waiting", 2)), StatusCode::CONFLICT);
        assert_eq!(status_of(&body("job_finished", 2)), StatusCode::CONFLICT);
        assert_eq!(
            status_of(&body("invalid_input", 2)),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status_of(&body("store", 1)),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status_of(&body("shutting_down", 1)),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status_of(&body("not_root", 2)), StatusCode::FORBIDDEN);
    }
}
