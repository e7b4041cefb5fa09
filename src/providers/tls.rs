//! Trust roots for HTTPS providers: bundled public roots plus `SSL_CERT_FILE`.
//!
//! The roots are compiled in so a binary in an empty container (no CA files on disk) still
//! reaches public HTTPS providers; `SSL_CERT_FILE` adds private CAs (corporate proxies,
//! self-hosted gateways). Pingora takes them per peer, so they are built once at startup.

use pingora_core::protocols::tls::CaType;
use pingora_core::utils::tls::{parse_x509, WrappedX509};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::sync::Arc;

/// The certificate authorities every upstream TLS handshake trusts.
pub type TrustRoots = Arc<CaType>;

/// Why the `SSL_CERT_FILE` bundle cannot be used; names the file, not its contents.
#[derive(Debug, thiserror::Error)]
#[error("SSL_CERT_FILE={path}: {problem}")]
pub struct BundleError {
    /// The bundle's path.
    pub path: String,
    /// What is wrong with it.
    pub problem: BundleProblem,
}

/// What is wrong with a CA bundle file.
#[derive(Debug, thiserror::Error)]
pub enum BundleProblem {
    /// The file cannot be read.
    #[error("cannot read the CA bundle: {0}")]
    Read(std::io::Error),
    /// The file is not PEM.
    #[error("not a PEM CA bundle: {0}")]
    NotPem(rustls_pki_types::pem::Error),
    /// A PEM block holds no decodable X.509 certificate.
    #[error("a certificate in the bundle cannot be decoded")]
    Undecodable,
    /// The file holds no certificate at all.
    #[error("the file holds no PEM certificates")]
    Empty,
}

/// Builds the trust roots from the bundled set and, when given, a PEM bundle file.
pub fn build(extra_pem_file: Option<&str>) -> Result<TrustRoots, BundleError> {
    let mut ders: Vec<Vec<u8>> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|c| c.to_vec())
        .collect();
    if let Some(path) = extra_pem_file {
        ders.extend(read_pem_bundle(path)?);
    }
    // Pingora's wrapper panics on undecodable DER, so every certificate is checked first.
    let roots: Vec<WrappedX509> = ders
        .into_iter()
        .filter(|der| x509_parser::parse_x509_certificate(der).is_ok())
        .map(|der| WrappedX509::new(der, parse_x509))
        .collect();
    Ok(Arc::from(roots))
}

/// Builds the trust roots the process environment asks for (`SSL_CERT_FILE`, if set).
pub fn from_env() -> Result<TrustRoots, BundleError> {
    match std::env::var("SSL_CERT_FILE") {
        Ok(path) if !path.is_empty() => build(Some(&path)),
        _ => build(None),
    }
}

fn read_pem_bundle(path: &str) -> Result<Vec<Vec<u8>>, BundleError> {
    let fail = |problem| BundleError {
        path: path.to_string(),
        problem,
    };
    let text = std::fs::read(path).map_err(|e| fail(BundleProblem::Read(e)))?;
    let mut ders = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| fail(BundleProblem::NotPem(e)))?;
        if x509_parser::parse_x509_certificate(&cert).is_err() {
            return Err(fail(BundleProblem::Undecodable));
        }
        ders.push(cert.to_vec());
    }
    if ders.is_empty() {
        return Err(fail(BundleProblem::Empty));
    }
    Ok(ders)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_roots_are_present() {
        let roots = build(None).expect("bundled roots");
        assert!(roots.len() > 100, "only {} roots", roots.len());
    }

    #[test]
    fn missing_bundle_is_a_clear_error() {
        let err = build(Some("/nonexistent/ca.pem")).unwrap_err().to_string();
        assert!(err.contains("SSL_CERT_FILE=/nonexistent/ca.pem"), "{err}");
        assert!(err.contains("cannot read"), "{err}");
    }

    #[test]
    fn file_without_certificates_is_rejected() {
        let path = std::env::temp_dir().join(format!("sturnus-empty-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = build(Some(path.to_str().unwrap())).unwrap_err().to_string();
        std::fs::remove_file(&path).ok();
        assert!(err.contains("no PEM certificates"), "{err}");
    }
}
