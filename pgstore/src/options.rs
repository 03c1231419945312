//! A store URL, `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&pool=N&…]`, split
//! into what the driver understands and what is Palm's own.
//!
//! `schema` (default `palm`) names the PostgreSQL schema that holds Palm's tables, so one
//! database can hold several independent Palm trees (and each test its own). `pool`
//! (default 4) is the number of connections. `lease_ms` (default 3000) is how long the
//! writing replica's lease lasts without renewal: a standby takes over that long after
//! the writer stops renewing. `sslmode` and `sslrootcert` mean what libpq makes of them
//! (see `tls.rs`; `prefer` by default). Every other parameter goes to the driver as
//! libpq would read it (`connect_timeout`, `application_name`, …).

use palm_actors::store::StoreError;
use std::str::FromStr;
use std::time::Duration;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "palm";
/// The default number of connections.
pub const DEFAULT_POOL: usize = 4;
/// The most connections one store opens.
pub const POOL_MAX: usize = 64;
/// The default writer's lease.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(3_000);
/// How long a connection attempt may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed store URL.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// What the driver connects with.
    pub config: postgres::Config,
    /// The PostgreSQL schema holding Palm's tables (a plain lower-case identifier).
    pub schema: String,
    /// Connections.
    pub pool: usize,
    /// The writer's lease.
    pub lease: Duration,
    /// `host:port/db`, for logs (never the password).
    pub location: String,
    /// The connector every connection uses.
    pub tls: crate::tls::MakeTls,
}

fn invalid(url: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!(
        "bad PostgreSQL store URL {}: {detail}",
        redact(url)
    ))
}

/// A store URL as messages show it: user, hosts, database and Palm's own parameters,
/// rebuilt from what the driver parsed, so no password reaches a message however it was
/// written (`:secret@`, unescaped `/` or `?` in it, or a `password=` parameter).
pub fn redact(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut ours = Vec::new();
    let mut passed = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').map_or(pair, |(name, _)| name) {
            "schema" | "pool" | "lease_ms" | "sslmode" | "sslrootcert" => ours.push(pair),
            _ => passed.push(pair),
        }
    }
    let driver = if passed.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", passed.join("&"))
    };
    let scheme = url
        .split_once("://")
        .map_or("postgres", |(scheme, _)| scheme);
    match postgres::Config::from_str(&driver) {
        Ok(config) => {
            let user = config.get_user().unwrap_or("");
            let secret = if config.get_password().is_some() {
                ":***"
            } else {
                ""
            };
            let at = if user.is_empty() && secret.is_empty() {
                ""
            } else {
                "@"
            };
            let query = if ours.is_empty() {
                String::new()
            } else {
                format!("?{}", ours.join("&"))
            };
            format!("{scheme}://{user}{secret}{at}{}{query}", location(&config))
        }
        Err(_) => format!("{scheme}://… (a URL that does not parse; not shown)"),
    }
}

/// `url` with its `schema` parameter set to `schema` (replacing any already there).
pub fn with_schema(url: &str, schema: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("schema="))
        .collect();
    let setting = format!("schema={schema}");
    pairs.push(&setting);
    format!("{base}?{}", pairs.join("&"))
}

/// True for a URL this crate opens (`postgres://` or `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl PgOptions {
    /// Parses `url`; the error says which part is wrong.
    pub fn parse(url: &str) -> Result<PgOptions, StoreError> {
        if !is_postgres_url(url) {
            return Err(invalid(
                url,
                "it must start with postgres:// or postgresql://",
            ));
        }
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, query),
            None => (url, ""),
        };
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut pool = DEFAULT_POOL;
        let mut lease = DEFAULT_LEASE;
        let mut ssl_mode = crate::tls::SslMode::Prefer;
        let mut root_cert = None;
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "schema" => schema = value.to_owned(),
                "pool" => {
                    pool = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=POOL_MAX).contains(n))
                        .ok_or_else(|| {
                            invalid(url, format!("pool must be 1 to {POOL_MAX}, not {value:?}"))
                        })?;
                }
                "lease_ms" => {
                    lease = value
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| (200..=600_000).contains(ms))
                        .map(Duration::from_millis)
                        .ok_or_else(|| {
                            invalid(
                                url,
                                format!("lease_ms must be 200 to 600000, not {value:?}"),
                            )
                        })?;
                }
                "sslmode" => {
                    ssl_mode =
                        crate::tls::SslMode::parse(value).map_err(|detail| invalid(url, detail))?;
                }
                "sslrootcert" => {
                    let path = percent_encoding::percent_decode_str(value)
                        .decode_utf8()
                        .map_err(|e| invalid(url, format!("sslrootcert: {e}")))?;
                    root_cert = Some(path.into_owned());
                }
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(invalid(
                        url,
                        format!("{name}: client certificates are not supported"),
                    ));
                }
                _ => passed.push(pair),
            }
        }
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let root_cert = crate::tls::root_cert_or_default(ssl_mode, root_cert, home.as_deref());
        let tls = crate::tls::MakeTls::new(ssl_mode, root_cert.as_deref())
            .map_err(|detail| invalid(url, detail))?;
        check_identifier(&schema).map_err(|detail| invalid(url, detail))?;
        let driver_url = if passed.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", passed.join("&"))
        };
        let mut config = postgres::Config::from_str(&driver_url).map_err(|e| {
            // The driver's message is generic; its source says which part.
            match std::error::Error::source(&e) {
                Some(source) => invalid(url, format!("{e}: {source}")),
                None => invalid(url, e),
            }
        })?;
        config.ssl_mode(ssl_mode.driver());
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // A root whose database vanished behind a silent network must notice in seconds,
        // not after the kernel's 2-hour keepalive or 15 minutes of retransmissions: a
        // blocked call holds one of the node's threads.
        config.keepalives(true);
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(Duration::from_secs(5));
            config.keepalives_interval(Duration::from_secs(1));
            config.keepalives_retries(5);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(15));
        }
        if config.get_application_name().is_none() {
            config.application_name("palm");
        }
        let location = location(&config);
        Ok(PgOptions {
            config,
            schema,
            pool,
            lease,
            location,
            tls,
        })
    }
}

fn location(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    format!(
        "{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or("(user's database)")
    )
}

/// A schema name safe to splice into SQL: lower-case letters, digits and `_`, not
/// starting with a digit, at most 63 bytes (PostgreSQL's identifier bound).
fn check_identifier(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "schema {name:?} must be 1 to 63 lower-case letters, digits or _, not starting with a digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palm_parameters_are_taken_and_the_rest_reach_the_driver() {
        let options = PgOptions::parse(
            "postgres://palm:secret@127.0.0.1:5433/jobs?schema=root_a&pool=8&application_name=r1",
        )
        .expect("parse");
        assert_eq!(options.schema, "root_a");
        assert_eq!(options.pool, 8);
        assert_eq!(options.location, "127.0.0.1:5433/jobs");
        assert_eq!(options.config.get_application_name(), Some("r1"));
        assert_eq!(options.config.get_password(), Some(&b"secret"[..]));
        let plain = PgOptions::parse("postgresql://u@localhost/db").expect("parse");
        assert_eq!((plain.schema.as_str(), plain.pool), ("palm", 4));
        assert_eq!(plain.config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (url, needle) in [
            ("mysql://u@h/db", "must start with postgres://"),
            (
                "postgres://u:pw@h/db?schema=Bad-Name",
                "schema \"Bad-Name\"",
            ),
            ("postgres://u:pw@h/db?pool=0", "pool must be 1 to 64"),
            ("postgres://u:pw@h/db?pool=many", "pool must be 1 to 64"),
            ("postgres://u:pw@h/db?nonsense=1", "nonsense"),
            (
                "postgres://u:pw@h/db?sslmode=on",
                "sslmode must be disable, prefer",
            ),
            (
                "postgres://u:pw@h/db?sslmode=verify-ca",
                "needs sslrootcert",
            ),
            ("postgres://u:pw@h/db?sslkey=k.pem", "client certificates"),
            (
                "postgres://u:pw@h/db?sslmode=verify-ca&sslrootcert=/no/such%20dir/ca.pem",
                "cannot read sslrootcert /no/such dir/ca.pem",
            ),
        ] {
            let message = PgOptions::parse(url).expect_err(url).to_string();
            assert!(message.contains(needle), "{url}: {message}");
            assert!(
                !message.contains("pw"),
                "{url} leaks the password: {message}"
            );
        }
    }

    #[test]
    fn a_schema_is_set_or_replaced() {
        assert_eq!(
            with_schema("postgres://u@h/db", "b1"),
            "postgres://u@h/db?schema=b1"
        );
        assert_eq!(
            with_schema("postgres://u@h/db?pool=2&schema=a", "b1"),
            "postgres://u@h/db?pool=2&schema=b1"
        );
    }

    #[test]
    fn redaction_never_shows_a_password_however_it_was_written() {
        assert_eq!(
            redact("postgres://palm:s3cret@db:5432/x?schema=a"),
            "postgres://palm:***@db:5432/x?schema=a"
        );
        assert!(!redact("postgres://palm:s3cr@t@db:5432/x").contains("s3cr"));
        assert_eq!(redact("postgres://palm@db/x"), "postgres://palm@db:5432/x");
        for url in [
            "postgres://u@h/db?password=hunter2",
            "postgres://u:pa/ss@h/db",
            "postgres://u:pa?ss@h/db",
            "postgresql://u:hunter2@h1:5433,h2:5434/db?sslmode=disable&schema=s",
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains("hunter2") && !shown.contains("pa/ss") && !shown.contains("pa?ss"),
                "{url} shown as {shown}"
            );
        }
        assert_eq!(
            redact("postgresql://u:hunter2@h1:5433,h2:5434/db?sslmode=disable&schema=s"),
            "postgresql://u:***@h1:5433,h2:5434/db?sslmode=disable&schema=s"
        );
        // libpq's TLS words that the driver does not know are shown, not lost to a
        // "does not parse".
        assert_eq!(
            redact("postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem"),
            "postgres://u:***@h:5432/db?sslmode=verify-full&sslrootcert=/etc/ca.pem"
        );
    }
}
