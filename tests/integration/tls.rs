//! HTTPS providers: SNI and certificate checks against bundled roots plus `SSL_CERT_FILE`.

use crate::common;

use common::*;

async fn https_setup(trust_test_ca: bool) -> (FakeProvider, Proxy) {
    let sim = FakeProvider::start("secure").await.unwrap();
    let front = tls::front(sim.addr).await;
    let config = format!(
        "[provider.secure]\nbase_url = \"https://127.0.0.1:{}/v1\"\napi_key = \"sk-tls\"\n[model]\nfast = [{{ provider = \"secure\", model = \"m\" }}]\n",
        front.addr.port()
    );
    let ca = front.ca_pem.to_string_lossy().into_owned();
    let env: Vec<(&str, &str)> = if trust_test_ca {
        vec![("SSL_CERT_FILE", ca.as_str())]
    } else {
        vec![]
    };
    let proxy = Proxy::start_with(&config, &env, &[]).await;
    (sim, proxy)
}

#[tokio::test(flavor = "multi_thread")]
async fn https_provider_is_reached_when_its_ca_is_trusted() {
    let (sim, proxy) = https_setup(true).await;
    tls::expect_https_round_trip(&proxy, &sim, "sk-tls").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_fails_cleanly_with_json_502() {
    let (sim, proxy) = https_setup(false).await;
    for _ in 0..2 {
        let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
        assert_eq!(resp.status(), 502);
        let err = error_of(resp).await;
        assert_eq!(err["code"], "upstream_tls_error", "{err}");
    }
    assert_eq!(sim.request_count(), 0);
    assert!(!proxy.logs().contains("panicked"));
    let status = proxy.status().await;
    assert_eq!(status["aliases"][0]["candidates"][0]["failures"], 2);
}
