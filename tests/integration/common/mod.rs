//! Shared harness for the black-box tests: the real sturnus binary on loopback, in front of
//! fake providers that speak OpenAI's wire format.

pub mod elf;
pub mod exposition;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod gcp;

#[allow(unused_imports)]
pub use sturnus::fake_provider::{FakeProvider, Fault, DEFAULT_CHUNKS};

pub mod tls;

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A free loopback port for a sturnus listener. Chosen below the kernel's ephemeral range
/// (where the fake providers' port-0 listeners land), so they cannot take it between the
/// check and sturnus's bind; checked by binding it once.
pub fn free_port() -> u16 {
    static SALT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(SALT.fetch_add(7_919, Ordering::Relaxed))
        .wrapping_add(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0),
        );
    for i in 0..1000u32 {
        let port = 20_000 + (seed.wrapping_add(i.wrapping_mul(104_729)) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// A scratch directory unique to this test process and call.
pub fn scratch_dir() -> PathBuf {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sturnus-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A running sturnus process; killed on drop.
pub struct Proxy {
    child: Child,
    /// The proxy listener.
    pub addr: SocketAddr,
    /// Where the process's stdout and stderr go.
    pub log_path: PathBuf,
    /// The directory holding the config and log.
    pub dir: PathBuf,
}

/// `[provider.NAME]` for a fake provider, with an optional API key.
pub fn provider_toml(name: &str, sim: &FakeProvider, key: Option<&str>) -> String {
    let mut s = format!("[provider.{name}]\nbase_url = \"{}/v1\"\n", sim.base_url());
    if let Some(key) = key {
        s.push_str(&format!("api_key = \"{key}\"\n"));
    }
    s
}

/// A config with the fake provider `name` (with an optional API key) as alias `fast`'s one
/// candidate, model `model`.
pub fn fast_alias_config(name: &str, sim: &FakeProvider, model: &str, key: Option<&str>) -> String {
    format!(
        "{}\n[model]\nfast = [{{ provider = \"{name}\", model = \"{model}\" }}]\n",
        provider_toml(name, sim, key)
    )
}

/// Two fake providers `a` (model `ma`) and `b` (model `mb`) as alias `fast`, sturnus in
/// front; `extra` is appended to the config (a `[routing]` table, more aliases).
pub async fn two_candidates(extra: &str) -> (FakeProvider, FakeProvider, Proxy) {
    let (a, b, config) = two_candidates_config(extra).await;
    let proxy = Proxy::start(&config).await;
    (a, b, proxy)
}

/// [`two_candidates`]'s providers and config, for tests that start sturnus themselves.
pub async fn two_candidates_config(extra: &str) -> (FakeProvider, FakeProvider, String) {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    let config = format!(
        "{}{}\n[model]\nfast = [{{ provider = \"a\", model = \"ma\" }}, {{ provider = \"b\", model = \"mb\" }}]\n{extra}",
        provider_toml("a", &a, None),
        provider_toml("b", &b, None)
    );
    (a, b, config)
}

/// A fake provider `up` (with an optional API key) as alias `fast`'s one candidate, model
/// `model`, and sturnus in front; `extra` is appended to the config (e.g. a `[routing]` table).
pub async fn one_provider(model: &str, key: Option<&str>, extra: &str) -> (FakeProvider, Proxy) {
    let sim = FakeProvider::start("up").await.unwrap();
    let config = fast_alias_config("up", &sim, model, key) + extra;
    let proxy = Proxy::start(&config).await;
    (sim, proxy)
}

/// GETs `path` from sturnus's proxy listener.
pub async fn get(proxy: &Proxy, path: &str) -> reqwest::Response {
    get_url(proxy.url(path)).await
}

/// GETs `url` with the tests' [`client`].
pub async fn get_url(url: impl reqwest::IntoUrl) -> reqwest::Response {
    client().get(url).send().await.unwrap()
}

/// POSTs a chat for alias `fast` to `url` with `client`.
pub async fn send_chat(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    stream: bool,
) -> reqwest::Response {
    client
        .post(url)
        .body(chat_body("fast", stream))
        .send()
        .await
        .unwrap()
}

/// [`send_chat`], checking the answer is 200.
pub async fn chat_ok(client: &reqwest::Client, url: &str, stream: bool) -> reqwest::Response {
    let resp = send_chat(client, url, stream).await;
    assert_eq!(resp.status(), 200);
    resp
}

/// The candidate served by `provider` in the first alias of a `/status` document.
pub fn status_candidate<'s>(
    status: &'s serde_json::Value,
    provider: &str,
) -> &'s serde_json::Value {
    status["aliases"][0]["candidates"]
        .as_array()
        .and_then(|cands| cands.iter().find(|c| c["provider"] == provider))
        .unwrap_or_else(|| panic!("no candidate of provider {provider} in {status}"))
}

/// The provider that served `resp` (its `x-sturnus-provider` header).
pub fn served_by(resp: &reqwest::Response) -> String {
    resp.headers()["x-sturnus-provider"]
        .to_str()
        .unwrap()
        .to_string()
}

/// How to launch sturnus beyond its config.
#[derive(Default, Clone, Copy)]
pub struct Launch<'a> {
    /// Extra environment variables.
    pub env: &'a [(&'a str, &'a str)],
    /// Extra command-line arguments.
    pub args: &'a [&'a str],
    /// Start from an empty environment, like `env -i` (no `PATH`, `HOME`, `RUST_LOG`, ...).
    pub clear_env: bool,
    /// Run inside an empty root (`chroot`) holding only the binary, `/config.toml` and these
    /// files (name in the root, source path) — what a `FROM scratch` image has. Needs root and
    /// a static binary.
    pub scratch_root: Option<&'a [(&'a str, &'a std::path::Path)]>,
    /// The host part of `listen` (default `127.0.0.1`; the tests still reach it on 127.0.0.1).
    pub listen_host: Option<&'a str>,
}

impl Proxy {
    /// Starts sturnus with `config` (everything but `listen`, which the harness sets).
    pub async fn start(config: &str) -> Proxy {
        Proxy::start_with(config, &[], &[]).await
    }

    /// Starts sturnus with extra environment variables and command-line arguments.
    pub async fn start_with(config: &str, env: &[(&str, &str)], args: &[&str]) -> Proxy {
        Proxy::launch(
            config,
            Launch {
                env,
                args,
                ..Launch::default()
            },
        )
        .await
    }

    /// Starts sturnus listening on `host` (the tests still reach it on 127.0.0.1).
    pub async fn start_listening(
        host: &str,
        config: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Proxy {
        Proxy::launch(
            config,
            Launch {
                env,
                args,
                listen_host: Some(host),
                ..Launch::default()
            },
        )
        .await
    }

    /// Starts sturnus as `how` says and waits until it serves.
    pub async fn launch(config: &str, how: Launch<'_>) -> Proxy {
        for _ in 0..3 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let mut proxy = Proxy::spawn(addr, config, how);
            if proxy.wait_healthy().await {
                return proxy;
            }
        }
        panic!("sturnus could not bind a listener in three attempts");
    }

    /// Spawns sturnus with `listen = addr` and `config` in a fresh scratch directory, without
    /// waiting for it (a process started with `-u` serves only once the old one hands over).
    pub fn spawn(addr: SocketAddr, config: &str, how: Launch<'_>) -> Proxy {
        let dir = scratch_dir();
        let host = how.listen_host.unwrap_or("127.0.0.1");
        let text = format!("listen = \"{host}:{}\"\n{config}", addr.port());
        let log_path = dir.join("sturnus.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut cmd = match how.scratch_root {
            Some(files) => {
                let root = dir.join("root");
                std::fs::create_dir_all(&root).unwrap();
                let bin = root.join("sturnus");
                if std::fs::hard_link(env!("CARGO_BIN_EXE_sturnus"), &bin).is_err() {
                    std::fs::copy(env!("CARGO_BIN_EXE_sturnus"), &bin).unwrap();
                }
                std::fs::write(root.join("config.toml"), text).unwrap();
                for (name, src) in files {
                    std::fs::copy(src, root.join(name)).unwrap();
                }
                let mut cmd = Command::new(chroot_command());
                cmd.arg(&root)
                    .args(["/sturnus", "--config", "/config.toml"]);
                cmd
            }
            None => {
                let config_path = dir.join("config.toml");
                std::fs::write(&config_path, text).unwrap();
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_sturnus"));
                cmd.arg("--config").arg(&config_path);
                cmd
            }
        };
        if how.clear_env {
            cmd.env_clear();
        } else {
            cmd.env("RUST_LOG", "info");
        }
        cmd.args(how.args)
            .envs(how.env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd.spawn().expect("spawn sturnus");
        Proxy {
            child,
            addr,
            log_path,
            dir,
        }
    }

    /// Waits until this process (checked by pid) serves `/status`; false if it could not bind.
    pub async fn wait_healthy(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = client();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let logs = self.logs();
                if logs.contains("Address already in use") {
                    return false;
                }
                panic!("sturnus exited with {status}:\n{logs}");
            }
            if let Ok(r) = client.get(self.url("/status")).send().await {
                // With [auth], /status needs a credential: this process answering is enough.
                if r.status() == 401 {
                    return true;
                }
                if let Ok(v) = r.json::<serde_json::Value>().await {
                    if v["pid"] == self.pid() {
                        return true;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("sturnus did not become healthy:\n{}", self.logs());
    }

    /// Sends a signal (`SIGTERM`, `SIGQUIT`, ...) to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).expect("send signal");
    }

    /// Waits up to `limit` for the process to exit; its status, or `None` if still running.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Everything the process printed so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The process id (to send signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET /status` as JSON.
    pub async fn status(&self) -> serde_json::Value {
        client()
            .get(self.url("/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The `/metrics` page as text.
    pub async fn metrics_text(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("scrape /metrics")
            .text()
            .await
            .unwrap()
    }

    /// The `/metrics` page, parsed (a malformed page fails the test, showing it).
    pub async fn metrics(&self) -> exposition::Exposition {
        let text = self.metrics_text().await;
        exposition::Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// Scrapes `/metrics` once nothing is in flight any more (every request's accounting is
    /// done).
    pub async fn settled_metrics(&self) -> exposition::Exposition {
        for _ in 0..400 {
            let m = self.metrics().await;
            if m.series("sturnus_inflight_requests")
                .iter()
                .all(|s| s.value == 0.0)
            {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("requests still in flight");
    }
}

impl Proxy {
    /// `/status` → `budget.in_use_bytes`.
    pub async fn budget_in_use(&self) -> u64 {
        self.status().await["budget"]["in_use_bytes"]
            .as_u64()
            .expect("budget.in_use_bytes")
    }

    /// Waits (up to 5 s) until every reserved byte is back in the budget.
    pub async fn expect_budget_full(&self, after: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let used = self.budget_in_use().await;
            if used == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{used} bytes still reserved after {after}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A field of the process's `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} not in /proc/<pid>/status"))
    }
}

/// What a raw TCP exchange got back.
#[derive(Debug)]
pub struct RawReply {
    /// Every byte received until the connection closed (or the wait ended).
    pub bytes: Vec<u8>,
    /// Whether the server closed the connection (rather than the wait running out).
    pub closed: bool,
}

impl RawReply {
    /// The status code of the first response, if one arrived.
    pub fn status(&self) -> Option<u16> {
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut hs);
        resp.parse(&self.bytes).ok()?;
        resp.code
    }

    /// A header of the first response.
    pub fn header(&self, name: &str) -> Option<String> {
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut hs);
        resp.parse(&self.bytes).ok()?;
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    }

    /// The body of the first response parsed as JSON (it must carry a Content-Length).
    pub fn json(&self) -> serde_json::Value {
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut hs);
        let Ok(httparse::Status::Complete(head)) = resp.parse(&self.bytes) else {
            panic!(
                "no complete response: {:?}",
                String::from_utf8_lossy(&self.bytes)
            );
        };
        serde_json::from_slice(&self.bytes[head..]).expect("JSON body")
    }
}

/// Connects to `addr`, writes `request` (write errors are ignored: a server may refuse early),
/// and reads until the server closes the connection or `wait` passes.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> RawReply {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(request).await;
    read_until_closed(&mut stream, wait).await
}

/// Reads from `stream` until it closes or `wait` passes.
pub async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    wait: Duration,
) -> RawReply {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + wait;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return RawReply {
                    bytes,
                    closed: true,
                }
            }
            Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
            Err(_) => {
                return RawReply {
                    bytes,
                    closed: false,
                }
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `chroot` command (absolute, since a cleared environment has no `PATH`).
fn chroot_command() -> &'static str {
    ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chroot(8) is installed")
}

/// Whether this test process runs as root (needed for `chroot`).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A reqwest client with no proxy settings from the environment.
pub fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(30))
}

/// [`client`] allowing `timeout` per request.
pub fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap()
}

/// Runs `sturnus <subcommand> <args>` to its end.
pub fn run_sturnus(subcommand: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .arg(subcommand)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run sturnus {subcommand}: {e}"))
}

/// POSTs a raw body to a path on the proxy.
pub async fn post(proxy: &Proxy, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    client()
        .post(proxy.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request to sturnus")
}

/// POSTs `body` to the chat endpoint as a chunked upload (no `Content-Length`), in pieces of
/// `piece` bytes.
pub async fn post_chunked(proxy: &Proxy, body: &str, piece: usize) -> reqwest::Response {
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> = body
        .as_bytes()
        .chunks(piece)
        .map(|c| Ok(c.to_vec()))
        .collect();
    client()
        .post(proxy.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            pieces,
        )))
        .send()
        .await
        .expect("chunked request to sturnus")
}

/// Reads `body` a piece at a time with `pause` after each, for `during`; returns the bytes read.
/// The caller keeps the rest of the body.
pub async fn read_slowly<S>(body: &mut S, during: Duration, pause: Duration) -> u64
where
    S: futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    use futures_util::StreamExt;
    let until = Instant::now() + during;
    let mut read = 0u64;
    while Instant::now() < until {
        read += body.next().await.unwrap().unwrap().len() as u64;
        tokio::time::sleep(pause).await;
    }
    read
}

/// A JSON chat body of exactly `size` bytes whose model is `model`.
pub fn chat_of_size(model: &str, size: usize) -> String {
    let head = format!("{{\"model\":\"{model}\",\"messages\":[{{\"role\":\"user\",\"content\":\"");
    let tail = "\"}]}";
    let pad = size - head.len() - tail.len();
    let filler: String = "lorem ipsum ".chars().cycle().take(pad).collect();
    let body = format!("{head}{filler}{tail}");
    assert_eq!(body.len(), size);
    body
}

/// A small chat completion body for `model`.
pub fn chat_body(model: &str, stream: bool) -> String {
    format!(
        r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}], "stream": {stream}}}"#
    )
}

/// Parses a JSON error answer and returns `error` object.
pub async fn error_of(resp: reqwest::Response) -> serde_json::Value {
    let v: serde_json::Value = resp.json().await.expect("JSON error body");
    v["error"].clone()
}

/// Lets this process (and the sturnus it starts) open `n` files, if the hard limit allows.
pub fn allow_open_files(n: u64) {
    let (soft, hard) = rlimit::Resource::NOFILE.get().expect("RLIMIT_NOFILE");
    if soft < n {
        rlimit::Resource::NOFILE
            .set(n.min(hard), hard)
            .expect("raise RLIMIT_NOFILE");
    }
}
