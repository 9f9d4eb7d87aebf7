//! An identity provider for gateway tests: an ES256 key, the tokens it signs, and its key set
//! served over loopback HTTP (counting fetches), so the gateway's JWT checks run against a real
//! JWKS endpoint and real signatures.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The issuer every token names.
pub const ISSUER: &str = "https://idp.test";

/// A signing key and its JWKS endpoint on 127.0.0.1.
pub struct IdentityProvider {
    key: EcdsaKeyPair,
    url: String,
    fetches: Arc<AtomicUsize>,
}

impl IdentityProvider {
    /// A new key, its key set served until the process ends.
    pub fn start() -> IdentityProvider {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let public = key.public_key().as_ref();
        let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "test-key", "alg": "ES256",
            "use": "sig", "x": URL_SAFE_NO_PAD.encode(&public[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&public[33..])}]})
        .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let fetches = Arc::new(AtomicUsize::new(0));
        let counter = fetches.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{jwks}",
                    jwks.len()
                );
            }
        });
        IdentityProvider { key, url, fetches }
    }

    /// The key set's URL.
    pub fn jwks_url(&self) -> &str {
        &self.url
    }

    /// How many times the key set was fetched.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// A token for `audience`, valid for an hour, with `extra` claims merged in (which may
    /// override `exp`, `iss`, …).
    pub fn token(&self, audience: &str, extra: Value) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut claims = json!({"iss": ISSUER, "aud": audience, "sub": "test-user",
            "iat": now, "exp": now + 3600});
        if let (Some(claims), Some(extra)) = (claims.as_object_mut(), extra.as_object()) {
            claims.extend(extra.clone());
        }
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": "test-key"});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// Seconds since the epoch, for claims relative to now.
    pub fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }
}
