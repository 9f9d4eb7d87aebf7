use super::*;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::json;

fn settings() -> JwtSettings {
    JwtSettings {
        jwks_url: "http://127.0.0.1:1/jwks".into(),
        issuer: "https://idp.example".into(),
        audience: "tether".into(),
        tools_claim: "tether_tools".into(),
    }
}

fn encode(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// An ES256 key as a JWK, and a signer.
fn es256() -> (Value, impl Fn(&Value, &Value) -> String) {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let public = pair.public_key().as_ref().to_vec();
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&public[1..33]), "y": URL_SAFE_NO_PAD.encode(&public[33..])});
    let sign = move |header: &Value, claims: &Value| {
        let signed = format!("{}.{}", encode(header), encode(claims));
        let sig = pair.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    };
    (jwk, sign)
}

fn verifier_with(keys: Vec<Value>) -> JwtVerifier {
    let verifier = JwtVerifier::new(settings());
    *verifier.keys.lock().unwrap() = Some((Instant::now(), Arc::new(keys)));
    verifier
}

fn claims(extra: Value) -> Value {
    let mut claims = json!({"iss": "https://idp.example", "aud": ["other", "tether"],
        "sub": "ana", "exp": 2_000_000_000u64});
    claims
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    claims
}

const NOW: u64 = 1_900_000_000;

#[tokio::test]
async fn a_signed_token_gives_its_subject_and_allow_list() {
    let (jwk, sign) = es256();
    let verifier = verifier_with(vec![jwk]);
    let header = json!({"alg": "ES256", "kid": "k1"});
    let token = sign(&header, &claims(json!({"tether_tools": ["time__*"]})));
    let principal = verifier.verify(&token, NOW).await.unwrap();
    assert_eq!(principal.name, "jwt:ana");
    assert_eq!(principal.allowed_tools, Some(vec!["time__*".to_string()]));
    assert!(principal.allows(&["time__get_current_time"]));
    assert!(!principal.allows(&["everything__echo", "echo"]));
    // A space-separated claim (like OAuth's scope) reads the same; no claim allows all.
    let token = sign(&header, &claims(json!({"tether_tools": "a__* b__x"})));
    let principal = verifier.verify(&token, NOW).await.unwrap();
    assert_eq!(principal.allowed_tools.unwrap(), ["a__*", "b__x"]);
    let token = sign(&header, &claims(json!({})));
    assert_eq!(
        verifier.verify(&token, NOW).await.unwrap().allowed_tools,
        None
    );
}

#[tokio::test]
async fn expired_foreign_forged_and_unsigned_tokens_are_refused() {
    let (jwk, sign) = es256();
    let verifier = verifier_with(vec![jwk]);
    let header = json!({"alg": "ES256", "kid": "k1"});
    let refused = async |token: String| match verifier.verify(&token, NOW).await {
        Err(Refusal::Unauthorized(why)) => why,
        other => panic!("{other:?}"),
    };
    let why = refused(sign(&header, &claims(json!({"exp": NOW - 3600})))).await;
    assert!(why.contains("expired 3600s ago"), "{why}");
    let why = refused(sign(&header, &claims(json!({"aud": "someone-else"})))).await;
    assert!(
        why.contains("audience does not include \"tether\""),
        "{why}"
    );
    let why = refused(sign(&header, &claims(json!({"iss": "https://evil"})))).await;
    assert!(why.contains("issuer"), "{why}");
    let why = refused(sign(&header, &claims(json!({"nbf": NOW + 3600})))).await;
    assert!(why.contains("not valid for another"), "{why}");
    // Claims changed after signing.
    let token = sign(&header, &claims(json!({})));
    let mut pieces: Vec<&str> = token.split('.').collect();
    let forged = encode(&claims(json!({"tether_tools": ["*"], "sub": "root"})));
    pieces[1] = &forged;
    assert!(refused(pieces.join(".")).await.contains("bad signature"));
    // Signed by another key with the same id.
    let (_, other_sign) = es256();
    let why = refused(other_sign(&header, &claims(json!({})))).await;
    assert!(why.contains("bad signature"), "{why}");
    // alg none and HMAC are never accepted.
    let unsigned = format!(
        "{}.{}.",
        encode(&json!({"alg": "none"})),
        encode(&claims(json!({})))
    );
    assert!(refused(unsigned).await.contains("no key for none"));
    let hmac = format!(
        "{}.{}.c2ln",
        encode(&json!({"alg": "HS256", "kid": "k1"})),
        encode(&claims(json!({})))
    );
    assert!(refused(hmac).await.contains("no key \"k1\""));
}

#[tokio::test]
async fn ed25519_tokens_verify() {
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let jwk = json!({"kty": "OKP", "crv": "Ed25519",
        "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref())});
    let verifier = verifier_with(vec![jwk]);
    let signed = format!(
        "{}.{}",
        encode(&json!({"alg": "EdDSA"})),
        encode(&claims(json!({})))
    );
    let token = format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(pair.sign(signed.as_bytes()).as_ref())
    );
    assert_eq!(verifier.verify(&token, NOW).await.unwrap().name, "jwt:ana");
}

#[tokio::test]
async fn static_tokens_carry_their_allow_lists() {
    let tokens = [
        "alpha-0123456789abcdef",
        "beta#0123456789abcdef time__* everything__get-sum # ci",
        "# comment",
        "",
    ]
    .iter()
    .filter_map(|l| StaticToken::parse_line(l).unwrap())
    .collect::<Vec<_>>();
    assert_eq!(tokens.len(), 2);
    // A `#` inside a token is part of it; one starting a word starts a comment.
    assert_eq!(tokens[1].token, "beta#0123456789abcdef");
    let too_short = StaticToken::parse_line("x").unwrap_err();
    assert!(too_short.contains("at least 16"), "{too_short}");
    let auth = Authenticator::new(tokens, None);
    assert!(auth.required());
    let alpha = auth
        .authenticate(Some("Bearer alpha-0123456789abcdef"))
        .await
        .unwrap();
    assert_eq!(alpha.allowed_tools, None);
    let beta = auth
        .authenticate(Some("Bearer beta#0123456789abcdef"))
        .await
        .unwrap();
    assert_eq!(beta.name, "token 2");
    assert!(beta.allows(&["everything__get-sum"]) && !beta.allows(&["everything__echo"]));
    assert!(matches!(
        auth.authenticate(Some("Bearer gamma")).await,
        Err(Refusal::Unauthorized(_))
    ));
    assert!(matches!(
        auth.authenticate(None).await,
        Err(Refusal::Unauthorized(_))
    ));
}

#[test]
fn key_sets_come_over_https_or_from_loopback() {
    let mut s = settings();
    assert!(s.check().is_ok());
    s.jwks_url = "http://idp.example/jwks".into();
    assert!(s.check().unwrap_err().contains("https"));
    s.jwks_url = "https://idp.example/jwks".into();
    assert!(s.check().is_ok());
}

#[test]
fn token_comparison() {
    assert!(same(b"secret", b"secret"));
    assert!(!same(b"secret", b"secreT"));
    assert!(!same(b"secret", b"secret2"));
    assert!(!same(b"", b"x"));
}

/// A loopback "identity provider" that answers every request with `answer` (never, when
/// `None`), counting them; its key-set URL.
async fn provider(answer: Option<&'static str>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            match answer {
                Some(answer) => {
                    let _ = stream.write_all(answer.as_bytes()).await;
                }
                None => held.push(stream),
            }
        }
    });
    (url, count)
}

#[tokio::test]
async fn a_made_up_key_id_never_holds_up_a_known_one() {
    let (url, fetches) = provider(None).await;
    let (jwk, _) = es256();
    let verifier = Arc::new(JwtVerifier::new(JwtSettings {
        jwks_url: url,
        ..settings()
    }));
    // Fetched a minute ago: a new key id may be fetched for.
    let fetched = Instant::now().checked_sub(Duration::from_secs(60)).unwrap();
    *verifier.keys.lock().unwrap() = Some((fetched, Arc::new(vec![jwk])));
    let stuck = verifier.clone();
    let hanging = tokio::spawn(async move { stuck.key_for("ES256", Some("made-up")).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetches.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the made-up key id was never fetched for"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The fetch for the made-up id hangs; the known key is answered meanwhile.
    let known = tokio::time::timeout(
        Duration::from_secs(5),
        verifier.key_for("ES256", Some("k1")),
    )
    .await
    .expect("a known key waits for no fetch");
    assert!(known.is_ok());
    hanging.abort();
}

#[tokio::test]
async fn a_failed_fetch_starts_the_window_and_a_huge_key_set_is_refused_unread() {
    let (url, fetches) = provider(Some(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
    ))
    .await;
    let verifier = JwtVerifier::new(JwtSettings {
        jwks_url: url,
        ..settings()
    });
    for _ in 0..20 {
        let _ = verifier.key_for("ES256", Some("any")).await;
    }
    assert_eq!(
        fetches.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one fetch in the window, failed or not"
    );
    let (url, _) = provider(Some(
        "HTTP/1.1 200 OK\r\nContent-Length: 524288000\r\nContent-Type: application/json\r\n\r\n{\"keys\": [",
    ))
    .await;
    let verifier = JwtVerifier::new(JwtSettings {
        jwks_url: url,
        ..settings()
    });
    let refused = verifier.key_for("ES256", Some("any")).await.unwrap_err();
    assert!(format!("{refused:?}").contains("over 1 MiB"), "{refused:?}");
}

/// A token must say whose it is (`sub`, else a client's `client_id` or `azp`), or clients
/// would share limits and sessions; a subject never takes a static token's name.
#[tokio::test]
async fn a_token_without_a_subject_is_refused_and_subjects_stay_apart_from_static_tokens() {
    let (jwk, sign) = es256();
    let verifier = verifier_with(vec![jwk]);
    let header = json!({"alg": "ES256", "kid": "k1"});
    let mut anonymous = claims(json!({}));
    anonymous.as_object_mut().unwrap().remove("sub");
    let refused = verifier
        .verify(&sign(&header, &anonymous), NOW)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("names no subject"),
        "{refused}"
    );
    let mut client = anonymous.clone();
    client["client_id"] = json!("ci-runner");
    let principal = verifier.verify(&sign(&header, &client), NOW).await.unwrap();
    assert_eq!(principal.name, "jwt:ci-runner");
    let impostor = claims(json!({"sub": "token 1"}));
    let principal = verifier
        .verify(&sign(&header, &impostor), NOW)
        .await
        .unwrap();
    assert_eq!(principal.name, "jwt:token 1");
}

/// `crit` names extensions the token must be understood with: refused. A key's curve must
/// be its algorithm's.
#[tokio::test]
async fn critical_extensions_and_a_curve_foreign_to_the_algorithm_are_refused() {
    let (jwk, sign) = es256();
    let verifier = verifier_with(vec![jwk.clone()]);
    let header = json!({"alg": "ES256", "kid": "k1", "crit": ["b64"], "b64": false});
    let refused = verifier
        .verify(&sign(&header, &claims(json!({}))), NOW)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("\"crit\""), "{refused}");
    let mut p384 = jwk;
    p384["crv"] = json!("P-384");
    assert!(pick_key(&[p384.clone()], "ES256", Some("k1")).is_none());
    p384["alg"] = json!("ES384");
    assert!(pick_key(&[p384], "ES384", Some("k1")).is_some());
}

/// A key set older than its maximum age is fetched again, so a key the provider removed
/// stops being trusted; while the provider fails, the old set stays in use.
#[tokio::test]
async fn a_removed_key_stops_being_trusted_once_the_set_is_fetched_again() {
    let (jwk, _) = es256();
    let (url, fetches) = provider(Some(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"keys\": []}",
    ))
    .await;
    let mut verifier = JwtVerifier::new(JwtSettings {
        jwks_url: url,
        ..settings()
    });
    verifier.max_age = Duration::from_secs(120);
    let fetched = Instant::now().checked_sub(Duration::from_secs(60)).unwrap();
    *verifier.keys.lock().unwrap() = Some((fetched, Arc::new(vec![jwk.clone()])));
    assert!(
        verifier.key_for("ES256", Some("k1")).await.is_ok(),
        "young enough"
    );
    let old = Instant::now()
        .checked_sub(Duration::from_secs(600))
        .unwrap();
    *verifier.keys.lock().unwrap() = Some((old, Arc::new(vec![jwk.clone()])));
    let refused = verifier.key_for("ES256", Some("k1")).await.unwrap_err();
    assert!(refused.to_string().contains("no key \"k1\""), "{refused}");
    assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1);

    let (url, _) = provider(Some(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
    ))
    .await;
    let verifier = JwtVerifier::new(JwtSettings {
        jwks_url: url,
        ..settings()
    });
    *verifier.keys.lock().unwrap() = Some((old, Arc::new(vec![jwk])));
    assert!(
        verifier.key_for("ES256", Some("k1")).await.is_ok(),
        "the provider is down: the old set stays in use"
    );
}
