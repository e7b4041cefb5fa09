//! `examples/kubernetes/`: the manifests validate against the Kubernetes 1.33 schemas (offline,
//! with the `kubernetes-validate` package that `scripts/bootstrap.sh` installs), and they agree
//! with sturnus: a native sidecar, its config passes `sturnus check`, probes and scrape
//! annotations point at the metrics listener, and the termination grace covers the drain.

use crate::common;

use serde_yaml::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    files
}

fn load(name: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap()
}

/// The Python that runs kubernetes-validate; a machine without one fails the check (with the
/// fix) instead of passing it unrun.
fn python3() -> &'static str {
    ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no python3 to run kubernetes-validate: run scripts/bootstrap.sh")
}

#[test]
fn manifests_validate_against_kubernetes_1_33_schemas() {
    let python = python3();
    let out = Command::new(python)
        .args(["-m", "kubernetes_validate", "-k", "1.33.0", "--strict"])
        .args(manifests())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("No module named"),
        "kubernetes-validate is missing: run scripts/bootstrap.sh\n{text}"
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("passed").count(), manifests().len(), "{text}");
}

#[test]
fn a_broken_manifest_is_caught() {
    let python = python3();
    let text = std::fs::read_to_string(dir().join("deployment.yaml")).unwrap();
    let broken = common::scratch_dir().join("broken.yaml");
    // A misspelt field (strict mode) and a number given as text.
    let broken_text = text
        .replace("restartPolicy: Always", "restartPolcy: Always")
        .replace(
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: thirty",
        );
    std::fs::write(&broken, broken_text).unwrap();
    let out = Command::new(python)
        .args(["-m", "kubernetes_validate", "-k", "1.33.0", "--strict"])
        .arg(&broken)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("restartPolcy"), "{stdout}");
}

fn sidecar(deployment: &Value) -> &Value {
    let spec = &deployment["spec"]["template"]["spec"];
    spec["initContainers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "sturnus")
        .expect("sturnus is an init container")
}

#[test]
fn sturnus_is_a_native_sidecar_with_probes_on_the_metrics_listener() {
    let d = load("deployment.yaml");
    let s = sidecar(&d);
    assert_eq!(s["restartPolicy"], "Always");
    let port = s["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(s["ports"][0]["name"], "metrics");
    for probe in ["startupProbe", "readinessProbe"] {
        assert_eq!(s[probe]["httpGet"]["path"], "/health", "{probe}");
        assert_eq!(s[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    let liveness = s["livenessProbe"]["exec"]["command"].as_sequence().unwrap();
    assert_eq!(liveness[1], "healthcheck");
    let annotations = &d["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], port.to_string().as_str());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "my-app"
    );
    let sa = load("serviceaccount.yaml");
    assert_eq!(sa["metadata"]["name"], "my-app");
    assert!(sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"].is_string());
    let mounts = s["volumeMounts"].as_sequence().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/config.toml"));
    assert_eq!(s["envFrom"][0]["secretRef"]["name"], "sturnus-keys");
}

#[test]
fn the_termination_grace_covers_the_drain() {
    let d = load("deployment.yaml");
    let grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let drain = sturnus::server::GRACE_PERIOD_SECS + sturnus::server::SHUTDOWN_TIMEOUT_SECS;
    assert!(drain < grace, "drain {drain}s does not fit {grace}s");
    let yaml = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/pingora.yaml");
    let conf: Value = serde_yaml::from_str(&std::fs::read_to_string(yaml).unwrap()).unwrap();
    let file_drain = conf["grace_period_seconds"].as_u64().unwrap()
        + conf["graceful_shutdown_timeout_seconds"].as_u64().unwrap();
    assert!(
        file_drain < grace,
        "conf/pingora.yaml drain {file_drain}s does not fit {grace}s"
    );
}

#[test]
fn the_configmap_config_passes_sturnus_check_with_the_pod_environment() {
    let cm = load("configmap.yaml");
    let config = cm["data"]["config.toml"].as_str().unwrap();
    let scratch = common::scratch_dir();
    let path = scratch.join("config.toml");
    std::fs::write(&path, config).unwrap();
    let secret = load("secret.yaml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sturnus"));
    cmd.env_clear()
        .env("HOME", &scratch)
        .env("POD_IP", "10.12.0.7")
        .arg("check")
        .arg("--config")
        .arg(&path);
    for (k, _) in secret["stringData"].as_mapping().unwrap() {
        cmd.env(k.as_str().unwrap(), "sk-placeholder");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("sk-placeholder"), "{stdout}");
    assert!(
        config.contains("listen = \"127.0.0.1:4000\""),
        "the proxy stays on loopback"
    );
    assert!(config.contains("metrics_listen = \"${POD_IP}:4040\""));
}
