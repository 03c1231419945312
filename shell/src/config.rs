//! Node configuration: `DIR/palm.yaml` (or `palm up --config FILE`).
//!
//! Known keys: `name`, `seats`, `capabilities` (offered by the node itself), `places`
//! (workloads the node spawns or adopts; the format is `palm_actors::place::spec`'s) and
//! `link` (tunnel timings and bounds: `keepalive_ms`, `idle_timeout_ms`,
//! `backoff_ms_min`, `backoff_ms_max`, `frame_len_max`, `requests_in_flight_max`) and
//! `providers` (`file: {root: DIR}`, `http: {ca: FILE}`) and `retention` (how long ended jobs are kept:
//! `retention: 7d` for their journals, or `retention: {journal: 7d, summary: 90d}`, where
//! `summary` may be `forever`).

use crate::exit::CliError;
use palm_actors::definition::yaml::{self, Value};
use std::path::{Path, PathBuf};

/// Settings read from the configuration file.
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    /// Node name.
    pub name: Option<String>,
    /// Seats.
    pub seats: Option<usize>,
    /// Capabilities the node offers by itself.
    pub capabilities: Vec<String>,
    /// Places the node spawns or adopts at boot.
    pub places: Vec<palm_actors::place::PlaceSpec>,
    /// Tunnel timings and bounds.
    pub link: palm_transport::LinkConfig,
    /// Provider settings.
    pub providers: crate::genome::provider::ProviderSettings,
    /// Lease on a claimed effect (ms); a holder that goes silent loses it after this.
    pub lease_ms: Option<u64>,
    /// How long ended jobs are kept (`retention:`).
    pub retention: Option<palm_actors::path::retention::Retention>,
}

/// Loads `explicit`, else `DIR/palm.yaml` if it exists, else defaults.
pub fn load(data: &Path, explicit: Option<&Path>) -> Result<NodeConfig, CliError> {
    let path = match explicit {
        Some(path) => {
            if !path.is_file() {
                return Err(CliError::usage(
                    "config",
                    format!("no such config file: {}", path.display()),
                ));
            }
            path.to_owned()
        }
        None => {
            let default = data.join("palm.yaml");
            if !default.is_file() {
                return Ok(NodeConfig::default());
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::usage("config", format!("cannot read {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// `retention: DURATION` (journals; summaries keep their default) or
/// `retention: {journal: DURATION, summary: DURATION | forever}`.
fn retention(
    value: &palm_actors::definition::yaml::Spanned,
) -> Result<palm_actors::path::retention::Retention, (palm_actors::definition::Span, String)> {
    use palm_actors::definition::parse_duration_ms;
    use palm_actors::path::retention::Retention;
    let duration = |v: &palm_actors::definition::yaml::Spanned, what: &str| {
        v.as_str().and_then(parse_duration_ms).ok_or_else(|| {
            (
                v.span,
                format!("`{what}` must be a duration like 7d, 12h or 30m"),
            )
        })
    };
    let mut kept = Retention::default();
    match &value.value {
        Value::Map(fields) => {
            for (field, setting) in fields {
                match field.as_str().unwrap_or_default() {
                    "journal" => kept.journal_ms = duration(setting, "retention.journal")?,
                    "summary" if setting.as_str() == Some("forever") => kept.summary_ms = None,
                    "summary" => {
                        kept.summary_ms = Some(duration(setting, "retention.summary")?);
                    }
                    other => {
                        return Err((
                            field.span,
                            format!("unknown key `retention.{other}`; known: journal, summary"),
                        ));
                    }
                }
            }
        }
        _ => kept.journal_ms = duration(value, "retention")?,
    }
    if kept
        .summary_ms
        .is_some_and(|summary| summary < kept.journal_ms)
    {
        return Err((
            value.span,
            "`retention.summary` must be at least `retention.journal` (a summary outlives its journal)".into(),
        ));
    }
    Ok(kept)
}

fn parse(text: &str, origin: &str) -> Result<NodeConfig, CliError> {
    let at = |span: palm_actors::definition::Span, message: String| {
        CliError::usage(
            "config",
            format!("{origin}:{}:{}: {message}", span.line, span.col),
        )
    };
    let document = yaml::read(text).map_err(|e| at(e.span, e.message))?;
    let mut config = NodeConfig::default();
    let entries = match &document.value {
        Value::Null => return Ok(config),
        Value::Map(entries) => entries,
        _ => return Err(at(document.span, "the config must be a mapping".to_owned())),
    };
    for (key, value) in entries {
        match key.as_str().unwrap_or_default() {
            "name" => {
                config.name = Some(
                    value
                        .as_str()
                        .ok_or_else(|| at(value.span, "`name` must be a string".into()))?
                        .to_owned(),
                );
            }
            "seats" => match value.value {
                Value::Int(n) if n >= 1 => config.seats = Some(n as usize),
                _ => return Err(at(value.span, "`seats` must be an integer ≥ 1".into())),
            },
            "capabilities" => match &value.value {
                Value::Seq(items) => {
                    for item in items {
                        let capability = item
                            .as_str()
                            .ok_or_else(|| at(item.span, "capabilities are strings".into()))?;
                        config.capabilities.push(capability.to_owned());
                    }
                }
                _ => return Err(at(value.span, "`capabilities` must be a list".into())),
            },
            "places" => match palm_actors::place::parse_places(value) {
                Ok(places) => config.places = places,
                Err(errors) => {
                    let first = &errors[0];
                    let mut err = at(first.span, first.message.clone());
                    if errors.len() > 1 {
                        err.message
                            .push_str(&format!(" ({} more problems)", errors.len() - 1));
                    }
                    return Err(match &first.hint {
                        Some(hint) => err.with_hint(hint.clone()),
                        None => err,
                    });
                }
            },
            "link" => {
                let Value::Map(fields) = &value.value else {
                    return Err(at(value.span, "`link` must be a mapping".into()));
                };
                for (field, number) in fields {
                    let name = field.as_str().unwrap_or_default();
                    let Value::Int(n) = number.value else {
                        return Err(at(number.span, format!("`link.{name}` must be an integer")));
                    };
                    let n = u64::try_from(n)
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| at(number.span, format!("`link.{name}` must be ≥ 1")))?;
                    let link = &mut config.link;
                    match name {
                        "keepalive_ms" => link.keepalive_ms = n,
                        "idle_timeout_ms" => link.idle_timeout_ms = n,
                        "backoff_ms_min" => link.backoff_ms_min = n,
                        "backoff_ms_max" => link.backoff_ms_max = n,
                        "frame_len_max" => link.frame_len_max = n as usize,
                        "requests_in_flight_max" => link.requests_in_flight_max = n as usize,
                        other => {
                            return Err(at(
                                field.span,
                                format!(
                                    "unknown key `link.{other}`; known: keepalive_ms, idle_timeout_ms, backoff_ms_min, backoff_ms_max, frame_len_max, requests_in_flight_max"
                                ),
                            ));
                        }
                    }
                }
                if config.link.keepalive_ms >= config.link.idle_timeout_ms {
                    return Err(at(
                        value.span,
                        "`link.keepalive_ms` must be below `link.idle_timeout_ms`".into(),
                    ));
                }
            }
            "retention" => {
                config.retention = Some(retention(value).map_err(|(span, m)| at(span, m))?)
            }
            "lease_ms" => match value.value {
                Value::Int(n) if n >= 500 => config.lease_ms = Some(n as u64),
                _ => return Err(at(value.span, "`lease_ms` must be an integer ≥ 500".into())),
            },
            "providers" => {
                let Value::Map(providers) = &value.value else {
                    return Err(at(value.span, "`providers` must be a mapping".into()));
                };
                for (name, settings) in providers {
                    match name.as_str().unwrap_or_default() {
                        "file" => {
                            let root =
                                settings
                                    .get("root")
                                    .and_then(|r| r.as_str())
                                    .ok_or_else(|| {
                                        at(
                                            settings.span,
                                            "`providers.file` needs `root: DIR`".into(),
                                        )
                                    })?;
                            config.providers.file_root = Some(std::path::PathBuf::from(root));
                        }
                        "http" => {
                            let ca = settings.get("ca").and_then(|r| r.as_str()).ok_or_else(
                                || {
                                    at(
                                        settings.span,
                                        "`providers.http` takes `ca: FILE` (PEM certificates to trust)"
                                            .into(),
                                    )
                                },
                            )?;
                            config.providers.http_ca = Some(std::path::PathBuf::from(ca));
                        }
                        other => {
                            return Err(at(
                                name.span,
                                format!("unknown provider setting `{other}`; known: file, http"),
                            ));
                        }
                    }
                }
            }
            other => {
                return Err(at(
                    key.span,
                    format!(
                        "unknown key `{other}`; known: name, seats, capabilities, places, link, providers, lease_ms, retention"
                    ),
                ));
            }
        }
    }
    Ok(config)
}

/// Resolves the data directory: `--data`, else `$PALM_HOME`, else `~/.palm`.
pub fn data_dir(flag: Option<PathBuf>) -> Result<PathBuf, CliError> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    if let Some(home) = std::env::var_os("PALM_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".palm")),
        None => Err(CliError::usage(
            "data_dir",
            "no data directory: pass --data DIR or set PALM_HOME",
        )),
    }
}

/// The node name when none is configured: the host's name.
pub fn default_node_name() -> String {
    crate::sys::hostname().unwrap_or_else(|| "local".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_known_keys_and_refuses_others() {
        let config = parse("name: box\nseats: 3\ncapabilities: [gpu]\n", "palm.yaml")
            .map_err(|e| e.message)
            .unwrap();
        assert_eq!(config.name.as_deref(), Some("box"));
        assert_eq!(config.seats, Some(3));
        assert_eq!(config.capabilities, vec!["gpu"]);
        let err = parse("name: box\nseets: 3\n", "palm.yaml").unwrap_err();
        assert_eq!(
            err.message,
            "palm.yaml:2:1: unknown key `seets`; known: name, seats, capabilities, places, link, providers, lease_ms, retention"
        );
        assert!(parse("seats: 0\n", "palm.yaml").is_err());
        let config = parse(
            "link: { idle_timeout_ms: 1500, keepalive_ms: 250 }\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        assert_eq!(
            (config.link.idle_timeout_ms, config.link.keepalive_ms),
            (1500, 250)
        );
        assert!(parse("link: { idle_ms: 1 }\n", "palm.yaml").is_err());
        assert!(parse("link: { keepalive_ms: 5000 }\n", "palm.yaml").is_err());
        let config = parse(
            "places:\n  web:\n    spawn: \"python3 -m http.server 8000\"\n    probe: \"http://127.0.0.1:8000/\"\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        assert_eq!(config.places.len(), 1);
        let err = parse(
            "places:\n  web:\n    spawn: x\n    probe: \"grpc://h:1\"\n",
            "palm.yaml",
        )
        .unwrap_err();
        assert_eq!(err.message, "palm.yaml:4:12: unknown probe kind `grpc`");
    }
}
