//! `https` through the one client against a loopback TLS server whose certificate a private
//! CA (made at test time) signed: the client resolves the name, connects to the checked
//! address, sends the name as SNI, verifies the certificate chain and the name, and speaks
//! HTTP/1.1 over TLS. A certificate for another name, or from a CA it does not trust, fails
//! the attempt as `http_network_error`.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use trellis_activities::http::{AllowList, HttpClient, HttpSettings, OutboundRequest};
use trellis_testkit::net::{RecordingConnector, ScriptedResolver};

const NAME: &str = "secure.test";

struct Pki {
    ca: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// A CA and a leaf for `names` signed by it.
fn pki(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf_params =
        CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>()).expect("leaf params");
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).expect("leaf certificate");
    Pki {
        ca: ca.der().clone(),
        chain: vec![leaf.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    }
}

/// A TLS server on 127.0.0.1 answering every request `200 {"secure": true}`; it records the
/// SNI name of each handshake.
async fn tls_server(pki: &Pki) -> (u16, Arc<Mutex<Vec<Option<String>>>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), pki.key.clone_key())
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let names = Arc::new(Mutex::new(Vec::new()));
    let seen = names.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                seen.lock().unwrap().push(tls.get_ref().1.server_name().map(str::to_owned));
                let service = hyper::service::service_fn(|_: Request<Incoming>| async {
                    let body = Full::new(Bytes::from_static(br#"{"secure":true}"#));
                    Ok::<_, Infallible>(
                        Response::builder().header("content-type", "application/json").body(body).unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
    (port, names)
}

fn trusting(trusted: CertificateDer<'static>) -> (HttpClient, Arc<RecordingConnector>) {
    let resolver = Arc::new(ScriptedResolver::new());
    resolver.answer(NAME, &["127.0.0.1"]);
    let connector = Arc::new(RecordingConnector::new());
    let settings = HttpSettings {
        allow: AllowList::parse("127.0.0.1/32").unwrap(),
        extra_roots: vec![trusted],
        ..HttpSettings::default()
    };
    (HttpClient::new(settings, resolver, connector.clone()), connector)
}

fn get(port: u16) -> OutboundRequest {
    OutboundRequest {
        method: hyper::Method::GET,
        url: format!("https://{NAME}:{port}/status"),
        headers: Vec::new(),
        body: Bytes::new(),
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn https_verifies_the_chain_and_the_name_and_sends_sni() {
    let pki = pki(&[NAME]);
    let (port, names) = tls_server(&pki).await;
    let (client, connector) = trusting(pki.ca.clone());
    let response = client.send(get(port)).await.expect("an https GET completes");
    assert_eq!(response.status, 200);
    assert_eq!(response.body, br#"{"secure":true}"#);
    assert_eq!(names.lock().unwrap().as_slice(), [Some(NAME.to_owned())], "the name went as SNI");
    assert!(connector.violations().is_empty(), "{:?}", connector.violations());
}

#[tokio::test]
async fn a_certificate_for_another_name_or_from_an_untrusted_ca_fails_the_attempt() {
    let wrong_name = pki(&["other.test"]);
    let (port, _) = tls_server(&wrong_name).await;
    let (client, _) = trusting(wrong_name.ca.clone());
    let error = client.send(get(port)).await.expect_err("the name does not match");
    assert_eq!(error.code(), "http_network_error", "{error:?}");

    let right = pki(&[NAME]);
    let (port, _) = tls_server(&right).await;
    let (client, _) = trusting(pki(&[NAME]).ca);
    let error = client.send(get(port)).await.expect_err("an unknown CA");
    assert_eq!(error.code(), "http_network_error", "{error:?}");
}
