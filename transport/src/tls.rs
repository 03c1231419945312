//! TLS for tunnels: rustls on the ring provider only, TLS 1.3, ALPN `palm/1`.
//!
//! - [`server_config`]: the parent side. Presents its node certificate (with the CA's).
//!   Client certificates are *offered*, not required: a connection without one may only
//!   enroll. A certificate is accepted only if it chains to the tree CA and is not
//!   revoked ([`TreeClientVerifier`]), checked during every handshake (no session
//!   resumption, which would skip the check).
//! - [`client_config`]: an enrolled child. mTLS; the parent must chain to the tree CA.
//! - [`enroll_client_config`]: a child with a token and no certificate yet. The parent
//!   must present a chain containing the CA certificate whose fingerprint the token pins
//!   ([`PinnedCaVerifier`]), and its certificate must chain to that CA.

use crate::config::LinkConfig;
use crate::pki::{Fingerprint, Identity, fingerprint, hex};
use crate::token::RevokedSet;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use std::sync::Arc;
use tracing::warn;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rustls refused the configuration or a certificate.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// quinn refused the rustls configuration.
    #[error("QUIC crypto configuration: {0}")]
    Quic(String),
}

/// The one crypto provider: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &CertificateDer<'static>) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone())?;
    Ok(Arc::new(roots))
}

/// Accepts client certificates signed by the tree CA and not revoked; lets connections
/// without a certificate through (they may only enroll).
#[derive(Debug)]
pub struct TreeClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    revoked: RevokedSet,
}

impl TreeClientVerifier {
    /// A verifier trusting `ca`, consulting `revoked` on every handshake.
    pub fn new(ca: &CertificateDer<'static>, revoked: RevokedSet) -> Result<Self, TlsError> {
        let inner =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
                .allow_unauthenticated()
                .build()?;
        Ok(TreeClientVerifier { inner, revoked })
    }
}

impl ClientCertVerifier for TreeClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        if self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&fp)
        {
            warn!(certificate = %hex(&fp[..8]), "refused a revoked certificate");
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|err| warn!(%err, "refused a client certificate"))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Verifies the parent during enrollment against the CA fingerprint a token pins.
#[derive(Debug)]
pub struct PinnedCaVerifier {
    pin: Fingerprint,
    provider: Arc<CryptoProvider>,
}

impl PinnedCaVerifier {
    /// A verifier for the tree whose CA certificate has fingerprint `pin`.
    pub fn new(pin: Fingerprint) -> Self {
        PinnedCaVerifier {
            pin,
            provider: provider(),
        }
    }
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(ca) = intermediates.iter().find(|c| fingerprint(c) == self.pin) else {
            return Err(rustls::Error::General(
                "the parent does not hold the tree CA the token names (fingerprint mismatch)"
                    .into(),
            ));
        };
        let ca = ca.clone().into_owned();
        let roots = roots(&ca).map_err(|e| rustls::Error::General(e.to_string()))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots,
            Arc::clone(&self.provider),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        verifier.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls13_server()
-> Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::WantsVerifier>, TlsError> {
    Ok(rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?)
}

fn tls13_client()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?)
}

/// The parent's QUIC server configuration.
pub fn server_config(
    identity: &Identity,
    revoked: RevokedSet,
    link: &LinkConfig,
) -> Result<quinn::ServerConfig, TlsError> {
    let verifier = Arc::new(TreeClientVerifier::new(identity.ca(), revoked)?);
    let mut tls = tls13_server()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain(), identity.private_key())?;
    tls.alpn_protocols = vec![crate::ALPN.to_vec()];
    // No session resumption: a resumed session skips the client certificate check, and
    // a revoked child must be refused on its very next handshake.
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    tls.send_tls13_tickets = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(link.transport()));
    Ok(config)
}

fn quic_client(
    mut tls: rustls::ClientConfig,
    link: &LinkConfig,
) -> Result<quinn::ClientConfig, TlsError> {
    tls.alpn_protocols = vec![crate::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(link.transport()));
    Ok(config)
}

/// An enrolled child's QUIC client configuration (mTLS).
pub fn client_config(
    identity: &Identity,
    link: &LinkConfig,
) -> Result<quinn::ClientConfig, TlsError> {
    let tls = tls13_client()?
        .with_root_certificates(roots(identity.ca())?)
        .with_client_auth_cert(identity.chain(), identity.private_key())?;
    quic_client(tls, link)
}

/// The configuration for enrolling: verify the parent by the token's pin, no client
/// certificate.
pub fn enroll_client_config(
    pin: Fingerprint,
    link: &LinkConfig,
) -> Result<quinn::ClientConfig, TlsError> {
    let tls = tls13_client()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCaVerifier::new(pin)))
        .with_no_client_auth();
    quic_client(tls, link)
}

/// A readable reason for a closed connection, naming TLS alerts the peer sent.
pub fn describe_close(err: &quinn::ConnectionError) -> String {
    use quinn::ConnectionError as E;
    match err {
        E::ConnectionClosed(close) => {
            let code = u64::from(close.error_code);
            // QUIC carries TLS alerts as CRYPTO_ERROR 0x100 + alert.
            if (0x100..0x200).contains(&code) {
                let alert = (code - 0x100) as u8;
                let what = match alert {
                    42 => "bad certificate",
                    44 => "certificate revoked",
                    45 => "certificate expired",
                    46 => "certificate unknown",
                    48 => "unknown CA: the certificate is not signed by the tree CA",
                    116 => "certificate required",
                    120 => "no application protocol (ALPN palm/1 required)",
                    _ => "TLS alert",
                };
                let detail = String::from_utf8_lossy(&close.reason);
                if detail.is_empty() {
                    format!("the peer refused the TLS handshake: {what} (alert {alert})")
                } else {
                    format!("the peer refused the TLS handshake: {what} (alert {alert}: {detail})")
                }
            } else {
                format!("the peer closed the connection: {close}")
            }
        }
        E::ApplicationClosed(close) => {
            format!("closed by peer: {}", String::from_utf8_lossy(&close.reason))
        }
        E::TimedOut => "timed out: no packets from the peer within the idle timeout".into(),
        E::LocallyClosed => "closed locally".into(),
        E::Reset => "the peer reset the connection (it restarted?)".into(),
        E::TransportError(err) => format!("transport error: {err}"),
        E::VersionMismatch => "QUIC version mismatch".into(),
        E::CidsExhausted => "connection ids exhausted".into(),
    }
}
