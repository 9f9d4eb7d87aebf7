//! The network policy of OAuth. Discovery fetches URLs that a server chooses (its protected
//! resource metadata names the authorization server, whose metadata names the endpoints), so
//! a hostile server could point Tether at a cloud metadata service or a host on the user's
//! network. Every OAuth request goes through [`GuardedOAuthClient`]: https only (plain http
//! only on loopback or the server's own origin), resolved addresses filtered by class
//! (loopback, private and link-local only when the server itself is on one of that class;
//! reserved ranges never), and every redirect hop held to the same rules. A refusal is kept, so
//! that the error the user sees names the URL, the reason and the setting that relaxes it,
//! instead of rmcp's "none published usable metadata".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};

/// Longest an OAuth request may take (as rmcp's own client).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest OAuth response body read (metadata and token responses are small).
const MAX_BODY: usize = 1024 * 1024;
/// Most redirects one OAuth request may follow.
const MAX_REDIRECTS: usize = 5;

/// What kind of network an address is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// The internet.
    Public,
    /// This machine.
    Loopback,
    /// RFC 1918, carrier-grade NAT and IPv6 unique-local ranges: a home or company network.
    Private,
    /// 169.254/16 and fe80::/10, where cloud metadata services answer.
    LinkLocal,
    /// Unspecified, broadcast, multicast, documentation and benchmark ranges: never an
    /// authorization server.
    Reserved,
}

impl AddressClass {
    /// The class of `ip` (IPv4-mapped IPv6 addresses as their IPv4 address).
    pub fn of(ip: IpAddr) -> AddressClass {
        match ip {
            IpAddr::V4(v4) => class_v4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => class_v4(v4),
                None => class_v6(v6),
            },
        }
    }

    fn words(self) -> &'static str {
        match self {
            AddressClass::Public => "a public address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private-network address",
            AddressClass::LinkLocal => {
                "a link-local address (where cloud metadata services answer)"
            }
            AddressClass::Reserved => "a reserved address",
        }
    }
}

fn class_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if ip.is_private() || (a == 100 && (64..=127).contains(&b)) {
        AddressClass::Private
    } else if ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 198 && (b == 18 || b == 19))
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn class_v6(ip: Ipv6Addr) -> AddressClass {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        AddressClass::Loopback
    } else if first & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 {
        AddressClass::Private
    } else if ip.is_unspecified()
        || ip.is_multicast()
        || first == 0x2001 && ip.segments()[1] == 0xdb8
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// Per-server relaxations, from `"oauth"` in the config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuardSettings {
    /// `"allowPrivateAddresses"`: the authorization server may be on a private network even
    /// when the MCP server is not.
    pub allow_private_addresses: bool,
    /// `"allowInsecureHttp"`: discovered URLs may be plain http.
    pub allow_insecure_http: bool,
}

/// The rules for one server's OAuth requests, and the refusals they made.
#[derive(Debug)]
struct Policy {
    server: String,
    /// The server's scheme, host and port: its own origin may stay plain http.
    origin: Origin,
    /// Classes the server's own host resolved to; those are allowed for its OAuth too.
    server_classes: Vec<AddressClass>,
    settings: GuardSettings,
    /// Proxy hosts from the environment: reqwest resolves only the proxy's name.
    proxies: Vec<String>,
    refusals: Mutex<Vec<String>>,
}

impl Policy {
    fn refuse(&self, message: String) -> String {
        // Said in the error the user sees; the log is for flows that only warn (a refresh).
        tracing::debug!(server = %self.server, "{message}");
        if let Ok(mut refusals) = self.refusals.lock()
            && !refusals.contains(&message)
        {
            refusals.push(message.clone());
        }
        message
    }

    /// IP-literal and scheme checks for a URL about to be requested (the address first: a
    /// link-local URL is refused whatever its scheme).
    fn check_url(&self, url: &Url) -> Result<(), String> {
        if let Some(ip) = literal(url) {
            self.check_address(url.as_str(), ip)?;
        }
        let loopback_name = url
            .host_str()
            .is_some_and(|h| h.eq_ignore_ascii_case("localhost") || h.ends_with(".localhost"));
        match url.scheme() {
            "https" => Ok(()),
            "http"
                if origin(url) == self.origin
                    || loopback_name
                    || self.settings.allow_insecure_http
                    || literal(url).is_some_and(|ip| ip.is_loopback()) =>
            {
                Ok(())
            }
            _ => Err(self.refuse(format!(
                "refused {url}: OAuth URLs must be https (plain http only on loopback); set \"oauth\": {{\"allowInsecureHttp\": true}} on server \"{}\" to allow it",
                self.server
            ))),
        }
    }

    fn check_address(&self, what: &str, ip: IpAddr) -> Result<(), String> {
        let class = AddressClass::of(ip);
        let allowed = match class {
            AddressClass::Public => true,
            AddressClass::Reserved => false,
            AddressClass::Private if self.settings.allow_private_addresses => true,
            other => self.server_classes.contains(&other),
        };
        if allowed {
            return Ok(());
        }
        let fix = match class {
            AddressClass::Private => format!(
                "; if the authorization server is on your network, set \"oauth\": {{\"allowPrivateAddresses\": true}} on server \"{}\"",
                self.server
            ),
            AddressClass::Loopback => {
                "; only a server on this machine may send Tether to this machine".into()
            }
            _ => "; it is never contacted unless the MCP server itself is there".into(),
        };
        Err(self.refuse(format!(
            "refused {what}: {ip} is {} and server \"{}\" is not{fix}",
            class.words(),
            self.server
        )))
    }
}

/// The addresses `host` resolves to, within the request timeout.
async fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addresses)) => Ok(addresses.collect()),
        Ok(Err(error)) => Err(format!("cannot resolve {host}: {error}")),
        Err(_) => Err(format!("resolving {host} timed out")),
    }
}

/// A URL's scheme, lower-cased host and port (the default one when none is written).
pub(crate) type Origin = (String, String, Option<u16>);

/// The origin of `url`, for same-origin checks.
pub(crate) fn origin(url: &Url) -> Origin {
    (
        url.scheme().to_string(),
        url.host_str().unwrap_or_default().to_ascii_lowercase(),
        url.port_or_known_default(),
    )
}

/// The IP address a URL names literally (`[…]` for IPv6), if it does.
fn literal(url: &Url) -> Option<IpAddr> {
    url.host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Filters every name reqwest resolves for OAuth by the policy.
struct GuardedResolver(Arc<Policy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
            let resolved = lookup(&host, 0).await?;
            if policy.proxies.contains(&host) {
                return Ok(Box::new(resolved.into_iter()) as Addrs);
            }
            let mut allowed = Vec::new();
            let mut refusal = None;
            for address in resolved {
                match policy.check_address(&host, address.ip()) {
                    Ok(()) => allowed.push(address),
                    Err(message) => refusal = Some(message),
                }
            }
            match (allowed.is_empty(), refusal) {
                (true, Some(message)) => Err(message.into()),
                (true, None) => Err(format!("{host} has no address").into()),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}

/// rmcp's OAuth HTTP client with Tether's network policy (see the module comment).
pub struct GuardedOAuthClient {
    policy: Arc<Policy>,
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl GuardedOAuthClient {
    /// The client for server `name` at `server_url`; the server's own host is resolved once to
    /// learn which address classes it is on.
    pub async fn new(
        name: &str,
        server_url: &Url,
        settings: GuardSettings,
    ) -> Result<GuardedOAuthClient, String> {
        let mut server_classes: Vec<AddressClass> = Vec::new();
        if let Some(ip) = literal(server_url) {
            server_classes.push(AddressClass::of(ip));
        } else if let Some(host) = server_url.host_str() {
            if host.eq_ignore_ascii_case("localhost") {
                server_classes.push(AddressClass::Loopback);
            }
            let port = server_url.port_or_known_default().unwrap_or(443);
            if let Ok(addresses) = lookup(host, port).await {
                server_classes.extend(addresses.iter().map(|a| AddressClass::of(a.ip())));
            }
        }
        server_classes.dedup();
        let proxies = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
            .iter()
            .flat_map(|v| [v.to_string(), v.to_ascii_lowercase()])
            .filter_map(|v| std::env::var(v).ok())
            .filter_map(|proxy| {
                let proxy = if proxy.contains("://") {
                    proxy
                } else {
                    format!("http://{proxy}")
                };
                Url::parse(&proxy)
                    .ok()?
                    .host_str()
                    .map(str::to_ascii_lowercase)
            })
            .collect();
        let policy = Arc::new(Policy {
            server: name.to_string(),
            origin: origin(server_url),
            server_classes,
            settings,
            proxies,
            refusals: Mutex::new(Vec::new()),
        });
        let build = |redirect: reqwest::redirect::Policy| {
            crate::http_client::builder()
                .timeout(REQUEST_TIMEOUT)
                .redirect(redirect)
                .dns_resolver(Arc::new(GuardedResolver(policy.clone())))
                .build()
                .map_err(|e| format!("cannot build the OAuth HTTP client: {e}"))
        };
        let hops = policy.clone();
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match hops.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(message) => attempt.error(message),
            }
        });
        Ok(GuardedOAuthClient {
            follow: build(follow)?,
            stop: build(reqwest::redirect::Policy::none())?,
            policy,
        })
    }

    /// The client that follows no redirect, with the same resolver (for rmcp's
    /// `with_client`, which uses one client for everything).
    pub fn without_redirects(&self) -> reqwest::Client {
        self.stop.clone()
    }

    /// A handle on this client's refusals that outlives handing the client to rmcp.
    pub fn handle(&self) -> GuardHandle {
        GuardHandle {
            policy: self.policy.clone(),
            client: self.stop.clone(),
        }
    }
}

/// Reads what a [`GuardedOAuthClient`] refused, after rmcp owns the client.
#[derive(Clone)]
pub struct GuardHandle {
    policy: Arc<Policy>,
    client: reqwest::Client,
}

impl GuardHandle {
    /// The first refusal, if any.
    pub fn first_refusal(&self) -> Option<String> {
        self.policy.refusals.lock().ok()?.first().cloned()
    }

    /// Why discovery failed, when the guard is the reason. rmcp drops an authorization
    /// server whose URL it will not fetch before asking our client, so after a failure the
    /// protected resource metadata is read once more and each server it names is held to the
    /// policy; the first refusal is the answer.
    pub async fn explain(&self, server_url: &str, challenge: Option<&str>) -> Option<String> {
        if let Some(refusal) = self.first_refusal() {
            return Some(refusal);
        }
        let server = Url::parse(server_url).ok()?;
        let mut candidates = Vec::new();
        if let Some(named) = challenge.and_then(resource_metadata) {
            candidates.extend(server.join(&named).ok());
        }
        let path = server.path().trim_end_matches('/');
        for suffix in [path, ""] {
            candidates.extend(
                server
                    .join(&format!("/.well-known/oauth-protected-resource{suffix}"))
                    .ok(),
            );
        }
        for candidate in candidates {
            if self.policy.check_url(&candidate).is_err() {
                continue;
            }
            let Ok(response) = self.client.get(candidate).send().await else {
                continue;
            };
            let Ok(metadata) = response.json::<serde_json::Value>().await else {
                continue;
            };
            let servers = metadata["authorization_servers"].as_array()?;
            for named in servers.iter().filter_map(serde_json::Value::as_str) {
                let Ok(url) = Url::parse(named) else {
                    continue;
                };
                if !self.allows(&url).await {
                    continue;
                }
                // The server itself is allowed: a redirect of its metadata may not be.
                let path = url.path().trim_end_matches('/');
                for well_known in ["oauth-authorization-server", "openid-configuration"] {
                    let Ok(probe) = url.join(&format!("/.well-known/{well_known}{path}")) else {
                        continue;
                    };
                    let Ok(response) = self.client.get(probe.clone()).send().await else {
                        continue;
                    };
                    let location = response
                        .headers()
                        .get(reqwest::header::LOCATION)
                        .and_then(|l| l.to_str().ok())
                        .and_then(|l| probe.join(l).ok());
                    if response.status().is_redirection()
                        && let Some(location) = location
                        && !self.allows(&location).await
                    {
                        return self
                            .first_refusal()
                            .map(|refusal| format!("was redirected from {probe} and {refusal}"));
                    }
                }
            }
            return self.first_refusal();
        }
        None
    }

    /// Whether the policy allows requesting `url` (its scheme, and its address or every
    /// address its name resolves to); a refusal is recorded.
    async fn allows(&self, url: &Url) -> bool {
        if self.policy.check_url(url).is_err() {
            return false;
        }
        if literal(url).is_some() {
            return true;
        }
        let Some(host) = url.host_str() else {
            return false;
        };
        let port = url.port_or_known_default().unwrap_or(443);
        match lookup(host, port).await {
            // Every address is checked (not `any`), so each refusal is recorded.
            Ok(addresses) => {
                addresses
                    .iter()
                    .filter(|a| self.policy.check_address(host, a.ip()).is_ok())
                    .count()
                    > 0
            }
            Err(_) => true,
        }
    }
}

/// The `resource_metadata` parameter of a `WWW-Authenticate: Bearer …` challenge.
fn resource_metadata(challenge: &str) -> Option<String> {
    let start = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[start..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_string())
}

impl OAuthHttpClient for GuardedOAuthClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let request = reqwest::Request::try_from(request.request)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            self.policy.check_url(request.url())?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            let mut builder = http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                builder = builder.header(name, value);
            }
            let mut body = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| Box::new(e) as OAuthHttpClientError)?;
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(format!("an OAuth response was over {MAX_BODY} bytes").into());
                }
                body.extend_from_slice(&chunk);
            }
            builder
                .body(body)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(server: &str, classes: Vec<AddressClass>, settings: GuardSettings) -> Policy {
        let url = Url::parse(server).unwrap();
        Policy {
            server: "remote".into(),
            origin: origin(&url),
            server_classes: classes,
            settings,
            proxies: Vec::new(),
            refusals: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn addresses_are_classed() {
        let class = |s: &str| AddressClass::of(s.parse().unwrap());
        assert_eq!(class("8.8.8.8"), AddressClass::Public);
        assert_eq!(class("127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("10.1.2.3"), AddressClass::Private);
        assert_eq!(class("192.168.0.1"), AddressClass::Private);
        assert_eq!(class("100.64.0.1"), AddressClass::Private);
        assert_eq!(class("169.254.169.254"), AddressClass::LinkLocal);
        assert_eq!(class("::ffff:169.254.169.254"), AddressClass::LinkLocal);
        assert_eq!(class("fe80::1"), AddressClass::LinkLocal);
        assert_eq!(class("fd00::1"), AddressClass::Private);
        assert_eq!(class("0.0.0.0"), AddressClass::Reserved);
        assert_eq!(class("224.0.0.1"), AddressClass::Reserved);
        assert_eq!(class("2606:4700::1111"), AddressClass::Public);
    }

    #[test]
    fn a_public_server_reaches_only_public_https() {
        let p = policy(
            "https://mcp.example.com/mcp",
            vec![AddressClass::Public],
            GuardSettings::default(),
        );
        let check = |u: &str| p.check_url(&Url::parse(u).unwrap());
        assert!(check("https://auth.example.com/.well-known/x").is_ok());
        let http = check("http://auth.example.com/token").unwrap_err();
        assert!(http.contains("allowInsecureHttp"), "{http}");
        let private = check("https://10.0.0.7/token").unwrap_err();
        assert!(
            private.contains("private-network") && private.contains("allowPrivateAddresses"),
            "{private}"
        );
        let metadata = check("https://169.254.169.254/latest").unwrap_err();
        assert!(metadata.contains("link-local"), "{metadata}");
        assert!(check("https://127.0.0.1/").is_err());
        assert_eq!(p.refusals.lock().unwrap().len(), 4);
    }

    #[test]
    fn a_server_on_a_network_may_use_that_network_and_settings_relax() {
        let p = policy(
            "http://10.0.0.5/mcp",
            vec![AddressClass::Private],
            GuardSettings::default(),
        );
        let check = |u: &str| p.check_url(&Url::parse(u).unwrap());
        assert!(check("http://10.0.0.5/.well-known/x").is_ok(), "own origin");
        assert!(check("https://10.0.0.9/token").is_ok());
        assert!(check("https://169.254.169.254/").is_err());
        let relaxed = policy(
            "https://mcp.example.com/",
            vec![AddressClass::Public],
            GuardSettings {
                allow_private_addresses: true,
                allow_insecure_http: true,
            },
        );
        let check = |u: &str| relaxed.check_url(&Url::parse(u).unwrap());
        assert!(check("http://10.0.0.9/token").is_ok());
        assert!(check("https://169.254.169.254/").is_err(), "never relaxed");
    }
}
