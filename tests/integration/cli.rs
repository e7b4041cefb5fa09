//! The binary's command line: `check`, config errors at startup, `--env-file`, Pingora's flags.

use crate::common;

use std::process::{Command, Output};

fn sturnus(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sturnus"));
    cmd.args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("GROQ_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sturnus")
}

fn write(name: &str, text: &str) -> String {
    let path = common::scratch_dir().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

const GOOD: &str = r#"
listen = "127.0.0.1:4000"

[provider.openai]
base_url = "https://api.openai.com/v1"
api_key = "${OPENAI_API_KEY}"

[provider.groq]
base_url = "https://api.groq.com/openai/v1"
api_key = "${GROQ_API_KEY:-}"

[model]
fast = [
  { provider = "groq",   model = "llama-3.3-70b-versatile" },
  { provider = "openai", model = "gpt-4o-mini" },
]
"#;

#[test]
fn check_prints_aliases_with_secrets_masked() {
    let config = write("good.toml", GOOD);
    let out = sturnus(
        &["check", "--config", &config],
        &[("OPENAI_API_KEY", "sk-live-very-secret")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("fast"), "{stdout}");
    assert!(stdout.contains("llama-3.3-70b-versatile"), "{stdout}");
    assert!(stdout.contains("gpt-4o-mini"), "{stdout}");
    assert!(stdout.contains("***"), "{stdout}");
    assert!(!stdout.contains("sk-live-very-secret"), "{stdout}");
}

#[test]
fn every_problem_is_reported_with_its_key() {
    let config = write(
        "bad.toml",
        r#"
listen = "localhost"
[provider.openai]
base_url = "ftp://example.com"
[model]
fast = [{ provider = "opnai", model = "gpt-4o-mini" }]
empty = []
[routing]
ewma_alpah = 0.3
exploit_k = -1
"#,
    );
    let out = sturnus(&["check", "--config", &config], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in [
        "listen",
        "provider.openai.base_url",
        "model.fast[0].provider",
        "model.empty",
        "routing.ewma_alpah",
        "routing.exploit_k",
    ] {
        assert!(
            stderr.lines().any(|l| l.trim_start().starts_with(key)),
            "no line for {key}:\n{stderr}"
        );
    }
    assert!(stderr.contains("ewma_alpha"), "no suggestion:\n{stderr}");
}

#[test]
fn an_unset_variable_stops_startup_naming_variable_and_key() {
    let config = write("env.toml", GOOD);
    for args in [
        vec!["check", "--config", &config],
        vec!["--config", &config],
    ] {
        let out = sturnus(&args, &[]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
        assert!(stderr.contains("provider.openai.api_key"), "{stderr}");
    }
}

#[test]
fn env_file_fills_in_but_never_overrides() {
    let config = write("envfile.toml", GOOD);
    let env_file = write(
        "keys.env",
        "# keys for local runs\n\nexport OPENAI_API_KEY=sk-from-file\nGROQ_API_KEY='gsk-from-file'\n",
    );
    let out = sturnus(
        &["check", "--config", &config, "--env-file", &env_file],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("sk-from-file") && !stdout.contains("gsk-from-file"));

    // A variable already in the environment wins over the file's value.
    let config = write(
        "listen.toml",
        &GOOD.replace("127.0.0.1:4000", "${LISTEN_ADDR}"),
    );
    let env_file = write(
        "listen.env",
        "LISTEN_ADDR=127.0.0.1:5001\nOPENAI_API_KEY=k\n",
    );
    let from_file = sturnus(
        &["check", "--config", &config, "--env-file", &env_file],
        &[],
    );
    assert!(String::from_utf8_lossy(&from_file.stdout).contains("127.0.0.1:5001"));
    let from_env = sturnus(
        &["check", "--config", &config, "--env-file", &env_file],
        &[("LISTEN_ADDR", "127.0.0.1:5002")],
    );
    let stdout = String::from_utf8_lossy(&from_env.stdout);
    assert!(
        stdout.contains("127.0.0.1:5002") && !stdout.contains("5001"),
        "{stdout}"
    );

    let missing = sturnus(
        &["check", "--config", &config, "--env-file", "/nope.env"],
        &[],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--env-file"));
}

#[test]
fn a_missing_ssl_cert_file_is_a_clear_startup_error() {
    let config = write("tls.toml", GOOD);
    let out = sturnus(
        &["--config", &config],
        &[
            ("OPENAI_API_KEY", "k"),
            ("SSL_CERT_FILE", "/no/such/ca.pem"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SSL_CERT_FILE=/no/such/ca.pem"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn pingoras_test_flag_validates_and_exits() {
    let port = common::free_port();
    let config = write(
        "t.toml",
        &GOOD.replace("127.0.0.1:4000", &format!("127.0.0.1:{port}")),
    );
    let out = sturnus(&["-t", "--config", &config], &[("OPENAI_API_KEY", "k")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = write("t-bad.toml", "listen = 1\n");
    let out = sturnus(&["-t", "--config", &bad], &[]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn check_prints_the_memory_budget_and_its_source() {
    let config = write("budget.toml", GOOD);
    let out = sturnus(
        &["check", "--config", &config],
        &[("OPENAI_API_KEY", "sk-x")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("memory budget for request bodies: "))
        .unwrap_or_else(|| panic!("no budget line: {stdout}"));
    // Derived here: from the container limit if there is one, else from max_body_bytes.
    assert!(
        line.contains("half the container memory limit")
            || line.contains("128.0 MiB (134217728 bytes), 4 × routing.max_body_bytes"),
        "{line}"
    );
    let set = write(
        "budget-set.toml",
        &format!("{GOOD}\n[routing]\nmax_buffered_bytes = 1048576\n"),
    );
    let out = sturnus(&["check", "--config", &set], &[("OPENAI_API_KEY", "sk-x")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "memory budget for request bodies: 1.0 MiB (1048576 bytes), from routing.max_buffered_bytes"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("not a loopback address"), "{stdout}");
}

#[test]
fn check_warns_about_a_non_loopback_listen() {
    let config = write("open.toml", &GOOD.replace("127.0.0.1:4000", "0.0.0.0:4000"));
    let out = sturnus(
        &["check", "--config", &config],
        &[("OPENAI_API_KEY", "sk-x")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("warning: listen = 0.0.0.0:4000 is not a loopback address"),
        "{stdout}"
    );
}
