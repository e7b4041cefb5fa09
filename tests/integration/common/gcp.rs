//! Mock Google endpoints on loopback: the GCE/GKE metadata server and the OAuth token endpoint.
//!
//! One small HTTP/1.1 server plays both roles, speaking their real wire formats. It issues
//! tokens with a chosen lifetime and remembers when each expires, so tests can check that every
//! request carried a token that was valid; as a token endpoint it verifies service-account JWTs
//! (signature, `kid`, claims) and refresh-token grants before issuing anything.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The token path the metadata server serves.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// The OAuth scope sturnus must ask for.
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

/// What a service-account assertion must look like to be accepted.
#[derive(Clone)]
pub struct ServiceAccountExpectation {
    /// `iss` claim.
    pub email: String,
    /// JWT header `kid`.
    pub key_id: String,
    /// PEM public key that must verify the signature.
    pub public_pem: String,
    /// `aud` claim: the `token_uri` of the key file (this mock's own, or a TLS front's).
    pub audience: String,
}

/// What a refresh-token grant must carry to be accepted.
#[derive(Clone)]
pub struct UserExpectation {
    /// `client_id`.
    pub client_id: String,
    /// `client_secret`.
    pub client_secret: String,
    /// `refresh_token`.
    pub refresh_token: String,
}

/// A request the mock received.
#[derive(Debug, Clone)]
pub struct MockRequest {
    /// Method.
    pub method: String,
    /// Path (with query, if any).
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl MockRequest {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        sturnus::fake_provider::header_value(&self.headers, name)
    }
}

/// A token the mock issued.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    /// The access token.
    pub token: String,
    /// When it stops being valid.
    pub expires_at: Instant,
}

#[derive(Default)]
struct State {
    lifetime: u64,
    service_account: Option<ServiceAccountExpectation>,
    user: Option<UserExpectation>,
    issued: Vec<IssuedToken>,
    requests: Vec<MockRequest>,
    rejections: Vec<String>,
}

/// A running mock; dropping it closes the port.
pub struct GcpMock {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Whether token answers may go out (`false`: requests are held until released).
    gate: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

impl GcpMock {
    /// Starts on an ephemeral loopback port, issuing tokens valid for `lifetime_secs`.
    pub async fn start(lifetime_secs: u64) -> GcpMock {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), lifetime_secs).await
    }

    /// Starts on a given address (to bring a "down" server back on its old port).
    pub async fn start_on(addr: SocketAddr, lifetime_secs: u64) -> GcpMock {
        let listener = TcpListener::bind(addr).await.expect("bind mock");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            lifetime: lifetime_secs,
            ..State::default()
        }));
        let shared = state.clone();
        let gate = Arc::new(watch::channel(true).0);
        let gate_rx = gate.subscribe();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                let gate = gate_rx.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, shared, gate).await;
                });
            }
        });
        GcpMock {
            addr,
            state,
            gate,
            task,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `127.0.0.1:port`, the value for `GCE_METADATA_HOST`.
    pub fn metadata_host(&self) -> String {
        self.addr.to_string()
    }

    /// `http://127.0.0.1:port/token`, the `token_uri` for credentials files.
    pub fn token_uri(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// Accepts JWT-bearer grants signed as described.
    pub fn expect_service_account(&self, e: ServiceAccountExpectation) {
        self.lock().service_account = Some(e);
    }

    /// Accepts refresh-token grants with these values.
    pub fn expect_user(&self, e: UserExpectation) {
        self.lock().user = Some(e);
    }

    /// Holds every answer (a slow token endpoint) until [`GcpMock::release`].
    pub fn hold(&self) {
        self.gate.send_replace(false);
    }

    /// Lets held and future answers go out.
    pub fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Every token issued so far, oldest first.
    pub fn issued(&self) -> Vec<IssuedToken> {
        self.lock().issued.clone()
    }

    /// The issued token with this value, if the mock issued it.
    pub fn find(&self, token: &str) -> Option<IssuedToken> {
        self.lock()
            .issued
            .iter()
            .find(|t| t.token == token)
            .cloned()
    }

    /// Every request received, oldest first.
    pub fn requests(&self) -> Vec<MockRequest> {
        self.lock().requests.clone()
    }

    /// Why grants were refused, oldest first.
    pub fn rejections(&self) -> Vec<String> {
        self.lock().rejections.clone()
    }
}

impl Drop for GcpMock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request, answers it, closes.
async fn serve(
    mut stream: TcpStream,
    state: Arc<Mutex<State>>,
    mut gate: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (request, body_start, content_length) = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(len)) = req.parse(&buf) {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).to_string(),
                    )
                })
                .collect();
            let cl = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            let r = MockRequest {
                method: req.method.unwrap_or("").to_string(),
                path: req.path.unwrap_or("").to_string(),
                headers,
                body: String::new(),
            };
            break (r, len, cl);
        }
    };
    while buf.len() < body_start + content_length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let end = (body_start + content_length).min(buf.len());
    let mut request = request;
    request.body = String::from_utf8_lossy(&buf[body_start..end]).to_string();

    state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .requests
        .push(request.clone());
    let _ = gate.wait_for(|open| *open).await;
    let (status, content_type, body) = answer(&request, &state);
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        if status == 200 { "OK" } else { "Error" },
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Routes one request: metadata token, OAuth token endpoint, or 404.
fn answer(req: &MockRequest, state: &Mutex<State>) -> (u16, &'static str, String) {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", METADATA_TOKEN_PATH) => {
            if req.header("metadata-flavor") != Some("Google") {
                return (
                    403,
                    "text/plain",
                    "Missing Metadata-Flavor:Google header.".into(),
                );
            }
            issue(&mut s)
        }
        ("POST", "/token") => {
            let form = parse_form(&req.body);
            let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let verdict = match get("grant_type") {
                Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
                    verify_assertion(get("assertion").unwrap_or(""), s.service_account.as_ref())
                }
                Some("refresh_token") => match &s.user {
                    Some(u)
                        if get("client_id") == Some(u.client_id.as_str())
                            && get("client_secret") == Some(u.client_secret.as_str())
                            && get("refresh_token") == Some(u.refresh_token.as_str()) =>
                    {
                        Ok(())
                    }
                    _ => Err("Bad client or refresh token".to_string()),
                },
                _ => Err("unsupported grant_type".to_string()),
            };
            match verdict {
                Ok(()) => issue(&mut s),
                Err(why) => {
                    s.rejections.push(why.clone());
                    let body =
                        serde_json::json!({"error": "invalid_grant", "error_description": why});
                    (400, "application/json", body.to_string())
                }
            }
        }
        _ => (404, "text/plain", "Not Found".into()),
    }
}

/// Issues a fresh token valid for the configured lifetime.
fn issue(s: &mut State) -> (u16, &'static str, String) {
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let token = format!("ya29.mock-{n}-{nanos:09}");
    let now = Instant::now();
    s.issued.push(IssuedToken {
        token: token.clone(),
        expires_at: now + Duration::from_secs(s.lifetime),
    });
    let body = serde_json::json!({
        "access_token": token,
        "expires_in": s.lifetime,
        "token_type": "Bearer",
    });
    (200, "application/json", body.to_string())
}

/// Checks a service-account assertion the way Google's token endpoint does.
fn verify_assertion(jwt: &str, expected: Option<&ServiceAccountExpectation>) -> Result<(), String> {
    let e = expected.ok_or("no service account is known here")?;
    let header =
        jsonwebtoken::decode_header(jwt).map_err(|err| format!("bad JWT header: {err}"))?;
    if header.alg != Algorithm::RS256 {
        return Err(format!("alg is {:?}, expected RS256", header.alg));
    }
    if header.kid.as_deref() != Some(e.key_id.as_str()) {
        return Err(format!("kid is {:?}, expected {}", header.kid, e.key_id));
    }
    let key = DecodingKey::from_rsa_pem(e.public_pem.as_bytes()).map_err(|err| err.to_string())?;
    let mut v = Validation::new(Algorithm::RS256);
    v.set_audience(&[e.audience.as_str()]);
    v.set_issuer(&[e.email.as_str()]);
    v.set_required_spec_claims(&["exp", "iat", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(jwt, &key, &v)
        .map_err(|err| format!("Invalid JWT Signature or claims: {err}"))?
        .claims;
    if claims["scope"] != CLOUD_PLATFORM {
        return Err(format!(
            "scope is {}, expected {CLOUD_PLATFORM}",
            claims["scope"]
        ));
    }
    let iat = claims["iat"].as_u64().ok_or("iat is not a number")?;
    let exp = claims["exp"].as_u64().ok_or("exp is not a number")?;
    if exp != iat + 3600 {
        return Err(format!(
            "exp - iat is {}, expected 3600",
            exp as i64 - iat as i64
        ));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if iat.abs_diff(now) > 60 {
        return Err(format!("iat {iat} is not now ({now})"));
    }
    Ok(())
}

/// Decodes `application/x-www-form-urlencoded`.
fn parse_form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// A fresh 2048-bit RSA key pair made with the `openssl` command: (PKCS#8 private PEM, public PEM).
pub fn rsa_key_pair(dir: &Path) -> (String, String) {
    let private = dir.join(format!(
        "key-{}.pem",
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let public = private.with_extension("pub.pem");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("the openssl command is needed to generate test keys");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = private.to_str().unwrap();
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        p,
    ]);
    run(&[
        "pkey",
        "-in",
        p,
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    (
        std::fs::read_to_string(&private).unwrap(),
        std::fs::read_to_string(&public).unwrap(),
    )
}

/// A service-account key file as Google issues them, with `token_uri` pointing at `token_uri`.
pub fn service_account_json(
    email: &str,
    key_id: &str,
    private_pem: &str,
    token_uri: &str,
) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": "sturnus-test",
        "private_key_id": key_id,
        "private_key": private_pem,
        "client_email": email,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
    })
    .to_string()
}
