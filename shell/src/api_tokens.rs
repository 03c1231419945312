//! API tokens: the bearer tokens the REST API and the Explorer ask for from beyond
//! loopback (`palm token create --role api`). Any node issues its own (unlike join tokens,
//! which only a root's tree CA signs): they open this node's HTTP surface and nothing
//! else — a link never accepts one.
//!
//! `DATA/api-tokens.json` keeps, per token, its name, the SHA-256 of its secret (never
//! the secret), its times and whether it was revoked; written to a temporary file and
//! renamed. A running node is the only writer (the CLI asks it over the control socket);
//! with no node running the CLI writes under the data directory's lock.

use palm_api::protocol::ErrorBody;
use ring::digest::{SHA256, digest};
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The role name of an API token.
pub const API_ROLE: &str = "api";
/// Every API token starts with this (so a leaked one is recognisable).
pub const TOKEN_PREFIX: &str = "palm_api_";
/// Live API tokens a node keeps at most.
pub const API_TOKENS_MAX: usize = 1_000;

/// Serializes writers within one process.
static WRITING: Mutex<()> = Mutex::new(());

/// One token, its secret left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiToken {
    /// Its name.
    pub name: String,
    /// SHA-256 of the secret, hex.
    pub digest: String,
    /// When it was made (ms).
    pub created_ms: u64,
    /// When it stops working (ms).
    pub expires_ms: u64,
    /// When it was revoked (ms), if it was.
    #[serde(default)]
    pub revoked_ms: Option<u64>,
}

impl ApiToken {
    /// live, expired or revoked.
    pub fn state(&self, now_ms: u64) -> &'static str {
        if self.revoked_ms.is_some() {
            "revoked"
        } else if now_ms >= self.expires_ms {
            "expired"
        } else {
            "live"
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    tokens: Vec<ApiToken>,
}

fn path(data: &Path) -> PathBuf {
    data.join("api-tokens.json")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest_of(secret: &str) -> String {
    hex(digest(&SHA256, secret.as_bytes()).as_ref())
}

fn load(data: &Path) -> Result<Book, ErrorBody> {
    match std::fs::read(path(data)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            ErrorBody::failure(
                "store",
                format!("{} is unreadable: {e}", path(data).display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Book::default()),
        Err(e) => Err(ErrorBody::failure(
            "store",
            format!("cannot read {}: {e}", path(data).display()),
        )),
    }
}

fn save(data: &Path, book: &Book) -> Result<(), ErrorBody> {
    let target = path(data);
    let tmp = target.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(book).unwrap_or_default();
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    write()
        .map_err(|e| ErrorBody::failure("store", format!("cannot write {}: {e}", target.display())))
}

/// Makes a token; answers `{"token", "name", "role": "api", "expires_at"}` (the secret
/// is shown this once).
pub fn create(data: &Path, name: &str, ttl_ms: u64, now_ms: u64) -> Result<Value, ErrorBody> {
    let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let mut book = load(data)?;
    let mut random = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| ErrorBody::failure("random", "the OS gave no entropy"))?;
    let name = if name.is_empty() {
        format!("api-{}", hex(&random[..3]))
    } else {
        name.to_owned()
    };
    let valid_name = name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid_name {
        return Err(ErrorBody::invalid(
            "invalid_input",
            format!("token name `{name}`: letters, digits, `.`, `_`, `-`, at most 64"),
        ));
    }
    if book
        .tokens
        .iter()
        .any(|t| t.name == name && t.state(now_ms) == "live")
    {
        return Err(ErrorBody::invalid(
            "invalid_input",
            format!("a live API token is already named `{name}`"),
        )
        .hint(format!(
            "`palm token revoke {name}` first, or pick another name"
        )));
    }
    // Expired and revoked tokens are dropped once the book is full.
    if book.tokens.len() >= API_TOKENS_MAX {
        book.tokens.retain(|t| t.state(now_ms) == "live");
        if book.tokens.len() >= API_TOKENS_MAX {
            return Err(ErrorBody::failure(
                "too_many_tokens",
                format!("{API_TOKENS_MAX} API tokens are live"),
            ));
        }
    }
    let secret = format!("{TOKEN_PREFIX}{}", hex(&random[3..]));
    let expires_ms = now_ms.saturating_add(ttl_ms);
    book.tokens.push(ApiToken {
        name: name.clone(),
        digest: digest_of(&secret),
        created_ms: now_ms,
        expires_ms,
        revoked_ms: None,
    });
    save(data, &book)?;
    Ok(json!({"token": secret, "name": name, "role": API_ROLE, "expires_at": expires_ms}))
}

/// Revokes the API tokens named `name`; `None` when none is (the name may be a child's).
pub fn revoke(data: &Path, name: &str, now_ms: u64) -> Result<Option<Value>, ErrorBody> {
    let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let mut book = load(data)?;
    let mut revoked = 0;
    for token in book.tokens.iter_mut().filter(|t| t.name == name) {
        if token.revoked_ms.is_none() {
            token.revoked_ms = Some(now_ms);
            revoked += 1;
        }
    }
    if !book.tokens.iter().any(|t| t.name == name) {
        return Ok(None);
    }
    save(data, &book)?;
    Ok(Some(
        json!({"revoked": name, "role": API_ROLE, "tokens": revoked}),
    ))
}

/// True when `secret` is a live API token of the node at `data`.
pub fn verify(data: &Path, secret: &str, now_ms: u64) -> bool {
    if !secret.starts_with(TOKEN_PREFIX) {
        return false;
    }
    let Ok(book) = load(data) else {
        return false;
    };
    // Digests are compared, not secrets: how long a comparison of SHA-256 outputs takes
    // says nothing useful about a secret that would hash to the stored one.
    let wanted = digest_of(secret);
    book.tokens
        .iter()
        .any(|t| t.state(now_ms) == "live" && t.digest == wanted)
}

/// Every API token, secrets left out, with its state.
pub fn list(data: &Path, now_ms: u64) -> Result<Vec<Value>, ErrorBody> {
    Ok(load(data)?
        .tokens
        .iter()
        .map(|t| {
            json!({"name": t.name, "role": API_ROLE, "state": t.state(now_ms),
                   "created_at": t.created_ms, "expires_at": t.expires_ms,
                   "revoked_at": t.revoked_ms})
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_until_they_expire_or_are_revoked() {
        let dir = tempfile::tempdir().expect("dir");
        let made = create(dir.path(), "ci", 1_000, 10).expect("create");
        let secret = made["token"].as_str().expect("secret").to_owned();
        assert!(secret.starts_with(TOKEN_PREFIX));
        assert!(verify(dir.path(), &secret, 500));
        assert!(!verify(dir.path(), &secret, 1_010), "expired");
        assert!(!verify(dir.path(), "palm_api_nope", 500));
        assert!(
            create(dir.path(), "ci", 1_000, 20).is_err(),
            "a live name is taken"
        );
        let text = std::fs::read_to_string(dir.path().join("api-tokens.json")).expect("book");
        assert!(!text.contains(&secret), "the secret is never stored");
        assert!(revoke(dir.path(), "ci", 600).expect("revoke").is_some());
        assert!(!verify(dir.path(), &secret, 700));
        assert_eq!(revoke(dir.path(), "someone", 600).expect("none"), None);
        assert_eq!(list(dir.path(), 700).expect("list")[0]["state"], "revoked");
    }
}
