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
fn check_refuses_a_non_loopback_listen_without_auth_and_warns_when_anonymous_is_chosen() {
    let config = write("open.toml", &GOOD.replace("127.0.0.1:4000", "0.0.0.0:4000"));
    let refused = sturnus(
        &["check", "--config", &config],
        &[("OPENAI_API_KEY", "sk-x")],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("refusing to start: listen = 0.0.0.0:4000")
            && stderr.contains("[[auth.key]]")
            && stderr.contains("--allow-anonymous"),
        "{stderr}"
    );
    let out = sturnus(
        &["check", "--config", &config, "--allow-anonymous"],
        &[("OPENAI_API_KEY", "sk-x")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("warning: listen = 0.0.0.0:4000 is not a loopback address"),
        "{stdout}"
    );
}

/// A blocking `GET path` on `addr`; the status code, or `None` if nothing answers.
fn get_status(addr: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.get(9..12)?.parse().ok()
}

#[test]
fn listen_flag_and_env_override_the_file() {
    let config = write("override.toml", GOOD);
    let key = ("OPENAI_API_KEY", "sk-x");
    let listen_line = |out: &Output| {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}");
        stdout
            .lines()
            .find(|l| l.starts_with("listen: "))
            .unwrap_or_else(|| panic!("no listen line: {stdout}"))
            .to_string()
    };
    let flag = sturnus(
        &["check", "--config", &config, "--listen", "127.0.0.1:5101"],
        &[key],
    );
    assert_eq!(listen_line(&flag), "listen: 127.0.0.1:5101");
    let env = sturnus(
        &["check", "--config", &config],
        &[key, ("STURNUS_LISTEN", "127.0.0.1:5102")],
    );
    assert_eq!(listen_line(&env), "listen: 127.0.0.1:5102");
    let both = sturnus(
        &["check", "--config", &config, "--listen", "127.0.0.1:5103"],
        &[key, ("STURNUS_LISTEN", "127.0.0.1:5102")],
    );
    assert_eq!(listen_line(&both), "listen: 127.0.0.1:5103");

    let bad = sturnus(
        &["check", "--config", &config, "--listen", "localhost"],
        &[key],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--listen"));

    // The overridden address is checked against metrics_listen like the file's.
    let with_metrics = write(
        "override-metrics.toml",
        &format!("metrics_listen = \"127.0.0.1:5104\"\n{GOOD}"),
    );
    let clash = sturnus(
        &[
            "check",
            "--config",
            &with_metrics,
            "--listen",
            "127.0.0.1:5104",
        ],
        &[key],
    );
    assert_eq!(clash.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&clash.stderr)
            .contains("metrics_listen: must differ from listen (127.0.0.1:5104)"),
        "{clash:?}"
    );
}

#[test]
fn the_proxy_serves_on_the_listen_flag_not_the_files_address() {
    let in_file = common::free_port();
    let flag = common::free_port();
    let config = write(
        "serve-override.toml",
        &GOOD.replace("127.0.0.1:4000", &format!("127.0.0.1:{in_file}")),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .args([
            "--config",
            &config,
            "--listen",
            &format!("127.0.0.1:{flag}"),
        ])
        .env("OPENAI_API_KEY", "sk-x")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut status = None;
    while status.is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        status = get_status(&format!("127.0.0.1:{flag}"), "/health");
    }
    let on_file_port = get_status(&format!("127.0.0.1:{in_file}"), "/health");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        status,
        Some(200),
        "nothing served on --listen 127.0.0.1:{flag}"
    );
    assert_eq!(on_file_port, None, "the file's address was bound too");
}

#[test]
fn a_loopback_listener_in_a_container_is_warned_about_except_in_kubernetes() {
    let config = write("container.toml", GOOD);
    let check = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec![("OPENAI_API_KEY", "sk-x")];
        all.extend_from_slice(env);
        let mut argv = vec!["check", "--config", &config];
        argv.extend_from_slice(args);
        let out = sturnus(&argv, &all);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let warned = check(&[], &[("container", "podman")]);
    let line = warned
        .lines()
        .find(|l| l.contains("runs in a container"))
        .unwrap_or_else(|| panic!("no container warning: {warned}"));
    assert!(
        line.starts_with("warning: listen = 127.0.0.1:4000 is a loopback address"),
        "{line}"
    );
    assert!(line.contains("(container=podman)"), "{line}");
    assert!(
        line.contains("--listen 0.0.0.0:4000") && line.contains("STURNUS_LISTEN=0.0.0.0:4000"),
        "{line}"
    );
    assert_eq!(warned.matches("runs in a container").count(), 1, "{warned}");

    // A Kubernetes pod shares loopback between its containers: no warning there.
    let pod = check(
        &[],
        &[
            ("container", "podman"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ],
    );
    assert!(!pod.contains("runs in a container"), "{pod}");
    // Listening on all interfaces is the fix.
    let fixed = check(
        &["--listen", "0.0.0.0:4000", "--allow-anonymous"],
        &[("container", "podman")],
    );
    assert!(!fixed.contains("runs in a container"), "{fixed}");

    // The server logs the same warning once at startup.
    let port = common::free_port();
    let served = write(
        "container-serve.toml",
        &GOOD.replace("127.0.0.1:4000", &format!("127.0.0.1:{port}")),
    );
    let log = write("container-serve.log", "");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .args(["--config", &served])
        .env("OPENAI_API_KEY", "sk-x")
        .env("container", "docker")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while get_status(&format!("127.0.0.1:{port}"), "/health").is_none()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let logs = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("runs in a container (container=docker)"))
        .collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
}

/// The fenced block of `lang` that follows the line `heading` in the README.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let after = &readme[readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading} in README.md"))..];
    let fence = format!("```{lang}\n");
    let start = after.find(&fence).expect("no block after the heading") + fence.len();
    let len = after[start..].find("```\n").expect("unclosed block");
    after[start..start + len].to_string()
}

#[test]
fn the_example_config_is_the_readme_reference_and_passes_check() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/config.example.toml");
    let example = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        readme_block("## Configuration reference", "toml"),
        example,
        "README's configuration reference and conf/config.example.toml differ"
    );
    let out = sturnus(
        &["check", "--config", path],
        &[("OPENAI_API_KEY", "sk-x"), ("GROQ_API_KEY", "gsk-x")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("config OK"), "{stdout}");
    assert!(stdout.contains("llama-3.3-70b-versatile"), "{stdout}");
}

#[test]
fn the_readme_minimal_config_passes_check_verbatim() {
    let text = readme_block("## A minimal config", "toml");
    assert!(
        text.contains("[provider.openai]") && text.contains("vertex_ai = {"),
        "{text}"
    );
    let config = write("quickstart.toml", &text);
    let home = common::scratch_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .args(["check", "--config", &config])
        .env_clear()
        .env("HOME", &home)
        .env("OPENAI_API_KEY", "sk-x")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "fast",
        "openai",
        "gpt-4o-mini",
        "vertex",
        "google/gemini-2.5-flash",
    ] {
        assert!(stdout.contains(expected), "no {expected}: {stdout}");
    }
}

#[test]
fn the_demo_shows_its_tables_without_access_lines_unless_verbose() {
    let demo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sturnus"))
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let quiet = demo(&["demo", "--seconds", "3"]);
    let tables = quiet.lines().filter(|l| l.starts_with("t= ")).count();
    assert_eq!(tables, 3, "{quiet}");
    for candidate in [
        "swift/swift-large",
        "steady/steady-medium",
        "flaky/flaky-small",
    ] {
        assert!(quiet.contains(candidate), "no {candidate}: {quiet}");
    }
    assert!(quiet.contains("demo finished"), "{quiet}");
    assert!(quiet.contains("--verbose"), "{quiet}");
    let logged = |out: &str| {
        out.lines()
            .filter(|l| l.contains("\"level\":\"INFO\"") || l.contains(" INFO "))
            .count()
    };
    assert_eq!(logged(&quiet), 0, "{quiet}");
    assert!(!quiet.contains("request_id"), "{quiet}");

    // The same run with --verbose does print access lines (so their absence above means
    // something).
    let verbose = demo(&["demo", "--seconds", "2", "--verbose"]);
    assert!(verbose.contains("request_id"), "{verbose}");
    assert!(logged(&verbose) > 10, "{verbose}");
}
