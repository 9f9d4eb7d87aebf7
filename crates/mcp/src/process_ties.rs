//! What ties a stdio server's processes to Tether's life, beyond the process group that
//! `stdio` kills on the normal way out and on SIGTERM, SIGINT and SIGHUP:
//!
//! - **A parent-death signal.** When Tether dies in a way no code of ours sees (SIGKILL, the
//!   OOM killer), the kernel sends the server SIGTERM. Setting it needs `prctl` between fork
//!   and exec, which is unsafe code here (forbidden in this workspace), so the server is started
//!   through util-linux's `setpriv --pdeathsig TERM --` where that exists: the same process,
//!   with the signal set, then the server's own program.
//! - **A mark in the environment.** Every server gets `TETHER_HOST_PID`; its descendants
//!   inherit it, so the ones that left the process group (`setsid`, daemons) are found by it
//!   in `/proc` and stopped when Tether stops its servers.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable that marks a server and its descendants as Tether's (its value: our pid).
pub(crate) const HOST_PID_VAR: &str = "TETHER_HOST_PID";

/// Whether this process started a server (then its end looks for escaped descendants; a
/// command that started none reads nothing of `/proc`).
static STARTED_A_SERVER: AtomicBool = AtomicBool::new(false);

/// `setpriv` if it can set a parent-death signal (util-linux 2.33 and later). The answer is
/// kept once `setpriv --help` ran or no `setpriv` exists; a failure to start it (a busy
/// machine out of processes for a moment) is asked again at the next server's start rather
/// than leaving every server of this run untied.
fn setpriv() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    if let Some(found) = FOUND.get() {
        return found.as_deref();
    }
    let mut undecided = false;
    let found = ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .map(PathBuf::from)
        .filter(|path| path.is_file())
        .find(|path| {
            match std::process::Command::new(path)
                .arg("--help")
                .stdin(std::process::Stdio::null())
                .output()
            {
                Ok(output) => String::from_utf8_lossy(&output.stdout).contains("--pdeathsig"),
                Err(_) => {
                    undecided = true;
                    false
                }
            }
        });
    match (found, undecided) {
        (None, true) => None,
        (found, _) => FOUND.get_or_init(|| found).as_deref(),
    }
}

/// Whether `command` names a program that exists: a path (against `cwd` when relative), or a
/// name on `path`. Only then is it started through `setpriv`, so that a missing program is
/// still reported by our own spawn, in our words.
fn exists(command: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> bool {
    if command.contains('/') {
        let program = Path::new(command);
        return match cwd {
            Some(dir) if program.is_relative() => dir.join(program).is_file(),
            _ => program.is_file(),
        };
    }
    path.is_some_and(|path| std::env::split_paths(path).any(|dir| dir.join(command).is_file()))
}

/// The program and arguments that start `command` with `args` tied to Tether's life: through
/// `setpriv` when it is there and the program exists, else unchanged.
pub(crate) fn tied_command(
    command: &str,
    args: &[String],
    path: Option<&OsStr>,
    cwd: Option<&Path>,
) -> (PathBuf, Vec<String>) {
    STARTED_A_SERVER.store(true, Ordering::Relaxed);
    match setpriv() {
        Some(setpriv) if cfg!(target_os = "linux") && exists(command, path, cwd) => {
            let mut tied = vec![
                "--pdeathsig".into(),
                "TERM".into(),
                "--".into(),
                command.into(),
            ];
            tied.extend(args.iter().cloned());
            (setpriv.to_path_buf(), tied)
        }
        _ => (PathBuf::from(command), args.to_vec()),
    }
}

/// Stops (SIGKILL) every process that carries our mark but left its server's process group,
/// so a `setsid` grandchild does not outlive Tether. Called once the servers are stopped.
pub fn stop_escaped_descendants() {
    #[cfg(target_os = "linux")]
    if STARTED_A_SERVER.load(Ordering::Relaxed) {
        let own = std::process::id();
        let mark = format!("{HOST_PID_VAR}={own}");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            if u32::try_from(pid).is_ok_and(|pid| pid == own) {
                continue;
            }
            // Only processes of this user are readable; a foreign one is none of ours.
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ.split(|b| *b == 0).any(|var| var == mark.as_bytes()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_program_that_exists_is_started_through_setpriv() {
        let path = std::env::var_os("PATH");
        let (program, args) =
            tied_command("sh", &["-c".into(), "true".into()], path.as_deref(), None);
        if setpriv().is_some() {
            assert!(program.ends_with("setpriv"), "{program:?}");
            assert_eq!(args, ["--pdeathsig", "TERM", "--", "sh", "-c", "true"]);
        }
        let (program, args) = tied_command("no-such-program-here", &[], path.as_deref(), None);
        assert_eq!(program, PathBuf::from("no-such-program-here"));
        assert!(args.is_empty());
        assert!(!exists("./missing", None, Some(Path::new("/"))));
        assert!(exists("sh", path.as_deref(), None));
    }
}
