//! The container's memory limit, read from cgroup v2 `memory.max` or cgroup v1
//! `memory.limit_in_bytes`.
//!
//! The process's own cgroup (from `/proc/self/cgroup`) and each of its parents up to the mount
//! root are looked at, and the smallest limit wins, since a child can never use more than its
//! parent allows. `max`, or a value of 2^60 bytes or more (cgroup v1 writes "unlimited" as
//! 9223372036854771712), means no limit.

use std::path::{Path, PathBuf};

/// Values at or above this many bytes mean "no limit".
const HUGE: u64 = 1 << 60;

/// What the cgroup files say about the memory available to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// A finite limit, and the file that set it.
    Limited {
        /// The limit in bytes.
        bytes: u64,
        /// The file holding it.
        file: PathBuf,
    },
    /// cgroup files exist but none sets a finite limit.
    Unlimited {
        /// The file that was read (the process's own cgroup).
        file: PathBuf,
    },
    /// No cgroup memory file was found (not Linux, or no memory controller mounted).
    NotFound,
}

/// Detects the memory limit of the running process's container.
#[cfg(target_os = "linux")]
pub fn detect() -> Detected {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    detect_in(Path::new("/sys/fs/cgroup"), &own)
}

/// Detects the memory limit of the running process's container: cgroups exist only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn detect() -> Detected {
    Detected::NotFound
}

/// Detection against a cgroup mount `root` and the text of `/proc/self/cgroup` (for tests).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // used by `detect` on Linux only
pub fn detect_in(root: &Path, proc_self_cgroup: &str) -> Detected {
    // cgroup v2: the unified hierarchy, `0::/path`.
    let v2_path = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    let v2 = scan(root, v2_path, "memory.max");
    if v2 != Detected::NotFound {
        return v2;
    }
    // cgroup v1: the memory controller's own hierarchy, `N:...memory...:/path`.
    let v1_path = proc_self_cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        })
        .next()
        .unwrap_or("/");
    scan(&root.join("memory"), v1_path, "memory.limit_in_bytes")
}

/// Reads `file` in the cgroup at `path` under `base` and in each of its parents; the smallest
/// finite value wins.
fn scan(base: &Path, path: &str, file: &str) -> Detected {
    let mut dir = PathBuf::from(path.trim());
    let mut found = Detected::NotFound;
    loop {
        let relative = dir.strip_prefix("/").unwrap_or(&dir);
        let candidate = base.join(relative).join(file);
        if let Ok(text) = std::fs::read_to_string(&candidate) {
            found = merge(found, parse(&text), candidate);
        }
        if !dir.pop() {
            break;
        }
    }
    found
}

/// Folds one file's reading into what was found so far.
fn merge(found: Detected, value: Option<u64>, file: PathBuf) -> Detected {
    match (found, value) {
        (Detected::Limited { bytes, file: f }, Some(v)) if bytes <= v => {
            Detected::Limited { bytes, file: f }
        }
        (_, Some(v)) => Detected::Limited { bytes: v, file },
        (Detected::NotFound, None) => Detected::Unlimited { file },
        (kept, None) => kept,
    }
}

/// A limit file's value: `Some(bytes)` for a finite limit, `None` for `max`, huge or unreadable.
fn parse(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v < HUGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("sturnus-cgroup-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    #[test]
    fn v2_root_limit() {
        let root = tree(&[("memory.max", "536870912\n")]);
        assert_eq!(
            detect_in(&root, "0::/\n"),
            Detected::Limited {
                bytes: 512 << 20,
                file: root.join("memory.max")
            }
        );
    }

    #[test]
    fn v2_max_means_unlimited() {
        let root = tree(&[("memory.max", "max\n")]);
        assert_eq!(
            detect_in(&root, "0::/\n"),
            Detected::Unlimited {
                file: root.join("memory.max")
            }
        );
    }

    #[test]
    fn v2_nested_cgroup_takes_the_smallest_of_itself_and_its_parents() {
        let root = tree(&[
            ("memory.max", "max"),
            ("kubepods/memory.max", "1073741824"),
            ("kubepods/pod1/memory.max", "max"),
        ]);
        assert_eq!(
            detect_in(&root, "0::/kubepods/pod1\n"),
            Detected::Limited {
                bytes: 1 << 30,
                file: root.join("kubepods/memory.max")
            }
        );
    }

    #[test]
    fn v1_limit_and_huge_value() {
        let proc = "12:pids:/\n4:memory:/docker/abc\n0::/\n";
        let root = tree(&[("memory/docker/abc/memory.limit_in_bytes", "268435456")]);
        assert_eq!(
            detect_in(&root, proc),
            Detected::Limited {
                bytes: 256 << 20,
                file: root.join("memory/docker/abc/memory.limit_in_bytes")
            }
        );
        let root = tree(&[("memory/memory.limit_in_bytes", "9223372036854771712")]);
        assert_eq!(
            detect_in(&root, proc),
            Detected::Unlimited {
                file: root.join("memory/memory.limit_in_bytes")
            }
        );
    }

    #[test]
    fn v1_without_cgroup_namespace_reads_the_mount_root() {
        // Docker on cgroup v1 mounts the container's own cgroup at /sys/fs/cgroup/memory while
        // /proc/self/cgroup still names the host path.
        let root = tree(&[("memory/memory.limit_in_bytes", "104857600")]);
        assert_eq!(
            detect_in(&root, "4:memory:/docker/0123\n"),
            Detected::Limited {
                bytes: 100 << 20,
                file: root.join("memory/memory.limit_in_bytes")
            }
        );
    }

    #[test]
    fn nothing_mounted_is_not_found() {
        let root = tree(&[("unrelated", "x")]);
        assert_eq!(detect_in(&root, "0::/\n"), Detected::NotFound);
        assert_eq!(detect_in(&root, ""), Detected::NotFound);
    }

    #[test]
    fn garbage_values_count_as_unlimited() {
        let root = tree(&[("memory.max", "lots")]);
        assert!(matches!(
            detect_in(&root, "0::/"),
            Detected::Unlimited { .. }
        ));
    }
}
