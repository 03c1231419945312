//! TLS to PostgreSQL, with the meanings libpq gives the URL's `sslmode` and `sslrootcert`,
//! so a URL that works with `psql` works here:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | if the server offers it | not checked |
//! | `require` | always | not checked |
//! | `verify-ca` | always | signed by `sslrootcert` |
//! | `verify-full` | always | signed by `sslrootcert`, and for the host connected to |
//!
//! As with libpq, `prefer` and `require` check the certificate as `verify-ca` does when
//! `sslrootcert` is given. `verify-ca` and `verify-full` need it: a PEM file of the
//! authorities to trust, or `system` for the Mozilla set built into Palm (`webpki-roots`).
//! Left out, it is `~/.postgresql/root.crt` when that file exists, as in libpq (so a
//! `prefer` or `require` URL then checks the certificate too); see
//! [`root_cert_or_default`].
//! Client certificates (`sslcert`, `sslkey`) are refused as not supported rather than
//! ignored. An unchecked certificate still gets its handshake signatures checked: it keeps
//! the link private from a passive listener, not from a server in the middle — which is
//! what `require` means to libpq too.
//!
//! The connector is rustls over tokio-rustls (both already in Palm's build, with the ring
//! provider named explicitly so no process-wide default is needed), adapted to the
//! driver's `MakeTlsConnect` here: the adapters published for it were either unmaintained
//! or pulled in OpenSSL. SCRAM's channel binding is not offered (`channel_binding` none),
//! as with the driver's own `NoTls` clients; the password exchange is SCRAM either way.

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// libpq's `sslmode` words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, the certificate signed by a trusted authority.
    VerifyCa,
    /// TLS, the certificate signed by a trusted authority and naming the host.
    VerifyFull,
}

impl SslMode {
    /// Parses `sslmode`'s value.
    pub fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported (use prefer, which tries TLS first)".into(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full, not {other:?}"
                ));
            }
        })
    }

    /// What the driver is told: whether TLS is tried, and whether it is required.
    pub fn driver(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        }
    }
}

/// The connector a store's connections use (cheap to clone: one shared rustls config).
#[derive(Clone)]
pub struct MakeTls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for MakeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MakeTls").finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The authorities `sslrootcert` names: a PEM file, or `system`.
fn roots(root_cert: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    if root_cert == "system" {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(roots);
    }
    let certs = CertificateDer::pem_file_iter(root_cert)
        .map_err(|e| format!("cannot read sslrootcert {root_cert}: {e}"))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("sslrootcert {root_cert}: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {root_cert}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("sslrootcert {root_cert} holds no certificate"));
    }
    Ok(roots)
}

/// libpq's default `sslrootcert`, under the home directory `home`.
pub const DEFAULT_ROOT_CERT: &str = ".postgresql/root.crt";

/// The `sslrootcert` to use: the one given, else `home`'s `.postgresql/root.crt` when
/// that file exists (libpq's default), else none. `disable` uses none.
pub fn root_cert_or_default(
    mode: SslMode,
    given: Option<String>,
    home: Option<&std::path::Path>,
) -> Option<String> {
    if mode == SslMode::Disable {
        return given;
    }
    given.or_else(|| {
        let default = home?.join(DEFAULT_ROOT_CERT);
        default
            .is_file()
            .then(|| default.to_string_lossy().into_owned())
    })
}

impl MakeTls {
    /// The connector for `mode` with the authorities of `root_cert` (see the module's
    /// header); the error says what is wrong with them.
    pub fn new(mode: SslMode, root_cert: Option<&str>) -> Result<MakeTls, String> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let verify_name = mode == SslMode::VerifyFull;
        let verifier: Arc<dyn ServerCertVerifier> = match root_cert {
            Some(root_cert) => {
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots(root_cert)?),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| format!("sslrootcert {root_cert}: {e}"))?;
                if verify_name {
                    webpki
                } else {
                    Arc::new(AnyName { inner: webpki })
                }
            }
            None if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) => {
                return Err(format!(
                    "sslmode={} needs sslrootcert: a PEM file of the authorities that sign \
                     the server's certificate (by default ~/{DEFAULT_ROOT_CERT}, which is \
                     not there), or `system`",
                    if verify_name {
                        "verify-full"
                    } else {
                        "verify-ca"
                    }
                ));
            }
            None => Arc::new(Unchecked {
                algorithms: provider.signature_verification_algorithms,
            }),
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeTls {
            config: Arc::new(config),
        })
    }
}

/// `verify-ca`: the chain must be good; the name it is for does not matter.
#[derive(Debug)]
struct AnyName {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `prefer` and `require` without `sslrootcert`: any certificate, its handshake signed.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for MakeTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Tls<S>;
    type TlsConnect = Connect;
    type Error = std::io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> std::io::Result<Connect> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{domain:?} is no name a certificate can be for: {e}"),
            )
        })?;
        Ok(Connect {
            config: Arc::clone(&self.config),
            name,
        })
    }
}

/// One connection's handshake.
pub struct Connect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Tls<S>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Tls<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let stream = tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, stream)
                .await?;
            Ok(Tls(stream))
        })
    }
}

/// A connection's TLS stream.
pub struct Tls<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tls<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tls<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Tls<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_words_and_what_they_need() {
        assert_eq!(SslMode::parse("verify-full"), Ok(SslMode::VerifyFull));
        assert!(
            SslMode::parse("allow")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            SslMode::parse("on")
                .unwrap_err()
                .contains("disable, prefer")
        );
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let err = MakeTls::new(mode, None).unwrap_err();
            assert!(err.contains("needs sslrootcert"), "{err}");
        }
        assert!(MakeTls::new(SslMode::Require, None).is_ok());
        assert!(MakeTls::new(SslMode::VerifyFull, Some("system")).is_ok());
        let err = MakeTls::new(SslMode::VerifyCa, Some("/no/such/ca.pem")).unwrap_err();
        assert!(
            err.contains("cannot read sslrootcert /no/such/ca.pem"),
            "{err}"
        );
        let empty = tempfile_with(b"not a certificate\n");
        let err = MakeTls::new(SslMode::VerifyCa, Some(&empty)).unwrap_err();
        assert!(err.contains("holds no certificate"), "{err}");
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn the_root_certificate_defaults_to_libpq_s_when_that_file_exists() {
        let home = std::env::temp_dir().join(format!("palm-pgstore-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("home");
        // Not there: none, whatever the mode.
        assert_eq!(
            root_cert_or_default(SslMode::VerifyFull, None, Some(&home)),
            None
        );
        std::fs::create_dir_all(home.join(".postgresql")).expect("dir");
        std::fs::write(home.join(DEFAULT_ROOT_CERT), b"a PEM file").expect("file");
        let default = home.join(DEFAULT_ROOT_CERT).to_string_lossy().into_owned();
        for mode in [
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert_eq!(
                root_cert_or_default(mode, None, Some(&home)).as_deref(),
                Some(default.as_str()),
                "{mode:?}"
            );
            assert_eq!(
                root_cert_or_default(mode, Some("system".into()), Some(&home)).as_deref(),
                Some("system"),
                "given wins"
            );
        }
        assert_eq!(
            root_cert_or_default(SslMode::Disable, None, Some(&home)),
            None
        );
        assert_eq!(root_cert_or_default(SslMode::Require, None, None), None);
        let _ = std::fs::remove_dir_all(&home);
    }

    fn tempfile_with(bytes: &[u8]) -> String {
        let path = std::env::temp_dir().join(format!(
            "palm-pgstore-tls-{}-{}.pem",
            std::process::id(),
            bytes.len()
        ));
        std::fs::write(&path, bytes).expect("write");
        path.display().to_string()
    }
}
