//! Routing state across a graceful upgrade: a snapshot of every candidate's EWMAs.
//!
//! On SIGQUIT the old process writes the snapshot beside `upgrade_sock` (see [`path_for`])
//! *before* Pingora sends it the listening sockets; the new process, started with `-u`, receives
//! the sockets in its bootstrap and then imports the snapshot, so it never starts cold. A
//! candidate is matched by provider name and model: one still in the new config keeps its latency
//! estimates and success rate, one no longer configured is dropped, a new one starts cold. Counters
//! (requests, failures) start from zero. The file is removed once read, and a snapshot older than
//! [`MAX_AGE`] is ignored, so a stale one from an upgrade that never completed cannot leak in.

use crate::catalog::Catalog;
use crate::routing::StatsSnapshot;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Oldest snapshot a new process still imports (the old process writes it moments before the
/// new one reads it).
pub const MAX_AGE: Duration = Duration::from_secs(60);

const FORMAT: &str = "sturnus-routing-state";
const VERSION: u32 = 1;

/// Where the snapshot for an `upgrade_sock` lives: beside it, same name plus a suffix.
pub fn path_for(upgrade_sock: &str) -> PathBuf {
    PathBuf::from(format!("{upgrade_sock}.routing-state.json"))
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    format: String,
    version: u32,
    pid: u32,
    written_at_unix_ms: u64,
    candidates: Vec<Entry>,
}

/// One candidate's EWMAs. Numbers are written as decimal strings (Rust's shortest round-trip
/// form, parsed back exactly): serde_json's default float parsing may be one ULP off, and the
/// new process should carry the very same values.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    provider: String,
    model: String,
    #[serde(with = "exact")]
    latency_non_streaming_us: Option<f64>,
    #[serde(with = "exact")]
    latency_streaming_us: Option<f64>,
    #[serde(with = "exact")]
    success: Option<f64>,
}

/// `Option<f64>` as an exact decimal string (or null).
mod exact {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => s.serialize_some(&x.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| text.parse::<f64>().map_err(D::Error::custom))
            .transpose()
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Candidates that took over the old process's EWMAs.
    pub carried: usize,
    /// Candidates of the snapshot no longer in the config.
    pub dropped: usize,
    /// Candidates new in this config, starting cold.
    pub new: usize,
}

fn now_ms() -> u64 {
    u64::try_from(crate::clock::unix_now().as_millis()).unwrap_or(u64::MAX)
}

/// Writes every candidate's EWMAs to `path` (atomically, mode 0600); returns how many.
pub fn save(catalog: &Catalog, path: &Path) -> std::io::Result<usize> {
    let candidates: Vec<Entry> = catalog
        .candidates
        .iter()
        .map(|c| {
            let s = c.stats.export();
            Entry {
                provider: c.provider.name.clone(),
                model: c.model.clone(),
                latency_non_streaming_us: s.latency_non_streaming_us,
                latency_streaming_us: s.latency_streaming_us,
                success: Some(s.success),
            }
        })
        .collect();
    let state = StateFile {
        format: FORMAT.to_string(),
        version: VERSION,
        pid: std::process::id(),
        written_at_unix_ms: now_ms(),
        candidates,
    };
    let json = serde_json::to_vec(&state).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A fresh file (O_EXCL never follows a planted symlink), then an atomic rename.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(state.candidates.len())
}

/// Why a routing-state snapshot was not imported (the new process then starts cold).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The snapshot's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a snapshot's JSON.
    #[error("{} is not a routing-state snapshot: {source}", path.display())]
    NotASnapshot {
        /// The snapshot's path.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A snapshot of another format or version.
    #[error("{}: unsupported snapshot {format} v{version}", path.display())]
    Unsupported {
        /// The snapshot's path.
        path: PathBuf,
        /// Its `format`.
        format: String,
        /// Its `version`.
        version: u32,
    },
    /// A snapshot too old to describe the providers now.
    #[error("{}: snapshot is {}s old (written by pid {pid}), ignored", path.display(), age.as_secs())]
    Stale {
        /// The snapshot's path.
        path: PathBuf,
        /// How long ago it was written.
        age: Duration,
        /// The process that wrote it.
        pid: u32,
    },
}

/// Imports the snapshot at `path` into `catalog` and removes the file. `Ok(None)` when there is
/// none; an error for an unreadable, foreign or stale file (which is removed all the same).
pub fn restore(catalog: &Catalog, path: &Path) -> Result<Option<Restored>, RestoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RestoreError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let _ = std::fs::remove_file(path);
    let state: StateFile =
        serde_json::from_slice(&bytes).map_err(|source| RestoreError::NotASnapshot {
            path: path.to_path_buf(),
            source,
        })?;
    if state.format != FORMAT || state.version != VERSION {
        return Err(RestoreError::Unsupported {
            path: path.to_path_buf(),
            format: state.format,
            version: state.version,
        });
    }
    let age = Duration::from_millis(now_ms().saturating_sub(state.written_at_unix_ms));
    if age > MAX_AGE {
        return Err(RestoreError::Stale {
            path: path.to_path_buf(),
            age,
            pid: state.pid,
        });
    }
    Ok(Some(apply(catalog, &state.candidates)))
}

fn apply(catalog: &Catalog, entries: &[Entry]) -> Restored {
    let mut carried = 0;
    for c in &catalog.candidates {
        let found = entries
            .iter()
            .find(|e| e.provider == c.provider.name && e.model == c.model);
        if let Some(e) = found {
            c.stats.import(&StatsSnapshot {
                latency_non_streaming_us: e.latency_non_streaming_us,
                latency_streaming_us: e.latency_streaming_us,
                success: e.success.unwrap_or(1.0),
            });
            carried += 1;
        }
    }
    let dropped = entries
        .iter()
        .filter(|e| {
            !catalog
                .candidates
                .iter()
                .any(|c| c.provider.name == e.provider && c.model == e.model)
        })
        .count();
    Restored {
        carried,
        dropped,
        new: catalog.candidates.len() - carried,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::routing::latency_mean::LatencyParams;
    use crate::routing::{Mode, Outcome};

    fn catalog(candidates: &str) -> Catalog {
        let text = format!(
            "[provider.a]\nbase_url = \"http://127.0.0.1:1/v1\"\n\
             [provider.b]\nbase_url = \"http://127.0.0.1:2/v1\"\n\
             [model]\nfast = [{candidates}]\n"
        );
        let config = Config::parse(&text, &|_| None).expect("config");
        Catalog::build(&config).expect("catalog")
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sturnus-handover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn kept_candidates_carry_their_ewmas_removed_drop_new_start_cold() {
        let old = catalog(r#"{ provider = "a", model = "x" }, { provider = "b", model = "y" }"#);
        old.candidates[0].stats.record_latency(
            Mode::NonStreaming,
            1500.0,
            None,
            &LatencyParams::DEFAULT,
        );
        // A value with a long expansion must come back bit for bit.
        old.candidates[0].stats.record_latency(
            Mode::NonStreaming,
            7558.778730109521,
            None,
            &LatencyParams::DEFAULT,
        );
        old.candidates[0].stats.record_latency(
            Mode::Streaming,
            700.0,
            None,
            &LatencyParams::DEFAULT,
        );
        old.candidates[0].stats.record_outcome(
            Outcome::Failure,
            0,
            &crate::routing::RoutingParams::default(),
        );
        old.candidates[1].stats.record_latency(
            Mode::NonStreaming,
            9.0,
            None,
            &LatencyParams::DEFAULT,
        );
        let path = scratch("state.json");
        assert_eq!(save(&old, &path).unwrap(), 2);

        let new = catalog(r#"{ provider = "a", model = "x" }, { provider = "a", model = "z" }"#);
        let restored = restore(&new, &path).unwrap().unwrap();
        assert_eq!(
            restored,
            Restored {
                carried: 1,
                dropped: 1,
                new: 1
            }
        );
        assert_eq!(
            new.candidates[0].stats.export(),
            old.candidates[0].stats.export()
        );
        assert_eq!(
            new.candidates[0].stats.requests(),
            0,
            "counters start fresh"
        );
        assert_eq!(new.candidates[1].stats.latency_us(Mode::NonStreaming), None);
        assert!(!path.exists(), "the snapshot is consumed");
        assert_eq!(restore(&new, &path).unwrap(), None);
    }

    #[test]
    fn stale_and_foreign_files_are_refused_and_removed() {
        let c = catalog(r#"{ provider = "a", model = "x" }"#);
        let path = scratch("stale.json");
        let stale = StateFile {
            format: FORMAT.into(),
            version: VERSION,
            pid: 1,
            written_at_unix_ms: now_ms() - 2 * MAX_AGE.as_millis() as u64,
            candidates: vec![],
        };
        std::fs::write(&path, serde_json::to_vec(&stale).unwrap()).unwrap();
        assert!(restore(&c, &path).unwrap_err().to_string().contains("old"));
        assert!(!path.exists());
        std::fs::write(&path, b"{\"not\": \"ours\"}").unwrap();
        assert!(restore(&c, &path).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn snapshot_lives_beside_the_upgrade_socket() {
        assert_eq!(
            path_for("/run/sturnus/upgrade.sock"),
            PathBuf::from("/run/sturnus/upgrade.sock.routing-state.json")
        );
    }
}
