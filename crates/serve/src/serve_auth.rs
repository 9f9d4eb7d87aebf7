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
mod tests;
