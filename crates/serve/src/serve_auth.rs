//! Who may use a served HTTP endpoint, and which tools they may see. A request's bearer token
//! is either one of the static tokens (each with an optional tool allow-list) or a JWT signed by
//! a key from the configured JWKS URL, checked for issuer, audience, expiry and not-before; a
//! JWT's allow-list comes from one of its claims. The outcome is a [`Principal`] that travels
//! with the request to the served service (see [`Caller::principal`](crate::serve::Caller::principal)).
//! Signatures are checked with `ring`, which the TLS stack already brings.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;
use tokio::sync::Mutex;

use tether_mcp::config::glob_match;

/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 60;
/// How long fetching the key set may take.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// The key set is fetched again for an unknown key id at most this often, so tokens with
/// made-up key ids cannot make the gateway hammer the identity provider.
const JWKS_REFETCH: Duration = Duration::from_secs(30);

/// How old a key set may grow before the next token fetches it again, so a key the provider
/// removed stops being trusted within this time.
const JWKS_MAX_AGE: Duration = Duration::from_secs(300);
/// Largest key set accepted.
const JWKS_MAX_BYTES: usize = 1024 * 1024;

/// The authenticated client of a request: a name for logs and metrics, and the tools it may
/// see and call.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// `token 2` for the second static token, or the JWT's `sub`.
    pub name: String,
    /// Globs over tool names (qualified, `server__tool`, or as the client sees them); `None`
    /// allows every tool.
    pub allowed_tools: Option<Vec<String>>,
}

impl Principal {
    /// Whether any of `names` (the names one tool goes by) is allowed.
    pub fn allows(&self, names: &[&str]) -> bool {
        match &self.allowed_tools {
            None => true,
            Some(globs) => globs
                .iter()
                .any(|glob| names.iter().any(|name| glob_match(glob, name))),
        }
    }
}

/// One accepted static bearer token.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticToken {
    /// The token itself.
    pub token: String,
    /// Globs of the tools it may use; `None`: all.
    pub allowed_tools: Option<Vec<String>>,
}

/// The shortest static token accepted: a short token is guessed (SECURITY.md).
pub const MIN_TOKEN_CHARS: usize = 16;

impl StaticToken {
    /// Parses a token-file line: `TOKEN [GLOB …]` (whitespace-separated; a `#` at the start of
    /// a word starts a comment, so a token may hold `#`). `Ok(None)` for a blank or comment
    /// line; an error, naming the fix, for a token shorter than [`MIN_TOKEN_CHARS`].
    pub fn parse_line(line: &str) -> Result<Option<StaticToken>, String> {
        let mut words = line
            .split_whitespace()
            .take_while(|word| !word.starts_with('#'));
        let Some(token) = words.next() else {
            return Ok(None);
        };
        let length = token.chars().count();
        if length < MIN_TOKEN_CHARS {
            return Err(format!(
                "a token of {length} characters is too easy to guess; use at least {MIN_TOKEN_CHARS} (for example the output of `openssl rand -hex 32`)"
            ));
        }
        let globs: Vec<String> = words.map(str::to_string).collect();
        Ok(Some(StaticToken {
            token: token.to_string(),
            allowed_tools: (!globs.is_empty()).then_some(globs),
        }))
    }
}

/// Where JWTs are checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtSettings {
    /// The identity provider's key set (https, or http on loopback).
    pub jwks_url: String,
    /// Required `iss`.
    pub issuer: String,
    /// Required member of `aud`.
    pub audience: String,
    /// The claim holding the token's tool allow-list (an array of globs or a space-separated
    /// string); a token without it may use every tool.
    pub tools_claim: String,
}

impl JwtSettings {
    /// Refuses a key-set URL that could be read or changed on the way: plain http is allowed
    /// only to a loopback address.
    pub fn check(&self) -> Result<(), String> {
        let url = reqwest::Url::parse(&self.jwks_url)
            .map_err(|e| format!("--jwks-url \"{}\": not a URL: {e}", self.jwks_url))?;
        let host = url.host_str().unwrap_or_default();
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match url.scheme() {
            "https" => Ok(()),
            "http" if loopback => Ok(()),
            _ => Err(format!(
                "--jwks-url \"{}\": the key set must come over https (plain http only from a loopback address)",
                self.jwks_url
            )),
        }
    }
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// No or a bad credential: 401, with the reason.
    #[error("{0}")]
    Unauthorized(String),
    /// The credential could not be checked (the key set is unreachable): 503.
    #[error("{0}")]
    Unavailable(String),
}

/// Checks bearer tokens against the static tokens and the JWT settings.
#[derive(Debug)]
pub struct Authenticator {
    tokens: Vec<StaticToken>,
    jwt: Option<JwtVerifier>,
}

impl Authenticator {
    /// An authenticator for `tokens` and, when set, JWTs.
    pub fn new(tokens: Vec<StaticToken>, jwt: Option<JwtSettings>) -> Authenticator {
        Authenticator {
            tokens,
            jwt: jwt.map(JwtVerifier::new),
        }
    }

    /// Whether requests need a credential at all.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }

    /// The principal behind an `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, Refusal> {
        let Some(given) = authorization.and_then(|v| v.strip_prefix("Bearer ")) else {
            return Err(Refusal::Unauthorized(
                "send \"Authorization: Bearer TOKEN\" with a token the gateway accepts".into(),
            ));
        };
        let given = given.trim();
        // Every static token is compared, in constant time each, so timing reveals neither a
        // prefix nor which token matched.
        let mut matched = None;
        for (index, token) in self.tokens.iter().enumerate() {
            if same(token.token.as_bytes(), given.as_bytes()) {
                matched = Some(index);
            }
        }
        if let Some(index) = matched {
            return Ok(Principal {
                name: format!("token {}", index + 1),
                allowed_tools: self.tokens[index].allowed_tools.clone(),
            });
        }
        match &self.jwt {
            Some(jwt) if given.split('.').count() == 3 => jwt.verify(given, now()).await,
            _ => Err(Refusal::Unauthorized(
                "the bearer token is not one the gateway accepts".into(),
            )),
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Constant-time comparison of two byte strings (their lengths aside).
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// JWT checks with a cached key set.
#[derive(Debug)]
struct JwtVerifier {
    settings: JwtSettings,
    client: reqwest::Client,
    /// The last key set fetched and when; `None` before the first fetch. Held only to read or
    /// replace it, never across a fetch, so a token with a made-up key id never holds up one
    /// whose key is known.
    keys: std::sync::Mutex<Option<(Instant, Arc<Vec<Value>>)>>,
    /// When the last fetch began, failed or not: the 30 s between fetches counts from there.
    attempted: std::sync::Mutex<Option<Instant>>,
    /// Held while a fetch runs, so tokens with unknown ids wait for one fetch, not start many.
    fetching: Mutex<()>,
    /// How old the key set may grow before it is fetched again ([`JWKS_MAX_AGE`]).
    max_age: Duration,
}

impl JwtVerifier {
    fn new(settings: JwtSettings) -> JwtVerifier {
        let client = tether_mcp::http_client::builder()
            .timeout(JWKS_TIMEOUT)
            // A redirect could lead anywhere; the configured URL is the one trusted.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        JwtVerifier {
            settings,
            client,
            keys: std::sync::Mutex::new(None),
            attempted: std::sync::Mutex::new(None),
            fetching: Mutex::new(()),
            max_age: JWKS_MAX_AGE,
        }
    }

    async fn verify(&self, token: &str, now: u64) -> Result<Principal, Refusal> {
        let bad = |why: &str| Refusal::Unauthorized(format!("the token is not valid: {why}"));
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not a JWT"));
        };
        let header: Value = decode_json(header).ok_or_else(|| bad("unreadable header"))?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no \"alg\""))?;
        // RFC 7515 4.1.11: a token that names extensions it must be understood with is
        // refused by whoever does not understand them, and this gateway understands none.
        if header.get("crit").is_some() {
            return Err(bad(
                "it names critical header extensions (\"crit\") this gateway does not understand",
            ));
        }
        let kid = header.get("kid").and_then(Value::as_str);
        let signature = decode(signature).ok_or_else(|| bad("unreadable signature"))?;
        let signed = &token[..header_len(token)];
        let key = self.key_for(alg, kid).await?;
        verify_signature(alg, &key, signed.as_bytes(), &signature)
            .map_err(|why| Refusal::Unauthorized(format!("the token is not valid: {why}")))?;
        let claims: Value = decode_json(payload).ok_or_else(|| bad("unreadable claims"))?;
        check_claims(&claims, &self.settings, now).map_err(Refusal::Unauthorized)?;
        // The principal keeps a client's limits, sessions and held calls apart from every
        // other's, so a token must say whose it is; `jwt:` keeps a subject from taking a static
        // token's name (`token 1`).
        let subject = ["sub", "client_id", "azp"]
            .iter()
            .find_map(|claim| claims.get(claim).and_then(Value::as_str).filter(|s| !s.is_empty()))
            .ok_or_else(|| bad("it names no subject (\"sub\", or \"client_id\" or \"azp\" for a client's own token)"))?;
        let name = format!("jwt:{subject}");
        let allowed_tools = match claims.get(&self.settings.tools_claim) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.split_whitespace().map(String::from).collect()),
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
            ),
            Some(_) => {
                return Err(Refusal::Unauthorized(format!(
                    "the token is not valid: claim \"{}\" must be a list of tool names",
                    self.settings.tools_claim
                )));
            }
        };
        Ok(Principal {
            name,
            allowed_tools,
        })
    }

    /// The JWK that signs tokens with `kid` (or the only key fit for `alg`), fetching the key
    /// set when none is cached, when the id is new to it, or when it is older than `max_age`
    /// (then a failed fetch leaves the old set in use, with a warning, rather than refuse every
    /// token while the provider is down).
    async fn key_for(&self, alg: &str, kid: Option<&str>) -> Result<Value, Refusal> {
        let missing = || {
            Refusal::Unauthorized(format!(
                "the token is not valid: no key {} in the key set",
                kid.map_or_else(|| format!("for {alg}"), |k| format!("\"{k}\""))
            ))
        };
        if let Some(key) = self.cached_key(alg, kid, true) {
            return Ok(key);
        }
        // One fetch at a time; whoever waited for it looks again before fetching.
        let _fetching = self.fetching.lock().await;
        if let Some(key) = self.cached_key(alg, kid, true) {
            return Ok(key);
        }
        // A key set fetched (or a fetch tried) within the window is the answer until it ends.
        let fetched = self
            .keys
            .lock()
            .ok()
            .and_then(|k| k.as_ref().map(|(at, _)| *at));
        let tried = self.attempted.lock().ok().and_then(|a| *a);
        let recent = fetched
            .into_iter()
            .chain(tried)
            .any(|at| at.elapsed() < JWKS_REFETCH);
        if recent {
            return self.cached_key(alg, kid, false).ok_or_else(missing);
        }
        if let Ok(mut attempted) = self.attempted.lock() {
            *attempted = Some(Instant::now());
        }
        let keys = match self.fetch().await {
            Ok(keys) => Arc::new(keys),
            Err(refusal) => {
                return match self.cached_key(alg, kid, false) {
                    Some(key) => {
                        tracing::warn!(
                            "{refusal}; the key set fetched earlier stays in use until a fetch succeeds"
                        );
                        Ok(key)
                    }
                    None => Err(refusal),
                };
            }
        };
        if let Ok(mut cached) = self.keys.lock() {
            *cached = Some((Instant::now(), keys.clone()));
        }
        pick_key(&keys, alg, kid).ok_or_else(missing)
    }

    /// The key for `alg` and `kid` in the cached key set, if it has one (and, when `fresh`, if
    /// the set is younger than `max_age`).
    fn cached_key(&self, alg: &str, kid: Option<&str>, fresh: bool) -> Option<Value> {
        let cached = self.keys.lock().ok()?;
        let (at, keys) = cached.as_ref()?;
        if fresh && at.elapsed() >= self.max_age {
            return None;
        }
        pick_key(keys, alg, kid)
    }

    async fn fetch(&self) -> Result<Vec<Value>, Refusal> {
        let url = &self.settings.jwks_url;
        let unavailable =
            |why: String| Refusal::Unavailable(format!("cannot check the token: {url}: {why}"));
        let mut response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| unavailable(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(unavailable(format!("HTTP {}", response.status())));
        }
        let too_big = || unavailable("the key set is over 1 MiB".into());
        if response
            .content_length()
            .is_some_and(|n| n > JWKS_MAX_BYTES as u64)
        {
            return Err(too_big());
        }
        // Read as it comes, and stop at the limit: a server that lies about its length (or
        // names none) never makes us hold more than 1 MiB.
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > JWKS_MAX_BYTES {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        let set: Value = serde_json::from_slice(&body)
            .map_err(|e| unavailable(format!("not a JSON key set: {e}")))?;
        match set.get("keys").and_then(Value::as_array) {
            Some(keys) => Ok(keys.clone()),
            None => Err(unavailable("no \"keys\" array".into())),
        }
    }
}

/// Length of `header.payload`, the signed part of a JWT.
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

fn decode(part: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()
}

fn decode_json(part: &str) -> Option<Value> {
    serde_json::from_slice(&decode(part)?).ok()
}

/// The key with `kid`, or without one the only key whose type fits `alg`.
fn pick_key(keys: &[Value], alg: &str, kid: Option<&str>) -> Option<Value> {
    // The curve belongs to the algorithm: a P-384 key must not verify an ES256 token.
    let (kty, crv) = match alg {
        "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" => ("RSA", None),
        "ES256" => ("EC", Some("P-256")),
        "ES384" => ("EC", Some("P-384")),
        "EdDSA" => ("OKP", Some("Ed25519")),
        _ => return None,
    };
    let fits = |key: &&Value| {
        key.get("kty").and_then(Value::as_str) == Some(kty)
            && crv.is_none_or(|crv| key.get("crv").and_then(Value::as_str) == Some(crv))
            && key
                .get("alg")
                .and_then(Value::as_str)
                .is_none_or(|a| a == alg)
            && key
                .get("use")
                .and_then(Value::as_str)
                .is_none_or(|u| u == "sig")
    };
    match kid {
        Some(kid) => keys
            .iter()
            .filter(fits)
            .find(|k| k.get("kid").and_then(Value::as_str) == Some(kid))
            .cloned(),
        None => {
            let mut candidates = keys.iter().filter(fits);
            match (candidates.next(), candidates.next()) {
                (Some(only), None) => Some(only.clone()),
                _ => None,
            }
        }
    }
}

/// Checks `signature` over `message` with the JWK `key` for `alg`. Only asymmetric algorithms
/// are accepted: a key set holds public keys, and `none` or HMAC would let anyone sign.
fn verify_signature(alg: &str, key: &Value, message: &[u8], sig: &[u8]) -> Result<(), String> {
    let member = |name: &str| {
        key.get(name)
            .and_then(Value::as_str)
            .and_then(decode)
            .ok_or_else(|| format!("the key lacks \"{name}\""))
    };
    let rsa = |params: &'static signature::RsaParameters| -> Result<(), String> {
        let (n, e) = (member("n")?, member("e")?);
        RsaPublicKeyComponents { n: &n, e: &e }
            .verify(params, message, sig)
            .map_err(|_| "bad signature".to_string())
    };
    let point = |algorithm: &'static dyn signature::VerificationAlgorithm| {
        let mut bytes = vec![0x04];
        bytes.extend(member("x")?);
        bytes.extend(member("y")?);
        UnparsedPublicKey::new(algorithm, bytes)
            .verify(message, sig)
            .map_err(|_| "bad signature".to_string())
    };
    match alg {
        "RS256" => rsa(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => rsa(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => rsa(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => rsa(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => rsa(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => rsa(&signature::RSA_PSS_2048_8192_SHA512),
        "ES256" => point(&signature::ECDSA_P256_SHA256_FIXED),
        "ES384" => point(&signature::ECDSA_P384_SHA384_FIXED),
        "EdDSA" => UnparsedPublicKey::new(&signature::ED25519, member("x")?)
            .verify(message, sig)
            .map_err(|_| "bad signature".to_string()),
        other => Err(format!("algorithm \"{other}\" is not accepted")),
    }
}

/// Issuer, audience, expiry and not-before, with [`LEEWAY_SECS`] of clock skew.
fn check_claims(claims: &Value, settings: &JwtSettings, now: u64) -> Result<(), String> {
    let bad = |why: String| format!("the token is not valid: {why}");
    if claims.get("iss").and_then(Value::as_str) != Some(settings.issuer.as_str()) {
        return Err(bad(format!("its issuer is not \"{}\"", settings.issuer)));
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == &settings.audience,
        Some(Value::Array(auds)) => auds
            .iter()
            .any(|a| a.as_str() == Some(settings.audience.as_str())),
        _ => false,
    };
    if !audience_ok {
        return Err(bad(format!(
            "its audience does not include \"{}\"",
            settings.audience
        )));
    }
    let Some(exp) = claims.get("exp").and_then(Value::as_u64) else {
        return Err(bad("it has no expiry (\"exp\")".into()));
    };
    if exp + LEEWAY_SECS <= now {
        return Err(bad(format!("it expired {}s ago", now - exp)));
    }
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
        && nbf > now + LEEWAY_SECS
    {
        return Err(bad(format!("it is not valid for another {}s", nbf - now)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
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
    async fn provider(
        answer: Option<&'static str>,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
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
}
