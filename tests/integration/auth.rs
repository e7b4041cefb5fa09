//! `[auth]` end to end: static keys (given as `key`, or by their SHA-256 only) and JWTs, from
//! every header an SDK puts a key in; every refusal (401, 403, 429) answered by sturnus with
//! nothing forwarded; the client's credential never reaching the provider; the start-up refusal
//! of a listener others can reach without `[auth]`.

use crate::common::{
    self, chat_body, client, fast_alias_config, scratch_dir, FakeProvider, Launch, Proxy,
};
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const BILLING_KEY: &str = "sk-billing-0123456789";
const SEARCH_KEY: &str = "sk-search-9876543210";

/// A config with alias `fast` (and `slow`, on the same provider) and `auth`.
fn config(sim: &FakeProvider, auth: &str) -> String {
    format!(
        "{}slow = [{{ provider = \"up\", model = \"m\" }}]\n{auth}",
        fast_alias_config("up", sim, "m", Some("sk-provider"))
    )
}

/// The two static keys: `billing` from the environment, `search` by its SHA-256 only.
fn keys() -> String {
    let search = hex::encode(sturnus::auth::sha256(SEARCH_KEY.as_bytes()));
    format!(
        "[auth]\n[[auth.key]]\nname = \"billing\"\nkey = \"${{BILLING_KEY}}\"\naliases = [\"fast\"]\n\
         [[auth.key]]\nname = \"search\"\nsha256 = \"{search}\"\n"
    )
}

async fn chat(proxy: &Proxy, model: &str, header: Option<(&str, &str)>) -> reqwest::Response {
    let mut req = client()
        .post(proxy.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(chat_body(model, false));
    if let Some((name, value)) = header {
        req = req.header(name, value);
    }
    req.send().await.unwrap()
}

async fn code_of(resp: reqwest::Response) -> String {
    let v = common::error_of(resp).await;
    v["code"].as_str().unwrap_or_default().to_string()
}

/// The process's output once it holds `needle` (access lines are written in batches, within
/// 50 ms), or as it is after two seconds.
async fn logs_with(proxy: &Proxy, needle: &str) -> String {
    for _ in 0..100 {
        let logs = proxy.logs();
        if logs.contains(needle) {
            return logs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.logs()
}

/// The proxy listener's `/metrics`, which needs a credential with `[auth]`.
async fn metrics_with(proxy: &Proxy, key: &str) -> String {
    let resp = client()
        .get(proxy.url("/metrics"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    resp.text().await.unwrap()
}

/// Every credential-carrying header the provider received.
fn forwarded_credentials(sim: &FakeProvider) -> Vec<String> {
    sim.requests()
        .iter()
        .flat_map(|r| r.headers.iter())
        .filter(|(_, v)| v.contains(BILLING_KEY) || v.contains(SEARCH_KEY) || v.contains("eyJ"))
        .map(|(n, _)| n.clone())
        .collect()
}

#[tokio::test]
async fn static_keys_are_accepted_from_every_sdk_header_and_never_forwarded() {
    let sim = FakeProvider::start("up").await.unwrap();
    let proxy =
        Proxy::start_with(&config(&sim, &keys()), &[("BILLING_KEY", BILLING_KEY)], &[]).await;
    let bearer = format!("Bearer {BILLING_KEY}");
    for header in [
        ("authorization", bearer.as_str()),
        ("api-key", BILLING_KEY),
        ("x-api-key", BILLING_KEY),
    ] {
        let resp = chat(&proxy, "fast", Some(header)).await;
        assert_eq!(resp.status(), 200, "{header:?}");
    }
    // A key present in the config only as its hash.
    let resp = chat(&proxy, "slow", Some(("x-api-key", SEARCH_KEY))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(sim.request_count(), 4);
    assert!(
        forwarded_credentials(&sim).is_empty(),
        "{:?}",
        forwarded_credentials(&sim)
    );
    for r in sim.requests() {
        let auth = sturnus::fake_provider::header_value(&r.headers, "authorization");
        assert_eq!(
            auth,
            Some("Bearer sk-provider"),
            "the provider's own key only"
        );
    }
    let metrics = metrics_with(&proxy, SEARCH_KEY).await;
    assert!(
        metrics.contains("sturnus_client_requests_total{client=\"billing\",status_code=\"200\"} 3"),
        "{metrics}"
    );
    let logs = logs_with(&proxy, "\"client\":\"search\"").await;
    assert!(logs.contains("\"client\":\"billing\""), "{logs}");
    assert!(logs.contains("\"client\":\"search\""), "{logs}");
    assert!(
        !logs.contains(BILLING_KEY) && !logs.contains(SEARCH_KEY),
        "{logs}"
    );
}

#[tokio::test]
async fn missing_or_wrong_credentials_get_401_and_nothing_reaches_the_provider() {
    let sim = FakeProvider::start("up").await.unwrap();
    let proxy =
        Proxy::start_with(&config(&sim, &keys()), &[("BILLING_KEY", BILLING_KEY)], &[]).await;
    let missing = chat(&proxy, "fast", None).await;
    assert_eq!(missing.status(), 401);
    assert_eq!(code_of(missing).await, "invalid_api_key");
    let wrong = chat(
        &proxy,
        "fast",
        Some(("authorization", "Bearer sk-wrong-key-42")),
    )
    .await;
    assert_eq!(wrong.status(), 401);
    let body = common::error_of(wrong).await;
    assert_eq!(body["code"], "invalid_api_key");
    assert!(!body.to_string().contains("sk-wrong-key-42"), "{body}");
    assert_eq!(sim.request_count(), 0);
    // /status and /metrics need a credential on the proxy listener; probes do not.
    for path in ["/status", "/metrics", "/v1/models"] {
        let resp = client().get(proxy.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let resp = client()
            .get(proxy.url(path))
            .header("api-key", BILLING_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    for path in ["/health", "/healthz"] {
        assert_eq!(common::get(&proxy, path).await.status(), 200, "{path}");
    }
    let logs = logs_with(&proxy, "\"error_kind\":\"invalid_api_key\"").await;
    assert!(
        logs.contains("\"error_kind\":\"invalid_api_key\""),
        "{logs}"
    );
    assert!(!logs.contains("sk-wrong-key-42"), "{logs}");
}

#[tokio::test]
async fn a_client_asking_for_an_alias_it_may_not_use_gets_403() {
    let sim = FakeProvider::start("up").await.unwrap();
    let proxy =
        Proxy::start_with(&config(&sim, &keys()), &[("BILLING_KEY", BILLING_KEY)], &[]).await;
    let resp = chat(&proxy, "slow", Some(("x-api-key", BILLING_KEY))).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(code_of(resp).await, "alias_not_allowed");
    // An alias that does not exist is refused the same way: nothing is learnt of it.
    let resp = chat(&proxy, "secret-alias", Some(("x-api-key", BILLING_KEY))).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(sim.request_count(), 0);
    let logs = logs_with(&proxy, "\"error_kind\":\"alias_not_allowed\"").await;
    assert!(
        logs.contains("\"error_kind\":\"alias_not_allowed\""),
        "{logs}"
    );
}

/// An RSA key pair's JWKS entry with `kid`.
fn jwk(public_pem_path: &std::path::Path, kid: &str) -> serde_json::Value {
    let out = std::process::Command::new("openssl")
        .args(["rsa", "-pubin", "-noout", "-modulus", "-in"])
        .arg(public_pem_path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let modulus = hex::decode(text.trim().trim_start_matches("Modulus=")).unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    serde_json::json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
        "n": b64.encode(modulus), "e": "AQAB"})
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(private_pem: &str, kid: &str, claims: serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_string());
    encode(
        &header,
        &claims,
        &EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn jwts_are_checked_for_signature_kid_audience_and_expiry() {
    let sim = FakeProvider::start("up").await.unwrap();
    let dir = scratch_dir();
    let (private, public) = common::gcp::rsa_key_pair(&dir);
    let (other_private, _) = common::gcp::rsa_key_pair(&dir);
    let public_path = dir.join("jwt.pub.pem");
    std::fs::write(&public_path, public).unwrap();
    let jwks = dir.join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::json!({"keys": [jwk(&public_path, "k1")]}).to_string(),
    )
    .unwrap();
    let auth = format!(
        "[auth.jwt]\nissuer = \"https://issuer.example\"\naudience = \"sturnus\"\n\
         algorithms = [\"RS256\"]\njwks = \"{}\"\nname_claim = \"sub\"\n\
         aliases_claim = \"sturnus_aliases\"\n",
        jwks.display()
    );
    let proxy = Proxy::start(&config(&sim, &auth)).await;
    let claims = |exp: u64, aud: &str| {
        serde_json::json!({"iss": "https://issuer.example", "aud": aud, "sub": "svc-orders",
            "exp": exp, "sturnus_aliases": ["fast"]})
    };
    let bearer = |t: String| format!("Bearer {t}");
    let good = bearer(token(&private, "k1", claims(now() + 600, "sturnus")));
    let resp = chat(&proxy, "fast", Some(("authorization", &good))).await;
    assert_eq!(resp.status(), 200);
    let denied = chat(&proxy, "slow", Some(("authorization", &good))).await;
    assert_eq!(denied.status(), 403);
    let cases = [
        (
            "expired",
            token(&private, "k1", claims(now() - 3600, "sturnus")),
            "expired",
        ),
        (
            "wrong audience",
            token(&private, "k1", claims(now() + 600, "other")),
            "audience",
        ),
        (
            "wrong signature",
            token(&other_private, "k1", claims(now() + 600, "sturnus")),
            "signature",
        ),
        (
            "unknown kid",
            token(&private, "k9", claims(now() + 600, "sturnus")),
            "kid",
        ),
    ];
    for (what, t, said) in cases {
        let resp = chat(&proxy, "fast", Some(("authorization", &bearer(t)))).await;
        assert_eq!(resp.status(), 401, "{what}");
        let body = common::error_of(resp).await;
        assert_eq!(body["code"], "invalid_api_key", "{what}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(said), "{what}: {message}");
    }
    assert_eq!(
        sim.request_count(),
        1,
        "only the good token's request was forwarded"
    );
    assert!(forwarded_credentials(&sim).is_empty());
    assert!(logs_with(&proxy, "\"client\":\"svc-orders\"")
        .await
        .contains("\"client\":\"svc-orders\""));
}

#[tokio::test]
async fn per_client_limits_refuse_the_burst_of_one_client_and_not_the_other() {
    let sim = FakeProvider::start("up").await.unwrap();
    let auth =
        "[auth]\n[[auth.key]]\nname = \"greedy\"\nkey = \"sk-greedy\"\nrequests_per_minute = 3\n\
                [[auth.key]]\nname = \"calm\"\nkey = \"sk-calm\"\nrequests_per_minute = 100\n\
                [[auth.key]]\nname = \"single\"\nkey = \"sk-single\"\nmax_inflight = 1\n";
    let proxy = Proxy::start(&config(&sim, auth)).await;
    let burst = |key: &'static str| {
        let proxy = &proxy;
        async move {
            let sends = (0..6).map(|_| chat(proxy, "fast", Some(("x-api-key", key))));
            futures_util::future::join_all(sends).await
        }
    };
    let (greedy, calm) = tokio::join!(burst("sk-greedy"), burst("sk-calm"));
    assert!(
        calm.iter().all(|r| r.status() == 200),
        "the other client is unaffected"
    );
    let limited: Vec<&reqwest::Response> = greedy.iter().filter(|r| r.status() == 429).collect();
    assert_eq!(limited.len(), 3, "3 of 6 pass a limit of 3 per minute");
    for resp in &limited {
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=120).contains(&retry), "{retry}");
    }
    for resp in greedy.into_iter().filter(|r| r.status() == 429) {
        assert_eq!(code_of(resp).await, "client_rate_limited");
    }
    assert_eq!(sim.request_count(), 9);

    // max_inflight: a second request while the first is in flight is refused.
    sim.behaviour.set_latency(Duration::from_millis(600));
    let (a, b) = tokio::join!(
        chat(&proxy, "fast", Some(("x-api-key", "sk-single"))),
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            chat(&proxy, "fast", Some(("x-api-key", "sk-single"))).await
        }
    );
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 429));
    sim.behaviour.set_latency(Duration::ZERO);
    assert_eq!(
        chat(&proxy, "fast", Some(("x-api-key", "sk-single")))
            .await
            .status(),
        200
    );

    let metrics = metrics_with(&proxy, "sk-calm").await;
    for line in [
        "sturnus_client_rate_limited_total{client=\"greedy\",limit=\"requests_per_minute\"} 3",
        "sturnus_client_rate_limited_total{client=\"single\",limit=\"max_inflight\"} 1",
        "sturnus_client_requests_total{client=\"calm\",status_code=\"200\"} 6",
        "sturnus_client_requests_total{client=\"greedy\",status_code=\"429\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    // The provider's own 429s are elsewhere: none was counted.
    assert!(
        !metrics.contains(
            "sturnus_requests_total{alias=\"fast\",model=\"m\",provider=\"up\",status_code=\"429\"}"
        ),
        "{metrics}"
    );
    assert!(proxy
        .logs()
        .contains("\"error_kind\":\"client_rate_limited\""));
}

#[tokio::test]
async fn a_listener_others_can_reach_without_auth_refuses_to_start() {
    let sim = FakeProvider::start("up").await.unwrap();
    let text = fast_alias_config("up", &sim, "m", None);
    let addr = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let how = Launch {
        listen_host: Some("0.0.0.0"),
        ..Launch::default()
    };
    let mut refused = Proxy::spawn(addr, &text, how);
    let status = refused.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1));
    let logs = refused.logs();
    assert!(
        logs.contains("refusing to start")
            && logs.contains("[auth]")
            && logs.contains("--allow-anonymous"),
        "{logs}"
    );
    // With client keys it starts, and needs them.
    let guarded = Proxy::start_listening(
        "0.0.0.0",
        &config(&sim, "[auth]\n[[auth.key]]\nname = \"a\"\nkey = \"sk-a\"\n"),
        &[],
        &[],
    )
    .await;
    assert_eq!(chat(&guarded, "fast", None).await.status(), 401);
    assert_eq!(
        chat(&guarded, "fast", Some(("x-api-key", "sk-a")))
            .await
            .status(),
        200
    );
    assert!(!guarded.logs().contains("is not a loopback address"));
}
