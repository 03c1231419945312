//! Join tokens and the root's trust book: who may enroll, who did, who is revoked.
//!
//! A join token is `palm1.` + base64url(postcard([`JoinToken`])). It carries a random id
//! and secret, the child's name and role, an expiry and the tree CA's fingerprint (so the
//! child can verify it talks to the right root before it sends anything). The root keeps
//! only the secret's SHA-256; a token is valid once, before its expiry, for the name and
//! role it was issued for, while neither the token nor the name is revoked.
//!
//! [`Authority`] is the root's side: it issues tokens, enrolls children (signs their
//! certificates) and revokes them. Every change is written to `trust.json` atomically
//! *before* it takes effect, so a token consumed is consumed across crashes.

use crate::pki::{Fingerprint, PkiError, Role, TreeCa, fingerprint, hex, node_id, write_atomic};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// Prefix of the token text (and its format version).
pub const TOKEN_PREFIX: &str = "palm1.";

/// Longest node name.
pub const NAME_LEN_MAX: usize = 64;

/// Longest token lifetime (30 days).
pub const TOKEN_TTL_MS_MAX: u64 = 30 * 24 * 3600 * 1000;

/// How long the root remembers a token that can no longer enroll (used, expired or
/// revoked) after it stopped being usable, so a late attempt still hears why (ms):
/// 7 days. Older records are pruned when a token is created.
pub const TOKEN_RECORD_KEEP_MS: u64 = 7 * 24 * 3600 * 1000;

/// Tokens that can still enroll, at most: a root asked for more refuses until some are
/// used, expire or are revoked.
pub const LIVE_TOKENS_MAX: usize = 10_000;

/// Longest token text accepted (far above any real token; bounds the decode).
const TOKEN_TEXT_LEN_MAX: usize = 1024;

/// What a join token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinToken {
    /// Random id (the root's key for its record).
    pub id: [u8; 16],
    /// Random secret (the root keeps its hash).
    pub secret: [u8; 16],
    /// The child's name.
    pub name: String,
    /// The child's role.
    pub role: Role,
    /// Expiry, ms since the epoch.
    pub expires_ms: u64,
    /// SHA-256 of the tree CA's certificate.
    pub ca_fingerprint: Fingerprint,
}

/// Why a token text or a token request is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The text is not a Palm join token.
    #[error("not a palm join token: {0}")]
    Malformed(String),
    /// The name is empty, too long or has characters other than `A-Za-z0-9._-`.
    #[error("invalid node name `{0}`: use 1-64 of A-Z a-z 0-9 . _ -")]
    InvalidName(String),
    /// Tokens are for realms and edges.
    #[error("a token cannot enroll a {0}; use realm or edge")]
    InvalidRole(Role),
    /// The lifetime is zero or too long.
    #[error("token lifetime {0} ms is out of range (1 ms to 30 days)")]
    InvalidTtl(u64),
    /// The name was revoked; it stays revoked.
    #[error("name `{0}` is revoked; enroll the node under another name")]
    NameRevoked(String),
    /// Nothing is known under this name.
    #[error("no child and no token named `{0}`")]
    UnknownName(String),
    /// The trust book could not be written.
    #[error("cannot record the change: {0}")]
    Persist(String),
    /// Too many tokens can still enroll.
    #[error(
        "{0} tokens can still enroll (at most {LIVE_TOKENS_MAX}); revoke or wait for some to expire"
    )]
    TooManyLive(usize),
}

/// Why an enrollment was refused. The child sees the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnrollRefusal {
    /// The token was not issued by this root (unknown id, wrong secret, altered fields,
    /// another tree's fingerprint, or not a token at all).
    #[error("forged token: {0}")]
    Forged(String),
    /// The token expired.
    #[error("expired token: it expired at {expires_ms} (ms since the epoch)")]
    Expired {
        /// When it expired.
        expires_ms: u64,
    },
    /// The token was used already.
    #[error("reused token: it was used at {used_ms} (ms since the epoch); tokens are one-time")]
    Reused {
        /// When it was used.
        used_ms: u64,
    },
    /// The token or its name was revoked.
    #[error("revoked: {0}")]
    Revoked(String),
    /// The request is not acceptable (bad public key).
    #[error("invalid enrollment request: {0}")]
    Invalid(String),
    /// The root failed (could not sign or record).
    #[error("the root could not enroll: {0}")]
    Internal(String),
    /// A realm could not reach the root to relay the enrollment (enrolling under a realm
    /// needs the path to the root up; running children do not).
    #[error("the root is unreachable: {0}")]
    Unavailable(String),
    /// A refusal decided further up the tree and relayed down by a realm: the kind and
    /// the text are the deciding node's, unchanged, so the child reads what the root said.
    #[error("{reason}")]
    Relayed {
        /// The deciding node's kind (`forged`, `reused`, ...).
        kind: String,
        /// The deciding node's text.
        reason: String,
    },
}

impl EnrollRefusal {
    /// A short machine-readable kind.
    pub fn kind(&self) -> &str {
        match self {
            EnrollRefusal::Unavailable(_) => "unavailable",
            EnrollRefusal::Relayed { kind, .. } => kind,
            EnrollRefusal::Forged(_) => "forged",
            EnrollRefusal::Expired { .. } => "expired",
            EnrollRefusal::Reused { .. } => "reused",
            EnrollRefusal::Revoked(_) => "revoked",
            EnrollRefusal::Invalid(_) => "invalid",
            EnrollRefusal::Internal(_) => "internal",
        }
    }
}

impl JoinToken {
    /// The token as text.
    pub fn encode(&self) -> String {
        let bytes = postcard::to_stdvec(self).expect("a join token always encodes");
        format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Parses token text.
    pub fn decode(text: &str) -> Result<JoinToken, TokenError> {
        let text = text.trim();
        if text.len() > TOKEN_TEXT_LEN_MAX {
            return Err(TokenError::Malformed(format!("{} bytes", text.len())));
        }
        let body = text.strip_prefix(TOKEN_PREFIX).ok_or_else(|| {
            TokenError::Malformed(format!("it does not start with `{TOKEN_PREFIX}`"))
        })?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|e| TokenError::Malformed(e.to_string()))?;
        match postcard::take_from_bytes::<JoinToken>(&bytes) {
            Ok((token, [])) => Ok(token),
            Ok(_) => Err(TokenError::Malformed("trailing bytes".into())),
            Err(e) => Err(TokenError::Malformed(e.to_string())),
        }
    }
}

/// A fresh name for a child whose token was created without one: `ROLE-xxxxxx`.
pub fn random_name(role: Role) -> String {
    let bytes: [u8; 3] = random();
    format!("{role}-{}", hex(&bytes))
}

/// Checks a node name.
pub fn check_name(name: &str) -> Result<(), TokenError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(TokenError::InvalidName(name.to_owned()))
    }
}

/// A token as the root remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Child name.
    pub name: String,
    /// Child role.
    pub role: Role,
    /// Issued at (ms).
    pub created_ms: u64,
    /// Expires at (ms).
    pub expires_ms: u64,
    /// SHA-256 of the secret, hex.
    pub secret_sha256: String,
    /// When it was used, if it was.
    #[serde(default)]
    pub used_ms: Option<u64>,
    /// When it was revoked, if it was.
    #[serde(default)]
    pub revoked_ms: Option<u64>,
}

/// Where a token stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// It can still enroll its child.
    Live,
    /// It enrolled its child.
    Used,
    /// Its lifetime ended unused.
    Expired,
    /// It was revoked unused.
    Revoked,
}

impl TokenState {
    /// Its name in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenState::Live => "live",
            TokenState::Used => "used",
            TokenState::Expired => "expired",
            TokenState::Revoked => "revoked",
        }
    }
}

impl TokenRecord {
    /// Where the token stands at `now_ms`.
    pub fn state(&self, now_ms: u64) -> TokenState {
        match (self.used_ms, self.revoked_ms) {
            (Some(_), _) => TokenState::Used,
            (None, Some(_)) => TokenState::Revoked,
            (None, None) if now_ms >= self.expires_ms => TokenState::Expired,
            (None, None) => TokenState::Live,
        }
    }

    /// When it stopped being able to enroll, if it did.
    fn ended_ms(&self, now_ms: u64) -> Option<u64> {
        match self.state(now_ms) {
            TokenState::Live => None,
            TokenState::Used => self.used_ms,
            TokenState::Revoked => self.revoked_ms,
            TokenState::Expired => Some(self.expires_ms),
        }
    }
}

/// Drops the records of tokens that stopped being usable more than
/// [`TOKEN_RECORD_KEEP_MS`] ago; returns how many.
pub fn prune_tokens(book: &mut TrustBook, now_ms: u64) -> usize {
    let before = book.tokens.len();
    book.tokens.retain(|_, token| {
        token
            .ended_ms(now_ms)
            .is_none_or(|ended| now_ms.saturating_sub(ended) <= TOKEN_RECORD_KEEP_MS)
    });
    before - book.tokens.len()
}

/// An enrolled child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRecord {
    /// Child name.
    pub name: String,
    /// Child role.
    pub role: Role,
    /// Its node id.
    pub node_id: String,
    /// Enrolled at (ms).
    pub enrolled_ms: u64,
    /// When it was revoked, if it was.
    #[serde(default)]
    pub revoked_ms: Option<u64>,
    /// The realm it was enrolled under (through the relay), if not the root itself: it
    /// links to that realm, never to the root directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// The root's trust state (`trust.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustBook {
    /// Tokens by id (hex).
    pub tokens: BTreeMap<String, TokenRecord>,
    /// Enrolled children by certificate fingerprint (hex).
    pub children: BTreeMap<String, ChildRecord>,
    /// Names revoked for good.
    pub revoked_names: BTreeSet<String>,
}

/// What an enrollment yields: the child's certificate and the CA's.
#[derive(Clone, Debug)]
pub struct Grant {
    /// The child's certificate.
    pub cert: CertificateDer<'static>,
    /// The tree CA's certificate.
    pub ca: CertificateDer<'static>,
    /// The child's record.
    pub child: ChildRecord,
}

/// What a revocation did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Revoked {
    /// The name.
    pub name: String,
    /// Certificates revoked.
    pub certificates: usize,
    /// Unused tokens revoked.
    pub tokens: usize,
}

/// Fingerprints of revoked certificates, shared with the TLS verifier.
pub type RevokedSet = Arc<RwLock<HashSet<Fingerprint>>>;

/// Everything the root has revoked: certificates by fingerprint and names for good. It
/// only grows, so a realm merges it (a union) and the order lists arrive in is moot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationList {
    /// Revoked certificates.
    pub certificates: Vec<Fingerprint>,
    /// Revoked names.
    pub names: Vec<String>,
}

/// The root's authority: the CA and the trust book. See the module docs.
pub struct Authority {
    ca: TreeCa,
    book: Mutex<TrustBook>,
    path: Option<PathBuf>,
    revoked: RevokedSet,
    mirror: Option<Mirror>,
}

/// Where else a changed trust book must be durable before the change is answered (a
/// replicated root's shared store); an error refuses the change.
pub type Mirror = Box<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // SystemRandom reads the OS generator; it fails only if the OS cannot give entropy.
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .expect("the OS random generator works");
    bytes
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

pub(crate) fn parse_hex32(text: &str) -> Option<Fingerprint> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Authority {
    /// An authority over `ca` whose book persists to `path` (`None`: in memory, tests).
    pub fn new(ca: TreeCa, book: TrustBook, path: Option<PathBuf>) -> Authority {
        let revoked: HashSet<Fingerprint> = book
            .children
            .iter()
            .filter(|(_, c)| c.revoked_ms.is_some() || book.revoked_names.contains(&c.name))
            .filter_map(|(fp, _)| parse_hex32(fp))
            .collect();
        Authority {
            ca,
            book: Mutex::new(book),
            path,
            revoked: Arc::new(RwLock::new(revoked)),
            mirror: None,
        }
    }

    /// Every change of the book is also handed to `mirror` (after its file is written)
    /// and refused if the mirror fails.
    pub fn mirrored(mut self, mirror: Mirror) -> Authority {
        self.mirror = Some(mirror);
        self
    }

    /// Loads the book from `path` (empty if the file does not exist).
    pub fn load_book(path: &std::path::Path) -> Result<TrustBook, PkiError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| PkiError::Corrupt {
                path: path.to_owned(),
                detail: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrustBook::default()),
            Err(source) => Err(PkiError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// The CA.
    pub fn ca(&self) -> &TreeCa {
        &self.ca
    }

    /// The revocation set the verifier consults.
    pub fn revoked_set(&self) -> RevokedSet {
        Arc::clone(&self.revoked)
    }

    /// A copy of the book.
    pub fn book(&self) -> TrustBook {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrustBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, book: &TrustBook) -> Result<(), String> {
        if self.path.is_none() && self.mirror.is_none() {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(book).map_err(|e| e.to_string())?;
        if let Some(path) = &self.path {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            write_atomic(dir, path, &bytes, true)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        match &self.mirror {
            Some(mirror) => mirror(&bytes),
            None => Ok(()),
        }
    }

    /// Issues a one-time join token for a child `name` in `role`, valid for `ttl_ms`.
    pub fn create_token(
        &self,
        name: &str,
        role: Role,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<JoinToken, TokenError> {
        check_name(name)?;
        if role == Role::Root {
            return Err(TokenError::InvalidRole(role));
        }
        if ttl_ms == 0 || ttl_ms > TOKEN_TTL_MS_MAX {
            return Err(TokenError::InvalidTtl(ttl_ms));
        }
        let mut book = self.lock();
        if book.revoked_names.contains(name) {
            return Err(TokenError::NameRevoked(name.to_owned()));
        }
        let token = JoinToken {
            id: random(),
            secret: random(),
            name: name.to_owned(),
            role,
            expires_ms: now_ms.saturating_add(ttl_ms),
            ca_fingerprint: self.ca.fingerprint(),
        };
        let mut next = book.clone();
        prune_tokens(&mut next, now_ms);
        let live = next
            .tokens
            .values()
            .filter(|t| t.state(now_ms) == TokenState::Live)
            .count();
        if live >= LIVE_TOKENS_MAX {
            return Err(TokenError::TooManyLive(live));
        }
        next.tokens.insert(
            hex(&token.id),
            TokenRecord {
                name: name.to_owned(),
                role,
                created_ms: now_ms,
                expires_ms: token.expires_ms,
                secret_sha256: sha256_hex(&token.secret),
                used_ms: None,
                revoked_ms: None,
            },
        );
        self.persist(&next).map_err(TokenError::Persist)?;
        *book = next;
        Ok(token)
    }

    /// Checks a token and signs the child's certificate over `public_key_raw`. The token
    /// is marked used (durably) before the certificate is returned.
    pub fn enroll(
        &self,
        token_text: &str,
        public_key_raw: &[u8],
        now_ms: u64,
    ) -> Result<Grant, EnrollRefusal> {
        self.enroll_under(token_text, public_key_raw, None, now_ms)
    }

    /// [`Authority::enroll`] for a node whose parent is the realm `parent` (`None`: the
    /// root itself). The same checks and refusals; the record remembers the parent so the
    /// root admits only its own children.
    pub fn enroll_under(
        &self,
        token_text: &str,
        public_key_raw: &[u8],
        parent: Option<&str>,
        now_ms: u64,
    ) -> Result<Grant, EnrollRefusal> {
        let token =
            JoinToken::decode(token_text).map_err(|e| EnrollRefusal::Forged(e.to_string()))?;
        if token.ca_fingerprint != self.ca.fingerprint() {
            return Err(EnrollRefusal::Forged("it names another tree's CA".into()));
        }
        let mut book = self.lock();
        let id = hex(&token.id);
        let Some(record) = book.tokens.get(&id) else {
            return Err(EnrollRefusal::Forged("this root never issued it".into()));
        };
        // Compare hashes, not secrets: equal-length hex of a hash leaks nothing useful
        // through timing.
        if record.secret_sha256 != sha256_hex(&token.secret) {
            return Err(EnrollRefusal::Forged("its secret does not match".into()));
        }
        if record.name != token.name || record.role != token.role {
            return Err(EnrollRefusal::Forged("its name or role was altered".into()));
        }
        if record.revoked_ms.is_some() || book.revoked_names.contains(&record.name) {
            return Err(EnrollRefusal::Revoked(format!(
                "the token for `{}` was revoked",
                record.name
            )));
        }
        if let Some(used_ms) = record.used_ms {
            return Err(EnrollRefusal::Reused { used_ms });
        }
        if now_ms >= record.expires_ms {
            return Err(EnrollRefusal::Expired {
                expires_ms: record.expires_ms,
            });
        }
        let cert = self
            .ca
            .issue(&record.name, record.role, public_key_raw)
            .map_err(|e| match e {
                PkiError::BadPublicKey(_) => EnrollRefusal::Invalid(e.to_string()),
                other => EnrollRefusal::Internal(other.to_string()),
            })?;
        let child = ChildRecord {
            name: record.name.clone(),
            role: record.role,
            node_id: node_id(public_key_raw),
            enrolled_ms: now_ms,
            revoked_ms: None,
            parent: parent.map(str::to_owned),
        };
        let mut next = book.clone();
        if let Some(used) = next.tokens.get_mut(&id) {
            used.used_ms = Some(now_ms);
        }
        next.children
            .insert(hex(&fingerprint(&cert)), child.clone());
        self.persist(&next).map_err(EnrollRefusal::Internal)?;
        *book = next;
        Ok(Grant {
            cert,
            ca: self.ca.cert().clone(),
            child,
        })
    }

    /// Revokes `name`: its certificates and unused tokens, and the name itself for good.
    pub fn revoke(&self, name: &str, now_ms: u64) -> Result<Revoked, TokenError> {
        let mut book = self.lock();
        let mut next = book.clone();
        let mut certificates = Vec::new();
        for (fp, child) in next.children.iter_mut() {
            if child.name == name && child.revoked_ms.is_none() {
                child.revoked_ms = Some(now_ms);
                certificates.extend(parse_hex32(fp));
            }
        }
        let mut tokens = 0;
        for token in next.tokens.values_mut() {
            if token.name == name && token.used_ms.is_none() && token.revoked_ms.is_none() {
                token.revoked_ms = Some(now_ms);
                tokens += 1;
            }
        }
        let known = next.children.values().any(|c| c.name == name)
            || next.tokens.values().any(|t| t.name == name);
        if !known {
            return Err(TokenError::UnknownName(name.to_owned()));
        }
        next.revoked_names.insert(name.to_owned());
        self.persist(&next).map_err(TokenError::Persist)?;
        *book = next;
        let mut revoked = self.revoked.write().unwrap_or_else(|p| p.into_inner());
        revoked.extend(certificates.iter().copied());
        Ok(Revoked {
            name: name.to_owned(),
            certificates: certificates.len(),
            tokens,
        })
    }

    /// The enrolled child holding the certificate with this fingerprint.
    pub fn child(&self, cert_fingerprint: &Fingerprint) -> Option<ChildRecord> {
        self.lock().children.get(&hex(cert_fingerprint)).cloned()
    }

    /// Everything revoked in the tree, for the realms (they refuse what the root refuses).
    pub fn revocations(&self) -> RevocationList {
        let mut certificates: Vec<Fingerprint> = self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        certificates.sort_unstable();
        let names = self.lock().revoked_names.iter().cloned().collect();
        RevocationList {
            certificates,
            names,
        }
    }

    /// True when the certificate or its holder's name is revoked.
    pub fn is_revoked(&self, cert_fingerprint: &Fingerprint) -> bool {
        if self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(cert_fingerprint)
        {
            return true;
        }
        let book = self.lock();
        book.children
            .get(&hex(cert_fingerprint))
            .is_some_and(|c| c.revoked_ms.is_some() || book.revoked_names.contains(&c.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::Identity;

    fn authority() -> Authority {
        Authority::new(TreeCa::generate().expect("ca"), TrustBook::default(), None)
    }

    fn key() -> Vec<u8> {
        Identity::generate_key()
            .expect("key")
            .public_key_raw()
            .to_vec()
    }

    #[test]
    fn token_text_round_trips() {
        let auth = authority();
        let token = auth
            .create_token("edge-1", Role::Edge, 60_000, 1_000)
            .expect("token");
        let text = token.encode();
        assert!(text.starts_with(TOKEN_PREFIX));
        assert_eq!(JoinToken::decode(&text), Ok(token));
        assert!(matches!(
            JoinToken::decode("palm1.!!!"),
            Err(TokenError::Malformed(_))
        ));
        assert!(matches!(
            JoinToken::decode("hello"),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn dead_tokens_are_pruned_after_a_week_and_live_ones_never() {
        let auth = authority();
        let day = 24 * 3600 * 1000;
        auth.create_token("old", Role::Edge, 60_000, 0)
            .expect("token");
        auth.create_token("live", Role::Edge, 20 * day, 0)
            .expect("token");
        assert_eq!(auth.book().tokens.len(), 2);
        // Eight days later, `old` expired a week and a day ago: creating a token prunes it.
        auth.create_token("new", Role::Edge, 60_000, 8 * day)
            .expect("token");
        let names: Vec<String> = auth
            .book()
            .tokens
            .values()
            .map(|t| t.name.clone())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"live".to_owned()) && names.contains(&"new".to_owned()));
        let states: Vec<&str> = auth
            .book()
            .tokens
            .values()
            .map(|t| t.state(8 * day + 60_001).as_str())
            .collect();
        assert!(
            states.contains(&"live") && states.contains(&"expired"),
            "{states:?}"
        );
    }

    #[test]
    fn every_refusal_has_its_reason() {
        let auth = authority();
        let now = 1_000_000;
        let token = auth
            .create_token("edge-1", Role::Edge, 60_000, now)
            .expect("token");
        let text = token.encode();
        // Forged: random id, altered name, another tree, garbage.
        let mut forged = token.clone();
        forged.id = [9; 16];
        assert_eq!(
            auth.enroll(&forged.encode(), &key(), now)
                .unwrap_err()
                .kind(),
            "forged"
        );
        let mut altered = token.clone();
        altered.name = "edge-2".into();
        assert_eq!(
            auth.enroll(&altered.encode(), &key(), now)
                .unwrap_err()
                .kind(),
            "forged"
        );
        let mut other_tree = token.clone();
        other_tree.ca_fingerprint = [0; 32];
        assert_eq!(
            auth.enroll(&other_tree.encode(), &key(), now)
                .unwrap_err()
                .kind(),
            "forged"
        );
        let mut wrong_secret = token.clone();
        wrong_secret.secret = [1; 16];
        assert_eq!(
            auth.enroll(&wrong_secret.encode(), &key(), now)
                .unwrap_err()
                .kind(),
            "forged"
        );
        assert_eq!(
            auth.enroll("nope", &key(), now).unwrap_err().kind(),
            "forged"
        );
        // Expired.
        assert_eq!(
            auth.enroll(&text, &key(), now + 60_000).unwrap_err(),
            EnrollRefusal::Expired {
                expires_ms: now + 60_000
            }
        );
        // A bad key is refused without consuming the token.
        assert_eq!(
            auth.enroll(&text, &[4, 1], now).unwrap_err().kind(),
            "invalid"
        );
        // Accepted once, then reused.
        let grant = auth.enroll(&text, &key(), now + 1).expect("enroll");
        assert_eq!(grant.child.name, "edge-1");
        assert_eq!(
            auth.enroll(&text, &key(), now + 2).unwrap_err(),
            EnrollRefusal::Reused { used_ms: now + 1 }
        );
        // Revoked: the certificate, pending tokens and the name.
        let pending = auth
            .create_token("edge-1", Role::Edge, 60_000, now)
            .expect("token");
        let report = auth.revoke("edge-1", now + 3).expect("revoke");
        assert_eq!((report.certificates, report.tokens), (1, 1));
        assert!(auth.is_revoked(&fingerprint(&grant.cert)));
        assert_eq!(
            auth.enroll(&pending.encode(), &key(), now + 4)
                .unwrap_err()
                .kind(),
            "revoked"
        );
        assert_eq!(
            auth.create_token("edge-1", Role::Edge, 60_000, now),
            Err(TokenError::NameRevoked("edge-1".into()))
        );
        assert_eq!(
            auth.revoke("ghost", now),
            Err(TokenError::UnknownName("ghost".into()))
        );
    }

    #[test]
    fn requests_are_checked() {
        let auth = authority();
        assert!(matches!(
            auth.create_token("", Role::Edge, 1, 0),
            Err(TokenError::InvalidName(_))
        ));
        assert!(matches!(
            auth.create_token("a b", Role::Edge, 1, 0),
            Err(TokenError::InvalidName(_))
        ));
        assert_eq!(
            auth.create_token("r", Role::Root, 1, 0),
            Err(TokenError::InvalidRole(Role::Root))
        );
        assert_eq!(
            auth.create_token("e", Role::Edge, 0, 0),
            Err(TokenError::InvalidTtl(0))
        );
    }

    #[test]
    fn the_book_persists_and_revocations_survive_a_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trust.json");
        let ca = TreeCa::generate().expect("ca");
        let (key_der, cert_der) = (ca.key_der(), ca.cert().to_vec());
        let auth = Authority::new(ca, TrustBook::default(), Some(path.clone()));
        let token = auth
            .create_token("edge-1", Role::Edge, 60_000, 0)
            .expect("token");
        let grant = auth.enroll(&token.encode(), &key(), 1).expect("enroll");
        auth.revoke("edge-1", 2).expect("revoke");
        let reloaded = Authority::new(
            TreeCa::from_der(&key_der, cert_der).expect("ca"),
            Authority::load_book(&path).expect("book"),
            Some(path),
        );
        assert!(reloaded.is_revoked(&fingerprint(&grant.cert)));
        assert!(
            reloaded
                .revoked_set()
                .read()
                .expect("lock")
                .contains(&fingerprint(&grant.cert))
        );
    }
}
