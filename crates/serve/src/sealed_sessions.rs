//! 2025-11-25 sessions that any replica can serve, with no sticky sessions and no shared store.
//! The `Mcp-Session-Id` a client gets is the session's `initialize` parameters (protocol
//! version, client capabilities and identity), the principal that opened it and when, sealed
//! with ChaCha20-Poly1305 under a key the replicas share. Only that principal may use or end
//! the session, and no replica restores it after [`SESSION_MAX_AGE`]. A replica that has the session serves it from memory; one that does not
//! opens the id and lets rmcp restore the session from it (rmcp replays the handshake against
//! a fresh service), so a client whose requests land on another replica, or whose replica
//! died, carries on. A forged or foreign id fails to open and is an unknown session (404).
//!
//! rmcp names sessions itself, so ids are translated at the HTTP edge: its own id on the way
//! in when this replica holds the session, the sealed one on the way out.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use serde_json::{Value, json};

/// The header that carries the session id.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// How long after it was opened a session may be restored from its sealed id (on any replica):
/// a DELETE is known only to the replica that took it, so an ended id must run out somewhere.
pub const SESSION_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What a sealed id holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    /// rmcp's id of the session on the replica that opened it.
    pub local: String,
    /// The session's `initialize` parameters.
    pub params: Value,
    /// The principal that opened it (`None` on an endpoint without authentication).
    pub principal: Option<String>,
    /// When it was opened, in seconds since the Unix epoch.
    pub issued: u64,
}

/// Whose session a sealed id names: what the edge checks on every request of it, without the
/// `initialize` parameters only a restore needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionIdentity {
    /// rmcp's id of the session on the replica that opened it.
    pub local: String,
    /// The principal that opened it (`None` on an endpoint without authentication).
    pub principal: Option<String>,
    /// When it was opened, in seconds since the Unix epoch.
    pub issued: u64,
}

impl SessionIdentity {
    /// Whether `principal` (the request's) may use this session.
    pub fn belongs_to(&self, principal: Option<&str>) -> bool {
        self.principal.as_deref() == principal
    }

    /// Whether it was opened longer ago than [`SESSION_MAX_AGE`].
    pub fn expired(&self) -> bool {
        now_secs().saturating_sub(self.issued) > SESSION_MAX_AGE.as_secs()
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Shortest secret accepted for `--session-key`.
pub const MIN_SECRET_LEN: usize = 16;

/// Seals and opens session ids; rmcp's session store for cross-replica restores.
pub struct SealedSessions {
    key: LessSafeKey,
    /// rmcp's id of each session created here → its `initialize` parameters, until the
    /// edge seals them with the principal into the id of the `initialize` response.
    fresh: Mutex<HashMap<String, Value>>,
    /// Sessions a client ended with DELETE here, by rmcp's id, so their sealed ids are not
    /// restored again (404, as the spec asks). Other replicas cannot know without a shared
    /// store: there a DELETEd id still opens, the price of keeping none.
    ended: Mutex<std::collections::VecDeque<String>>,
    /// Ids opened here before, by their sealed text: a session's every request carries the
    /// same id, and opening it (decrypting, then parsing its `initialize` parameters) cost
    /// more than the rest of a proxied call's edge (docs/decisions.md, "The gateway's hot
    /// path"). Only ids that opened are kept, so the text alone vouches for the entry.
    identities: Mutex<HashMap<String, SessionIdentity>>,
}

/// How many ended sessions a replica remembers; the oldest are forgotten first.
const ENDED_REMEMBERED: usize = 10_000;

/// How many opened ids a replica keeps; past that it starts over (each costs one opening).
const IDENTITIES_REMEMBERED: usize = 10_000;

impl std::fmt::Debug for SealedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealedSessions")
    }
}

impl SealedSessions {
    /// Sessions sealed under a key derived from `secret` (shared by every replica), or under
    /// a random key (sessions then survive only on this replica) when `None`.
    pub fn new(secret: Option<&str>) -> Result<SealedSessions, String> {
        let mut material = [0u8; 32];
        match secret {
            Some(secret) if secret.len() < MIN_SECRET_LEN => {
                return Err(format!(
                    "the session key must be at least {MIN_SECRET_LEN} characters (e.g. `openssl rand -base64 32`)"
                ));
            }
            Some(secret) => {
                let digest = ring::digest::digest(
                    &ring::digest::SHA256,
                    format!("tether-session-id-v1\n{secret}").as_bytes(),
                );
                material.copy_from_slice(digest.as_ref());
            }
            None => SystemRandom::new()
                .fill(&mut material)
                .map_err(|_| "no randomness for the session key".to_string())?,
        }
        let key = UnboundKey::new(&CHACHA20_POLY1305, &material)
            .map_err(|_| "cannot make the session key".to_string())?;
        Ok(SealedSessions {
            key: LessSafeKey::new(key),
            fresh: Mutex::default(),
            ended: Mutex::default(),
            identities: Mutex::default(),
        })
    }

    /// The sealed id for rmcp's session `local` with these `initialize` parameters, opened by
    /// `principal` at `issued`.
    fn seal(
        &self,
        local: &str,
        params: &Value,
        principal: Option<&str>,
        issued: u64,
    ) -> Option<String> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).ok()?;
        let sealed = json!({"v": 2, "id": local, "init": params, "p": principal, "t": issued});
        let mut data = serde_json::to_vec(&sealed).ok()?;
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
            .ok()?;
        let mut out = nonce.to_vec();
        out.extend(data);
        Some(URL_SAFE_NO_PAD.encode(out))
    }

    /// What a sealed id holds, or `None` when it was not sealed with this key (forged,
    /// foreign, or one of rmcp's own ids).
    pub fn open(&self, sealed: &str) -> Option<Opened> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, data) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut data = data.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut data)
            .ok()?;
        let mut value: Value = serde_json::from_slice(plain).ok()?;
        let local = value.get("id")?.as_str()?.to_string();
        Some(Opened {
            local,
            principal: value.get("p").and_then(Value::as_str).map(str::to_string),
            issued: value.get("t").and_then(Value::as_u64).unwrap_or(0),
            params: value.get_mut("init")?.take(),
        })
    }

    /// Whose session `sealed` names, as [`SealedSessions::open`] would say, from memory when
    /// this replica opened the same id before.
    pub fn identify(&self, sealed: &str) -> Option<SessionIdentity> {
        if let Ok(identities) = self.identities.lock()
            && let Some(known) = identities.get(sealed)
        {
            return Some(known.clone());
        }
        let opened = self.open(sealed)?;
        let identity = SessionIdentity {
            local: opened.local,
            principal: opened.principal,
            issued: opened.issued,
        };
        if let Ok(mut identities) = self.identities.lock() {
            if identities.len() >= IDENTITIES_REMEMBERED {
                identities.clear();
            }
            identities.insert(sealed.to_string(), identity.clone());
        }
        Some(identity)
    }

    /// The sealed id for rmcp's new session `local`, opened by `principal` now, once (for its
    /// `initialize` response).
    pub(crate) fn seal_fresh(&self, local: &str, principal: Option<&str>) -> Option<String> {
        let params = self.fresh.lock().ok()?.remove(local)?;
        self.seal(local, &params, principal, now_secs())
    }

    /// Forgets rmcp's new session `local` unsealed (it was refused).
    pub(crate) fn drop_fresh(&self, local: &str) {
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.remove(local);
        }
    }

    /// Remembers that the client ended session `local` (rmcp's id), so it is not restored.
    pub(crate) fn end(&self, local: &str) {
        if let Ok(mut ended) = self.ended.lock() {
            if ended.len() >= ENDED_REMEMBERED {
                ended.pop_front();
            }
            ended.push_back(local.to_string());
        }
    }

    fn has_ended(&self, local: &str) -> bool {
        self.ended
            .lock()
            .is_ok_and(|ended| ended.iter().any(|id| id == local))
    }
}

#[async_trait::async_trait]
impl SessionStore for SealedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        // Whose it is was checked at the edge; here only what any replica can tell.
        let Some(opened) = self.open(session_id) else {
            return Ok(None);
        };
        let expired = now_secs().saturating_sub(opened.issued) > SESSION_MAX_AGE.as_secs();
        if self.has_ended(&opened.local) || expired {
            return Ok(None);
        }
        Ok(serde_json::from_value(opened.params)
            .ok()
            .map(SessionState::new))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let params = serde_json::to_value(&state.initialize_params)?;
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.insert(session_id.to_string(), params);
        }
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.remove(session_id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Value {
        json!({"protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "c", "version": "1"}})
    }

    #[tokio::test]
    async fn an_ended_session_is_not_restored_here() {
        let here = SealedSessions::new(Some("a shared secret of some length")).unwrap();
        let state: SessionState = SessionState::new(serde_json::from_value(params()).unwrap());
        here.store("local-2", &state).await.unwrap();
        let sealed = here.seal_fresh("local-2", None).unwrap();
        assert!(here.load(&sealed).await.unwrap().is_some());
        here.end("local-2");
        assert!(here.load(&sealed).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_sealed_id_opens_with_the_same_secret_anywhere() {
        let here = SealedSessions::new(Some("a shared secret of some length")).unwrap();
        let there = SealedSessions::new(Some("a shared secret of some length")).unwrap();
        let state: SessionState = SessionState::new(serde_json::from_value(params()).unwrap());
        here.store("local-1", &state).await.unwrap();
        let sealed = here.seal_fresh("local-1", Some("alice")).unwrap();
        assert!(here.seal_fresh("local-1", Some("alice")).is_none());
        assert!(
            sealed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        let opened = there.open(&sealed).unwrap();
        assert_eq!(opened.local, "local-1");
        assert_eq!(opened.params["capabilities"]["sampling"], json!({}));
        // Twice: the second from memory says the same.
        for _ in 0..2 {
            let identity = there.identify(&sealed).unwrap();
            assert_eq!(identity.local, "local-1");
            assert!(identity.belongs_to(Some("alice")));
            assert!(!identity.belongs_to(Some("bob")) && !identity.belongs_to(None));
            assert!(!identity.expired());
        }
        let restored = there.load(&sealed).await.unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(restored.initialize_params).unwrap()["clientInfo"]["name"],
            "c"
        );
    }

    #[tokio::test]
    async fn forged_foreign_and_plain_ids_do_not_open() {
        let here = SealedSessions::new(Some("a shared secret of some length")).unwrap();
        let elsewhere = SealedSessions::new(Some("another secret, another team")).unwrap();
        let state: SessionState = SessionState::new(serde_json::from_value(params()).unwrap());
        here.store("local-1", &state).await.unwrap();
        let sealed = here.seal_fresh("local-1", None).unwrap();
        assert!(elsewhere.load(&sealed).await.unwrap().is_none());
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let forged = URL_SAFE_NO_PAD.encode(bytes);
        assert!(here.open(&forged).is_none());
        assert!(here.identify(&sealed).is_some());
        // A forged id is not remembered as opened, however often it comes.
        assert!(here.identify(&forged).is_none() && here.identify(&forged).is_none());
        assert!(elsewhere.identify(&sealed).is_none());
        assert!(here.open("0b6a4c8e-1f2d-4c3b-9a8e-7d6c5b4a3f2e").is_none());
        assert!(here.identify("").is_none());
        assert!(
            SealedSessions::new(Some("short"))
                .unwrap_err()
                .contains("at least 16")
        );
    }

    #[tokio::test]
    async fn an_id_older_than_the_max_age_is_not_restored() {
        let here = SealedSessions::new(Some("a shared secret of some length")).unwrap();
        let old = now_secs() - SESSION_MAX_AGE.as_secs() - 60;
        let sealed = here.seal("local-3", &params(), None, old).unwrap();
        assert!(here.identify(&sealed).unwrap().expired());
        assert!(here.load(&sealed).await.unwrap().is_none());
    }
}
