//! OAuth end to end: `tether auth login` against the conformance suite's OAuth-protected
//! mock MCP server and its authorization server, both on loopback. The suite checks the
//! protocol side (discovery, registration, PKCE, resource indicator, token request); this
//! test checks what the user sees and what is saved.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use test_support::{conformance_suite, fixture};

fn tether(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env("TETHER_CREDENTIALS", dir.join("credentials.json"))
        .env("TETHER_DATA_DIR", dir.join("data"))
        .output()
        .unwrap()
}

#[test]
fn login_saves_a_private_token_that_later_commands_use_and_logout_forgets() {
    let dir = std::env::temp_dir().join(format!("tether-oauth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = fixture("oauth_login.sh");
    let suite = conformance_suite()
        .args([
            "client",
            "--command",
            &format!("bash {}", script.display()),
            "--scenario",
            "auth/metadata-default",
            "--spec-version",
            "2025-11-25",
            "-o",
        ])
        .arg(dir.join("results"))
        .current_dir(&dir)
        .env("TETHER", env!("CARGO_BIN_EXE_tether"))
        .env("OAUTH_TEST_DIR", &dir)
        .env("TETHER_CREDENTIALS", dir.join("credentials.json"))
        .output()
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    assert!(
        suite.status.success(),
        "suite: {}\nlogin stderr: {}\nlogin stdout: {}",
        String::from_utf8_lossy(&suite.stdout),
        read("login.err"),
        read("login.out")
    );
    assert!(read("login.err").contains("Tether does not open it for you"));
    assert!(
        read("login.out").contains("signed in to \"remote\""),
        "{}",
        read("login.out")
    );
    assert!(
        read("browser.out").contains("Tether is signed in"),
        "the browser landed on Tether's loopback page"
    );
    assert!(
        read("tools.out").contains("remote__"),
        "tools listed with the saved token: {}",
        read("tools.out")
    );

    let path = dir.join("credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "tokens are private to the user");
    }
    let url = read("url").trim().to_string();
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        saved[&url]["token_response"]["access_token"].is_string(),
        "{saved}"
    );
    assert!(saved[&url]["issuer"].is_string(), "the issuer is recorded");

    let remote = format!("remote={url}");
    let status = tether(&dir, &["--url", &remote, "auth", "status"]);
    let status_text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status_text.contains("remote: signed in (issuer "),
        "{status_text}"
    );

    let logout = tether(&dir, &["--url", &remote, "auth", "logout", "remote"]);
    assert!(String::from_utf8_lossy(&logout.stdout).contains("signed out of \"remote\""));
    let status = tether(&dir, &["--url", &remote, "auth", "status", "remote"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("remote: not signed in"));

    let stdio = tether(
        &dir,
        &["--stdio", "local=python3 x.py", "auth", "login", "local"],
    );
    assert_eq!(stdio.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stdio.stderr).contains("OAuth applies only to HTTP servers"));
}

/// A protected resource on loopback whose metadata names `authorization_server`; with
/// `redirect_to`, its own authorization-server metadata redirects there instead. Answers
/// until the test process ends.
fn hostile_resource(authorization_server: Option<&str>, redirect_to: Option<&str>) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let named = authorization_server
        .map(str::to_string)
        .unwrap_or_else(|| format!("http://127.0.0.1:{port}/as"));
    let redirect_to = redirect_to.map(str::to_string);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                head.push_str(&line);
                line.clear();
            }
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, headers, body) = if path
                .starts_with("/.well-known/oauth-protected-resource")
            {
                let body = serde_json::json!({
                    "resource": format!("http://127.0.0.1:{port}/mcp"),
                    "authorization_servers": [named],
                });
                ("200 OK", String::new(), body.to_string())
            } else if path.contains("/.well-known/") && redirect_to.is_some() {
                let to = redirect_to.clone().unwrap();
                ("302 Found", format!("Location: {to}\r\n"), String::new())
            } else {
                let challenge = format!(
                    "WWW-Authenticate: Bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\"\r\n"
                );
                ("401 Unauthorized", challenge, "{}".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn discovery_never_follows_a_server_to_link_local_or_private_addresses() {
    // No traffic reaches these addresses: the guard refuses before connecting, and the error
    // names the reason and the setting that relaxes it.
    let dir = test_support::scratch_dir("auth", "guards");
    let login = |port: u16| {
        let url = format!("hostile=http://127.0.0.1:{port}/mcp");
        let output = tether(&dir, &["--url", &url, "auth", "login", "hostile"]);
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    let (code, stderr) = login(hostile_resource(Some("https://169.254.169.254/"), None));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("refused https://169.254.169.254/")
            && stderr.contains("link-local address (where cloud metadata services answer)"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

    let (code, stderr) = login(hostile_resource(Some("https://10.20.30.40/"), None));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("10.20.30.40 is a private-network address")
            && stderr
                .contains("\"oauth\": {\"allowPrivateAddresses\": true} on server \"hostile\""),
        "{stderr}"
    );

    let (code, stderr) = login(hostile_resource(Some("http://auth.example.com/"), None));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("must be https") && stderr.contains("allowInsecureHttp"),
        "{stderr}"
    );

    // A loopback authorization server that redirects its metadata to the metadata service.
    let (code, stderr) = login(hostile_resource(
        None,
        Some("http://169.254.169.254/latest/meta-data/"),
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("was redirected from")
            && stderr.contains("refused http://169.254.169.254/latest/meta-data/"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("signed in"),
        "a redirect to a refused address ends the sign-in: {stderr}"
    );
}

/// A saved sign-in is restored before the handshake, and restoring it asks the server for its
/// OAuth metadata first. A server that accepts connections and never answers must cost no
/// more than the server's start-up timeout, sign-in included.
#[test]
fn the_startup_timeout_covers_restoring_a_saved_sign_in() {
    let dir = std::env::temp_dir().join(format!("tether-oauth-stall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/mcp",
        listener.local_addr().unwrap().port()
    );
    std::thread::spawn(move || {
        // Accept and hold every connection, answering nothing.
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    std::fs::write(
        dir.join("credentials.json"),
        serde_json::json!({&url: {"client_id": "tether-test", "token_response": {"access_token": "saved", "token_type": "bearer"}}})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("tether.json"),
        serde_json::json!({"mcpServers": {"stalled": {"url": &url, "startupTimeout": "1s"}}})
            .to_string(),
    )
    .unwrap();
    let output = tether(&dir, &["--config", "tether.json", "servers", "--json"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("sign-in and handshake did not finish in time"),
        "the one deadline ran out, not a later one: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("after 1s"), "{stdout}");
}
