//! Vertex AI end to end: Application Default Credentials against mock Google endpoints on
//! loopback, background token refresh under traffic, and what clients see while no token exists.

use crate::common;

use common::gcp::*;
use common::*;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

const PROJECT: &str = "sturnus-test";
const VERTEX_PATH: &str =
    "/v1/projects/sturnus-test/locations/us-central1/endpoints/openapi/chat/completions";
const MODEL: &str = "google/gemini-2.5-flash";

/// `[provider.vertex]` with `base_url` standing in for `us-central1-aiplatform.googleapis.com`.
fn vertex_toml(sim: &FakeProvider) -> String {
    format!(
        "[provider.vertex]\nvertex_ai = {{ project_id = \"{PROJECT}\", location = \"us-central1\" }}\n\
         base_url = \"{}/v1/projects/{PROJECT}/locations/us-central1/endpoints/openapi\"\n",
        sim.base_url()
    )
}

/// One alias `gem` over the Vertex provider.
fn solo_config(sim: &FakeProvider) -> String {
    format!(
        "{}\n[model]\ngem = [{{ provider = \"vertex\", model = \"{MODEL}\" }}]\n",
        vertex_toml(sim)
    )
}

/// An environment where ADC finds exactly what the test set up: `credentials_file` ("" for
/// none), a home directory of its own, and the metadata server at `metadata_host`.
fn adc_env(home: &Path, credentials_file: &str, metadata_host: &str) -> Vec<(String, String)> {
    vec![
        (
            "GOOGLE_APPLICATION_CREDENTIALS".into(),
            credentials_file.into(),
        ),
        ("HOME".into(), home.display().to_string()),
        (
            "CLOUDSDK_CONFIG".into(),
            home.join(".config/gcloud").display().to_string(),
        ),
        ("GCE_METADATA_HOST".into(), metadata_host.into()),
    ]
}

async fn start(config: &str, env: &[(String, String)]) -> Proxy {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Proxy::start_with(config, &env, &[]).await
}

/// A chat body for `alias` whose message text identifies the request.
fn marked_body(alias: &str, marker: &str) -> String {
    format!(r#"{{"model":"{alias}","messages":[{{"role":"user","content":"{marker}"}}]}}"#)
}

/// The bearer token a recorded provider request carried.
fn bearer(req: &sturnus::fake_provider::RecordedRequest) -> String {
    req.header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_else(|| panic!("no bearer token in {:?}", req.headers))
        .to_string()
}

/// Neither the log nor `/status` may contain any token the mock issued.
async fn assert_no_token_leaks(proxy: &Proxy, mock: &GcpMock) {
    let logs = proxy.logs();
    let status = proxy.status().await.to_string();
    for t in mock.issued() {
        assert!(!logs.contains(&t.token), "token in the log:\n{logs}");
        assert!(!status.contains(&t.token), "token in /status");
    }
}

/// A Vertex AI provider behind sturnus whose tokens come from a mock GKE metadata server issuing
/// tokens of `lifetime` seconds; `held`: the server holds its answers until released.
async fn on_metadata_server(lifetime: u64, held: bool) -> (GcpMock, FakeProvider, Proxy) {
    let mock = GcpMock::start(lifetime).await;
    if held {
        mock.hold();
    }
    let sim = FakeProvider::start("vertex").await.unwrap();
    let home = scratch_dir();
    let proxy = start(
        &solo_config(&sim),
        &adc_env(&home, "", &mock.metadata_host()),
    )
    .await;
    (mock, sim, proxy)
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_tokens_are_refreshed_before_they_expire_under_continuous_traffic() {
    let (mock, sim, proxy) = on_metadata_server(4, false).await;

    let deadline = Instant::now() + Duration::from_secs(9);
    let mut workers = Vec::new();
    for w in 0..4 {
        let url = proxy.url("/v1/chat/completions");
        workers.push(tokio::spawn(async move {
            let client = client();
            let mut done = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                let marker = format!("req-{w}-{i}");
                let resp = client
                    .post(&url)
                    .header("authorization", "Bearer client-own-token")
                    .body(marked_body("gem", &marker))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap();
                done.push((marker, status, text, Instant::now()));
                i += 1;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            done
        }));
    }
    let mut done = Vec::new();
    for w in workers {
        done.extend(w.await.unwrap());
    }

    let received: HashMap<String, _> = sim
        .requests()
        .into_iter()
        .map(|r| {
            let marker = r.json().unwrap()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string();
            (marker, r)
        })
        .collect();
    let mut used = HashSet::new();
    for (marker, status, text, finished) in &done {
        assert_eq!(*status, 200, "{marker}: {text}");
        let req = &received[marker];
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, VERTEX_PATH);
        assert_eq!(req.json().unwrap()["model"], MODEL);
        let token = bearer(req);
        let issued = mock
            .find(&token)
            .unwrap_or_else(|| panic!("{marker}: token not issued by the metadata server"));
        // The provider received the request before the client had the answer, so a token
        // still valid at that point was valid when it arrived.
        assert!(
            issued.expires_at > *finished,
            "{marker} carried a token that had expired"
        );
        used.insert(token);
    }
    assert!(done.len() >= 40, "only {} requests", done.len());
    // 9 s of traffic with 4 s tokens: several refreshes, each before the old token expired.
    assert!(used.len() >= 3, "only {} distinct tokens used", used.len());
    let fetches = mock.requests();
    assert!(fetches.len() >= 3);
    for f in &fetches {
        assert_eq!(f.method, "GET");
        assert_eq!(f.path, METADATA_TOKEN_PATH);
        assert_eq!(f.header("metadata-flavor"), Some("Google"));
    }
    assert_no_token_leaks(&proxy, &mock).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_request_waits_for_the_first_token() {
    let (mock, sim, proxy) = on_metadata_server(3600, true).await;
    let url = proxy.url("/v1/chat/completions");
    let first = tokio::spawn(async move {
        client()
            .post(url)
            .body(marked_body("gem", "first"))
            .send()
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !first.is_finished(),
        "the request did not wait for the token"
    );
    assert!(mock.issued().is_empty());
    mock.release();
    let resp = first.await.unwrap();
    assert_eq!(resp.status(), 200);
    let issued = mock.issued();
    assert_eq!(issued.len(), 1);
    assert_eq!(bearer(&sim.requests()[0]), issued[0].token);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_token_slower_than_the_bound_is_a_clear_503_then_arrives() {
    let (mock, sim, proxy) = on_metadata_server(3600, true).await;
    // The token endpoint holds its answer past the 5 s bound.
    let resp = post(&proxy, "/v1/chat/completions", marked_body("gem", "early")).await;
    assert_eq!(resp.status(), 503);
    let err = error_of(resp).await;
    assert_eq!(err["code"], "provider_credentials_unavailable");
    assert_eq!(err["type"], "server_error");
    assert_eq!(
        err["message"],
        "Provider `vertex` cannot be authorized: no Google access token yet: the first fetch has not finished"
    );
    assert_eq!(sim.request_count(), 0);
    mock.release();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = post(&proxy, "/v1/chat/completions", marked_body("gem", "later")).await;
        if resp.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no token arrived");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(bearer(&sim.requests()[0]), mock.issued()[0].token);
}

#[tokio::test(flavor = "multi_thread")]
async fn service_account_assertions_are_signed_and_verified() {
    let mock = GcpMock::start(3600).await;
    // The token endpoint is reached over HTTPS, like oauth2.googleapis.com, through a TLS front
    // whose test CA is trusted via SSL_CERT_FILE.
    let front = tls::front(mock.addr).await;
    let token_uri = format!("https://127.0.0.1:{}/token", front.addr.port());
    let dir = scratch_dir();
    let (private_pem, public_pem) = rsa_key_pair(&dir);
    let email = "sturnus@sturnus-test.iam.gserviceaccount.com";
    mock.expect_service_account(ServiceAccountExpectation {
        email: email.into(),
        key_id: "key-1".into(),
        public_pem: public_pem.clone(),
        audience: token_uri.clone(),
    });
    let key_file = dir.join("sa.json");
    std::fs::write(
        &key_file,
        service_account_json(email, "key-1", &private_pem, &token_uri),
    )
    .unwrap();
    let sim = FakeProvider::start("vertex").await.unwrap();
    // The metadata server must not be needed: point it at a closed port.
    let mut env = adc_env(
        &dir,
        key_file.to_str().unwrap(),
        &format!("127.0.0.1:{}", free_port()),
    );
    env.push(("SSL_CERT_FILE".into(), front.ca_pem.display().to_string()));
    let proxy = start(&solo_config(&sim), &env).await;

    let resp = post(&proxy, "/v1/chat/completions", marked_body("gem", "sa")).await;
    assert_eq!(resp.status(), 200);
    assert!(mock.rejections().is_empty(), "{:?}", mock.rejections());
    let grants = mock.requests();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].method, "POST");
    assert_eq!(grants[0].path, "/token");
    assert_eq!(
        grants[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert!(grants[0].body.starts_with(
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
    ));
    let req = &sim.requests()[0];
    assert_eq!(req.path, VERTEX_PATH);
    assert_eq!(bearer(req), mock.issued()[0].token);
    assert_no_token_leaks(&proxy, &mock).await;
    let logs = proxy.logs();
    assert!(!logs.contains("PRIVATE KEY"), "{logs}");
    assert!(logs.contains(email), "the log names the account:\n{logs}");

    // A key the token endpoint does not know is refused, and the client learns why.
    mock.expect_service_account(ServiceAccountExpectation {
        email: email.into(),
        key_id: "key-1".into(),
        public_pem,
        audience: mock.token_uri(),
    });
    let (other_private, _) = rsa_key_pair(&dir);
    let bad_file = dir.join("other.json");
    std::fs::write(
        &bad_file,
        service_account_json(email, "key-1", &other_private, &mock.token_uri()),
    )
    .unwrap();
    let env = adc_env(
        &dir,
        bad_file.to_str().unwrap(),
        &format!("127.0.0.1:{}", free_port()),
    );
    let refused = start(&solo_config(&sim), &env).await;
    let resp = post(&refused, "/v1/chat/completions", marked_body("gem", "bad")).await;
    assert_eq!(resp.status(), 503);
    let err = error_of(resp).await;
    assert_eq!(err["code"], "provider_credentials_unavailable");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.starts_with("Provider `vertex` cannot be authorized: no Google access token: fetching a token from service account sturnus@"),
        "{message}"
    );
    assert!(
        message.contains("HTTP 400: invalid_grant: Invalid JWT Signature"),
        "{message}"
    );
    assert!(!mock.rejections().is_empty());
    assert_eq!(sim.request_count(), 1);
    let logs = refused.logs();
    assert!(
        logs.contains("invalid_grant"),
        "the failure is logged:\n{logs}"
    );
    assert!(
        !logs.contains("assertion=") && !logs.contains("PRIVATE KEY"),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gcloud_user_credentials_use_the_refresh_token_grant() {
    let mock = GcpMock::start(3600).await;
    mock.expect_user(UserExpectation {
        client_id: "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com"
            .into(),
        client_secret: "d-FL95Q19q7MQmFpd7hHD0Ty".into(),
        refresh_token: "1//0g-refresh/token".into(),
    });
    let home = scratch_dir();
    let gcloud = home.join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        serde_json::json!({
            "type": "authorized_user",
            "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
            "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
            "refresh_token": "1//0g-refresh/token",
            "token_uri": mock.token_uri(),
        })
        .to_string(),
    )
    .unwrap();
    let sim = FakeProvider::start("vertex").await.unwrap();
    let env = adc_env(&home, "", &format!("127.0.0.1:{}", free_port()));
    let proxy = start(&solo_config(&sim), &env).await;
    let resp = post(&proxy, "/v1/chat/completions", marked_body("gem", "user")).await;
    assert_eq!(resp.status(), 200);
    assert!(mock.rejections().is_empty(), "{:?}", mock.rejections());
    assert!(mock.requests()[0]
        .body
        .starts_with("grant_type=refresh_token&"));
    assert_eq!(bearer(&sim.requests()[0]), mock.issued()[0].token);
    let logs = proxy.logs();
    assert!(!logs.contains("d-FL95Q19q7MQmFpd7hHD0Ty") && !logs.contains("refresh/token"));
    assert_no_token_leaks(&proxy, &mock).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_server_down_means_a_clear_503_traffic_elsewhere_and_recovery() {
    let metadata_port = free_port();
    let metadata_host = format!("127.0.0.1:{metadata_port}");
    let vertex = FakeProvider::start("vertex").await.unwrap();
    let backup = FakeProvider::start("backup").await.unwrap();
    let config = format!(
        "{}{}\n[model]\nsolo = [{{ provider = \"vertex\", model = \"{MODEL}\" }}]\n\
         mixed = [{{ provider = \"vertex\", model = \"{MODEL}\" }}, {{ provider = \"backup\", model = \"gpt-4o-mini\" }}]\n",
        vertex_toml(&vertex),
        provider_toml("backup", &backup, Some("sk-backup")),
    );
    let home = scratch_dir();
    let proxy = start(&config, &adc_env(&home, "", &metadata_host)).await;

    // Nothing answers at the metadata address: a clear 503 naming the problem.
    for _ in 0..5 {
        let resp = post(&proxy, "/v1/chat/completions", marked_body("solo", "down")).await;
        assert_eq!(resp.status(), 503);
        let err = error_of(resp).await;
        assert_eq!(err["code"], "provider_credentials_unavailable");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "Provider `vertex` cannot be authorized: no Google access token: fetching a token from the metadata server at {metadata_host} failed: "
            )),
            "{message}"
        );
    }
    assert_eq!(vertex.request_count(), 0);

    // The failures count for routing: the alias's traffic goes to the other candidate.
    let mut served_by_backup = 0;
    for i in 0..40 {
        let resp = post(
            &proxy,
            "/v1/chat/completions",
            marked_body("mixed", &format!("m{i}")),
        )
        .await;
        match resp.status().as_u16() {
            200 => {
                assert_eq!(resp.headers()["x-sturnus-provider"], "backup");
                served_by_backup += 1;
            }
            503 => assert_eq!(
                error_of(resp).await["code"],
                "provider_credentials_unavailable"
            ),
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        served_by_backup >= 35,
        "only {served_by_backup} of 40 went to backup"
    );
    let status = proxy.status().await;
    let vertex_state = &status["aliases"][1]["candidates"][0];
    assert_eq!(vertex_state["provider"], "vertex");
    assert!(vertex_state["failures"].as_u64().unwrap() >= 5);

    // The metadata server comes back: the refresher's retry picks it up.
    let mock = GcpMock::start_on(metadata_host.parse().unwrap(), 3600).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = post(&proxy, "/v1/chat/completions", marked_body("solo", "back")).await;
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 503);
        assert!(
            Instant::now() < deadline,
            "no recovery after the metadata server returned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(bearer(&vertex.requests()[0]), mock.issued()[0].token);
    for i in 0..10 {
        let resp = post(
            &proxy,
            "/v1/chat/completions",
            marked_body("solo", &format!("s{i}")),
        )
        .await;
        assert_eq!(resp.status(), 200);
    }
    // With its success rate restored, the candidate gets its share of the mixed alias again.
    let mut back_on_vertex = false;
    for i in 0..1000 {
        let resp = post(
            &proxy,
            "/v1/chat/completions",
            marked_body("mixed", &format!("r{i}")),
        )
        .await;
        assert_eq!(resp.status(), 200);
        if resp.headers()["x-sturnus-provider"] == "vertex" {
            back_on_vertex = true;
            break;
        }
    }
    assert!(back_on_vertex, "the recovered candidate got no traffic");
    let logs = proxy.logs();
    assert!(
        logs.contains("retrying in"),
        "fetch failures are logged:\n{logs}"
    );
    assert!(logs.contains("Google access token obtained"), "{logs}");
    assert_no_token_leaks(&proxy, &mock).await;
}
