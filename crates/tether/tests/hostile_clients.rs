//! `tether serve --http` against misbehaving clients on loopback (issue 29's gateway probe):
//! each case is held to a status, a line that explains it and a bound on what it costs.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// POSTs an `initialize` and returns the status code of the answer (0 when the connection
/// fails or closes first).
fn initialize_status(url: &str) -> u16 {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let Ok(mut stream) = TcpStream::connect(address) else {
        return 0;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    match stream.read_exact(&mut head) {
        Ok(()) => String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0),
        Err(_) => 0,
    }
}

#[test]
fn running_out_of_file_descriptors_backs_off_instead_of_spinning() {
    // The gateway (and its built-in server) under a limit of 64 open files.
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new("sh");
    command.args([
        "-c",
        "ulimit -n 64 && exec \"$0\" \"$@\"",
        tether,
        "serve",
        "--http",
        "127.0.0.1:0",
    ]);
    let (mut child, url, log) = test_support::spawn_http_gateway_logged(&mut command);
    assert_eq!(initialize_status(&url), 200, "answers before the flood");

    // 100 idle connections: the kernel queues them, the gateway runs out of descriptors
    // accepting them.
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    // The measure: what the gateway writes in 1.5 s of exhaustion. A loop that retries at once
    // logs a line per failed accept, tens of megabytes a second.
    std::thread::sleep(Duration::from_millis(1500));
    let logged: usize = log.lock().unwrap().iter().map(|l| l.len() + 1).sum();
    assert!(
        logged < 64 * 1024,
        "{logged} bytes of log in 1.5 s of exhausted descriptors"
    );
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("accepting a connection failed") && l.contains("ulimit")),
        "the warning names the cause: {:?}",
        log.lock().unwrap()
    );

    // Once the idle clients go, the gateway answers again within its back-off (at most 1 s).
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if initialize_status(&url) == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not recover: {:?}",
            log.lock().unwrap().iter().rev().take(5).collect::<Vec<_>>()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
