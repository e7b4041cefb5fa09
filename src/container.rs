//! Whether sturnus runs inside a container, so that a loopback `listen` there — which a
//! published port (`docker run -p`) cannot reach — is pointed out at startup.
//!
//! The signs looked at, on Linux: the `container` environment variable (set by Podman,
//! systemd-nspawn and other runtimes), `/.dockerenv` (Docker), `/run/.containerenv` (Podman),
//! and a container runtime named in `/proc/1/cgroup`. A Kubernetes pod (`KUBERNETES_SERVICE_HOST` set)
//! is not warned about: its containers share one network namespace, so a sidecar on loopback is
//! what the app next to it reaches. Elsewhere than Linux there are no containers to detect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// Where the process runs, as far as who can reach a loopback listener goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Surroundings {
    /// No sign of a container: loopback is reachable by the host's own processes.
    Host,
    /// A container, with what gave it away (e.g. `/.dockerenv exists`).
    Container(String),
    /// A Kubernetes pod: its containers share loopback, as a sidecar wants.
    KubernetesPod,
}

/// Container runtimes whose name in `/proc/1/cgroup` marks a container.
const CGROUP_RUNTIMES: &[&str] = &["docker", "kubepods", "containerd", "libpod", "lxc"];

/// Detects the surroundings of the running process.
#[cfg(target_os = "linux")]
pub fn detect() -> Surroundings {
    detect_in(Path::new("/"), &|name| std::env::var(name).ok())
}

/// Detects the surroundings of the running process: outside Linux there is no container.
#[cfg(not(target_os = "linux"))]
pub fn detect() -> Surroundings {
    Surroundings::Host
}

/// Detection against a filesystem `root` and an environment lookup (for tests).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // used by `detect` on Linux only
pub fn detect_in(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Surroundings {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if set("KUBERNETES_SERVICE_HOST").is_some() {
        return Surroundings::KubernetesPod;
    }
    if let Some(runtime) = set("container") {
        return Surroundings::Container(format!("container={}", runtime.trim()));
    }
    for marker in ["/.dockerenv", "/run/.containerenv"] {
        if root.join(&marker[1..]).exists() {
            return Surroundings::Container(format!("{marker} exists"));
        }
    }
    let init_cgroup = std::fs::read_to_string(root.join("proc/1/cgroup")).unwrap_or_default();
    match CGROUP_RUNTIMES
        .iter()
        .find(|runtime| init_cgroup.contains(*runtime))
    {
        Some(runtime) => Surroundings::Container(format!("/proc/1/cgroup names {runtime}")),
        None => Surroundings::Host,
    }
}

/// The warning for a loopback `listen` inside a container (not a Kubernetes pod), if it is one.
pub fn loopback_warning(listen: SocketAddr, surroundings: &Surroundings) -> Option<String> {
    let Surroundings::Container(sign) = surroundings else {
        return None;
    };
    if !listen.ip().is_loopback() {
        return None;
    }
    let any: IpAddr = match listen {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let open = SocketAddr::new(any, listen.port());
    Some(format!(
        "listen = {listen} is a loopback address and sturnus runs in a container ({sign}): only \
         processes inside this container can reach it, so a published port (docker run -p \
         {port}:{port}) gets no answer. Start sturnus with --listen {open} (or \
         STURNUS_LISTEN={open}, or listen = \"{open}\" in the config) and client keys in \
         [auth], or --allow-anonymous to serve whoever reaches the port; keep loopback only if \
         the app shares this container's network namespace",
        port = listen.port()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("sturnus-container-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn an_empty_root_and_environment_is_the_host() {
        assert_eq!(detect_in(&root(&[]), &no_env), Surroundings::Host);
        let host_init = root(&[("proc/1/cgroup", "0::/init.scope\n")]);
        assert_eq!(detect_in(&host_init, &no_env), Surroundings::Host);
    }

    #[test]
    fn each_sign_is_detected_and_named() {
        let docker = root(&[(".dockerenv", "")]);
        assert_eq!(
            detect_in(&docker, &no_env),
            Surroundings::Container("/.dockerenv exists".into())
        );
        let podman = root(&[("run/.containerenv", "engine=\"podman\"\n")]);
        assert_eq!(
            detect_in(&podman, &no_env),
            Surroundings::Container("/run/.containerenv exists".into())
        );
        let v1 = root(&[("proc/1/cgroup", "4:memory:/docker/0123abcd\n")]);
        assert_eq!(
            detect_in(&v1, &no_env),
            Surroundings::Container("/proc/1/cgroup names docker".into())
        );
        let env = |name: &str| (name == "container").then(|| "podman".to_string());
        assert_eq!(
            detect_in(&root(&[]), &env),
            Surroundings::Container("container=podman".into())
        );
    }

    #[test]
    fn kubernetes_wins_over_every_container_sign() {
        let docker = root(&[(".dockerenv", "")]);
        let env = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "container" => Some("docker".to_string()),
            _ => None,
        };
        assert_eq!(detect_in(&docker, &env), Surroundings::KubernetesPod);
        let empty = |name: &str| (name == "KUBERNETES_SERVICE_HOST").then(String::new);
        assert_eq!(
            detect_in(&docker, &empty),
            Surroundings::Container("/.dockerenv exists".into())
        );
    }

    #[test]
    fn only_loopback_in_a_plain_container_is_warned_about() {
        let container = Surroundings::Container("/.dockerenv exists".into());
        let w = loopback_warning("127.0.0.1:4000".parse().unwrap(), &container).unwrap();
        assert!(w.contains("listen = 127.0.0.1:4000"), "{w}");
        assert!(w.contains("(/.dockerenv exists)"), "{w}");
        assert!(w.contains("--listen 0.0.0.0:4000"), "{w}");
        assert!(w.contains("STURNUS_LISTEN=0.0.0.0:4000"), "{w}");
        let v6 = loopback_warning("[::1]:8080".parse().unwrap(), &container).unwrap();
        assert!(v6.contains("--listen [::]:8080"), "{v6}");
        assert!(loopback_warning("0.0.0.0:4000".parse().unwrap(), &container).is_none());
        for quiet in [Surroundings::Host, Surroundings::KubernetesPod] {
            assert!(loopback_warning("127.0.0.1:4000".parse().unwrap(), &quiet).is_none());
        }
    }
}
