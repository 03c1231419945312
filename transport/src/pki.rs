//! The tree's public-key infrastructure: the tree CA (root only), node identities,
//! certificate issuing, fingerprints and node ids. Keys are ECDSA P-256 (rcgen on ring).
//!
//! Every certificate carries the fixed name [`crate::SERVER_NAME`]: identity is the
//! certificate's key and the CA's signature, not a host name. Certificates do not expire
//! (rcgen's default validity); a compromised or retired node is *revoked*, by name and by
//! certificate fingerprint, and every verifier consults the revocation set.
//!
//! Files live in the node's tree directory ([`TreeFiles`]), written atomically (temp
//! file, fsync, rename), private keys owner-only.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, SerialNumber,
    SignatureAlgorithm,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A node's place in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The top: holds the tree CA, accepts children, issues tokens.
    Root,
    /// A child that is home for its own sector.
    Realm,
    /// A leaf.
    Edge,
}

impl Role {
    /// Parses `root`, `realm` or `edge`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "root" => Some(Role::Root),
            "realm" => Some(Role::Realm),
            "edge" => Some(Role::Edge),
            _ => None,
        }
    }

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Realm => "realm",
            Role::Edge => "edge",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// SHA-256 of a certificate's DER.
pub type Fingerprint = [u8; 32];

/// The fingerprint of a DER certificate.
pub fn fingerprint(der: &[u8]) -> Fingerprint {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Bytes of the key hash shown in a node id (80 bits: 16 base32 characters).
const NODE_ID_BYTES: usize = 10;

/// The id of the tree whose CA certificate is `ca_cert`.
pub fn tree_id(ca_cert: &[u8]) -> String {
    hex(&fingerprint(ca_cert)[..8])
}

/// A node's id: the first 80 bits of SHA-256 of its raw public key, base32 (16 chars).
pub fn node_id(public_key_raw: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, public_key_raw);
    let bytes = &digest.as_ref()[..NODE_ID_BYTES];
    let mut out = String::with_capacity(16);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &byte in bytes {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(BASE32[((acc >> bits) & 31) as usize] as char);
        }
    }
    out
}

/// Why a key or certificate could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused (bad key, bad parameters).
    #[error("certificate error: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A file of the tree directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file holds something unexpected.
    #[error("{path}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A public key sent for signing is not an uncompressed P-256 point.
    #[error("public key is not an uncompressed P-256 point ({0} bytes)")]
    BadPublicKey(usize),
}

/// Length of an uncompressed P-256 point.
const P256_POINT_LEN: usize = 65;

/// A raw P-256 public key sent by a child for signing.
struct RawP256<'a>(&'a [u8]);

impl PublicKeyData for RawP256<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes[0] &= 0x7f; // positive
    SerialNumber::from_slice(&bytes)
}

/// The tree CA: signs every node certificate of the tree. Held by the root only.
pub struct TreeCa {
    key: KeyPair,
    cert: CertificateDer<'static>,
    /// Rebuilt from the key on load: the issuer's name must match the certificate's.
    params: CertificateParams,
}

fn ca_params(key_id: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("palm tree CA {key_id}"));
    params.distinguished_name = dn;
    // Path length 0: node certificates cannot sign further certificates.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

impl TreeCa {
    /// A fresh CA (new key, self-signed certificate).
    pub fn generate() -> Result<TreeCa, PkiError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let key_id = node_id(key.public_key_raw());
        let mut params = ca_params(&key_id);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?.der().clone();
        Ok(TreeCa {
            key,
            cert,
            params: ca_params(&key_id),
        })
    }

    /// A CA from its stored key (PKCS#8 DER) and certificate (DER).
    pub fn from_der(key_der: &[u8], cert_der: Vec<u8>) -> Result<TreeCa, PkiError> {
        let key = KeyPair::try_from(key_der)?;
        let key_id = node_id(key.public_key_raw());
        Ok(TreeCa {
            key,
            cert: CertificateDer::from(cert_der),
            params: ca_params(&key_id),
        })
    }

    /// The CA certificate.
    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The CA certificate's fingerprint (what join tokens pin).
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }

    /// The tree's id: the first 64 bits of the CA certificate's fingerprint, hex. Every
    /// node of the tree can compute it from the CA certificate it holds ([`tree_id`]).
    pub fn tree_id(&self) -> String {
        tree_id(&self.cert)
    }

    /// The CA key, PKCS#8 DER (to store).
    pub fn key_der(&self) -> Vec<u8> {
        self.key.serialize_der()
    }

    /// Signs a node certificate for `name` in `role` over `public_key_raw` (an
    /// uncompressed P-256 point).
    pub fn issue(
        &self,
        name: &str,
        role: Role,
        public_key_raw: &[u8],
    ) -> Result<CertificateDer<'static>, PkiError> {
        if public_key_raw.len() != P256_POINT_LEN || public_key_raw.first() != Some(&4) {
            return Err(PkiError::BadPublicKey(public_key_raw.len()));
        }
        let params = node_params(name, role)?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&RawP256(public_key_raw), &issuer)?;
        Ok(cert.der().clone())
    }

    /// The root's own identity, signed by this CA.
    pub fn issue_identity(&self, name: &str) -> Result<Identity, PkiError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = self.issue(name, Role::Root, key.public_key_raw())?;
        Ok(Identity {
            key,
            cert,
            ca: self.cert.clone(),
        })
    }
}

fn node_params(name: &str, role: Role) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(vec![crate::SERVER_NAME.to_owned()])?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, format!("palm {role}"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.serial_number = Some(random_serial());
    Ok(params)
}

/// A node's key pair, its certificate and the tree CA's certificate.
pub struct Identity {
    key: KeyPair,
    cert: CertificateDer<'static>,
    ca: CertificateDer<'static>,
}

impl Identity {
    /// Builds an identity from parts (the certificate must be over `key`).
    pub fn new(key: KeyPair, cert: CertificateDer<'static>, ca: CertificateDer<'static>) -> Self {
        Identity { key, cert, ca }
    }

    /// A fresh key pair for enrollment.
    pub fn generate_key() -> Result<KeyPair, PkiError> {
        Ok(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?)
    }

    /// This node's certificate.
    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The tree CA's certificate.
    pub fn ca(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// The certificate chain to present: this node's certificate, then the CA's.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.cert.clone(), self.ca.clone()]
    }

    /// The private key, for rustls.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.serialize_der()))
    }

    /// This node's id.
    pub fn node_id(&self) -> String {
        node_id(self.key.public_key_raw())
    }

    /// This node's certificate fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }
}

/// The files of a node's tree directory (`DATA/tree/`).
///
/// | file | who | what |
/// |---|---|---|
/// | `ca.key.der`, `ca.cert.der` | root | the tree CA |
/// | `node.key.der`, `node.cert.der` | every node | this node's identity |
/// | `tree-ca.cert.der` | every node | the tree CA's certificate |
/// | `node.json` | every node | name, role, parent address |
/// | `trust.json` | root | tokens, enrolled children, revocations |
/// | `children.json` | realm with `--listen` | its children, the tree's revocations ([`crate::relay::ChildBook`]) |
#[derive(Clone, Debug)]
pub struct TreeFiles {
    dir: PathBuf,
}

/// What a node remembers about its place in the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Node name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// The parent's address (`HOST:PORT`), for children.
    #[serde(default)]
    pub parent: Option<String>,
    /// The tree's id.
    pub tree_id: String,
}

impl TreeFiles {
    /// The tree directory under a data directory.
    pub fn new(data: &Path) -> TreeFiles {
        TreeFiles {
            dir: data.join("tree"),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A file in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// True when this node has an identity (it is a root or an enrolled child).
    pub fn has_identity(&self) -> bool {
        self.path("node.cert.der").is_file() && self.path("node.key.der").is_file()
    }

    /// True when this directory holds a tree CA (it is a root).
    pub fn has_ca(&self) -> bool {
        self.path("ca.key.der").is_file()
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, PkiError> {
        let path = self.path(name);
        std::fs::read(&path).map_err(|source| PkiError::Io { path, source })
    }

    /// Writes a file atomically; `secret` files are owner-only.
    pub fn write(&self, name: &str, bytes: &[u8], secret: bool) -> Result<(), PkiError> {
        let path = self.path(name);
        write_atomic(&self.dir, &path, bytes, secret)
            .map_err(|source| PkiError::Io { path, source })
    }

    /// Loads the tree CA.
    pub fn load_ca(&self) -> Result<TreeCa, PkiError> {
        TreeCa::from_der(&self.read("ca.key.der")?, self.read("ca.cert.der")?)
    }

    /// Stores the tree CA.
    pub fn save_ca(&self, ca: &TreeCa) -> Result<(), PkiError> {
        self.write("ca.key.der", &ca.key_der(), true)?;
        self.write("ca.cert.der", ca.cert(), false)
    }

    /// Loads this node's identity.
    pub fn load_identity(&self) -> Result<Identity, PkiError> {
        let key = KeyPair::try_from(self.read("node.key.der")?.as_slice())?;
        let cert = CertificateDer::from(self.read("node.cert.der")?);
        let ca = CertificateDer::from(self.read("tree-ca.cert.der")?);
        Ok(Identity { key, cert, ca })
    }

    /// Stores this node's identity (CA certificate first, key, then the certificate last:
    /// `has_identity` is true only once everything is there).
    pub fn save_identity(&self, identity: &Identity) -> Result<(), PkiError> {
        self.write("tree-ca.cert.der", identity.ca(), false)?;
        self.write("node.key.der", &identity.key.serialize_der(), true)?;
        self.write("node.cert.der", identity.cert(), false)
    }

    /// Loads `node.json`.
    pub fn load_record(&self) -> Result<NodeRecord, PkiError> {
        let path = self.path("node.json");
        serde_json::from_slice(&self.read("node.json")?).map_err(|e| PkiError::Corrupt {
            path,
            detail: e.to_string(),
        })
    }

    /// Stores `node.json`.
    pub fn save_record(&self, record: &NodeRecord) -> Result<(), PkiError> {
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| PkiError::Corrupt {
            path: self.path("node.json"),
            detail: e.to_string(),
        })?;
        self.write("node.json", &bytes, false)
    }
}

/// Writes `path` atomically: a temporary file in `dir`, fsync, rename, fsync of `dir`.
pub fn write_atomic(dir: &Path, path: &Path, bytes: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(if secret { 0o600 } else { 0o644 })
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_16_base32_chars() {
        let id = node_id(b"some key");
        assert_eq!(id.len(), 16);
        assert!(id.chars().all(|c| BASE32.contains(&(c as u8))));
        assert_ne!(id, node_id(b"another key"));
    }

    #[test]
    fn ca_round_trips_through_files_and_signs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = TreeFiles::new(dir.path());
        let ca = TreeCa::generate().expect("ca");
        files.save_ca(&ca).expect("save");
        let loaded = files.load_ca().expect("load");
        assert_eq!(loaded.fingerprint(), ca.fingerprint());
        assert_eq!(loaded.tree_id(), ca.tree_id());
        let identity = loaded.issue_identity("root").expect("identity");
        files.save_identity(&identity).expect("save identity");
        assert!(files.has_identity());
        let again = files.load_identity().expect("load identity");
        assert_eq!(again.node_id(), identity.node_id());
        assert!(matches!(
            ca.issue("x", Role::Edge, &[1, 2, 3]),
            Err(PkiError::BadPublicKey(3))
        ));
    }
}
