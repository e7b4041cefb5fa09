//! Throwaway test CAs and what uses them: an HTTPS front for a fake provider, sturnus's
//! own `[listen_tls]` config, and an HTTP/2 client connection that opens streams one by one.

use bytes::Bytes;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The client key `[auth]` of [`edge_config`] accepts.
pub const EDGE_KEY: &str = "sk-edge-client";

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
    /// The CA's certificate (DER), for a client's root store.
    pub ca_der: Vec<u8>,
    /// The leaf certificate (DER), to compare with what a server presents.
    pub leaf_der: Vec<u8>,
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
        ca_der: ca.der().to_vec(),
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

/// sturnus's config for a `[listen_tls]` on 127.0.0.1:`port` with `cert`'s files, `[auth]` with
/// one client key ([`EDGE_KEY`]), and alias `fast` on `sim` (model `m`); `extra` goes last.
pub fn edge_config(sim: &super::FakeProvider, cert: &Throwaway, port: u16, extra: &str) -> String {
    format!(
        "{}[listen_tls]\nlisten = \"127.0.0.1:{port}\"\ncert = \"{}\"\nkey = \"{}\"\n\
         [auth]\n[[auth.key]]\nname = \"edge-client\"\nkey = \"{EDGE_KEY}\"\n{extra}",
        super::fast_alias_config("up", sim, "m", Some("sk-provider")),
        cert.cert_pem.display(),
        cert.key_pem.display(),
    )
}

/// An HTTP/2 client connection (TLS, ALPN `h2`) to 127.0.0.1:`port`, trusting `cert`'s CA: the
/// handle that opens streams, and the task that drives the connection (aborting it closes the
/// connection, as a client that goes away does).
pub async fn h2_connection(
    port: u16,
    cert: &Throwaway,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(cert.ca_der.clone()))
        .unwrap();
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (streams, connection) = h2::client::handshake(tls).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (streams, driver)
}
