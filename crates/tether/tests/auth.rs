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
