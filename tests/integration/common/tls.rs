//! An HTTPS front for a fake provider, with a certificate from a throwaway test CA.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// A TLS-terminating listener forwarding to a plain-HTTP backend.
pub struct TlsFront {
    /// Where the HTTPS listener is.
    pub addr: SocketAddr,
    /// PEM file of the CA that signed the listener's certificate.
    pub ca_pem: PathBuf,
}

/// A certificate for IP 127.0.0.1 from a throwaway CA, as PEM files in a scratch directory.
pub struct Throwaway {
    /// The CA's certificate.
    pub ca_pem: PathBuf,
    /// The leaf certificate.
    pub cert_pem: PathBuf,
    /// The leaf's private key (PKCS#8).
    pub key_pem: PathBuf,
    leaf_der: Vec<u8>,
    key_der: Vec<u8>,
}

/// Makes a throwaway CA and a certificate for 127.0.0.1 it signed.
pub fn throwaway_certificate() -> Throwaway {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sturnus test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();

    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();

    let dir = super::scratch_dir();
    let ca_pem = dir.join("test-ca.pem");
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    let cert_pem = dir.join("tls.crt");
    std::fs::write(&cert_pem, leaf.pem()).unwrap();
    let key_pem = dir.join("tls.key");
    std::fs::write(&key_pem, leaf_key.serialize_pem()).unwrap();
    Throwaway {
        ca_pem,
        cert_pem,
        key_pem,
        leaf_der: leaf.der().to_vec(),
        key_der: leaf_key.serialize_der(),
    }
}

/// Starts an HTTPS listener on 127.0.0.1 (certificate for IP 127.0.0.1) in front of `backend`.
pub async fn front(backend: SocketAddr) -> TlsFront {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let cert = throwaway_certificate();
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.leaf_der)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_der)),
        )
        .unwrap();
    let ca_pem = cert.ca_pem;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    TlsFront { addr, ca_pem }
}

/// Checks a provider behind a TLS front is reached through `proxy`: a non-streaming and a
/// streaming chat request are both answered, and the provider saw `Bearer {key}`.
pub async fn expect_https_round_trip(proxy: &super::Proxy, sim: &super::FakeProvider, key: &str) {
    for body in [
        super::chat_body("fast", false),
        super::chat_body("fast", true),
    ] {
        let resp = super::post(proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        assert!(!resp.text().await.unwrap().is_empty());
    }
    let got = sim.requests().pop().unwrap();
    assert_eq!(
        got.header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}
