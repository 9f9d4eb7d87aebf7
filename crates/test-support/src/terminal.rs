//! A real terminal for tests: a detached tmux session running one command, driven with
//! `send-keys` and read with `capture-pane`. Waits are for text to appear on the screen,
//! with a deadline, never for a fixed time.

use std::process::Command;
use std::time::{Duration, Instant};

/// One tmux session; killed when dropped.
pub struct Terminal {
    name: String,
}

impl Terminal {
    /// Starts `command` (a shell command line) in a 160×50 terminal with `env` set.
    pub fn start(command: &str, env: &[(&str, &str)]) -> Terminal {
        let name = format!("tether-test-{}-{:x}", std::process::id(), rand_suffix());
        let mut tmux = Command::new("tmux");
        tmux.args([
            "-L",
            &name,
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "160",
            "-y",
            "50",
        ]);
        for (key, value) in env {
            tmux.args(["-e", &format!("{key}={value}")]);
        }
        // Keep the pane after the command exits so its last screen can still be read. The
        // trap keeps the pane's shell alive when a test presses Ctrl-C: without one, a
        // non-interactive sh dies of the SIGINT meant for the program, the pane closes and
        // the screen reads empty. A trap (not an ignore) is reset on exec, so the program
        // still gets Ctrl-C.
        let wrapped = format!("trap 'true' INT; {command}; echo \"[exit $?]\"; sleep 600");
        let status = tmux.arg(wrapped).status().expect("tmux is installed");
        assert!(status.success(), "tmux new-session failed");
        Terminal { name }
    }

    /// Types `text` literally (no key names).
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", &self.name, "-l", text]);
    }

    /// Presses named keys (`Enter`, `C-c`, `C-d`, `Up`, `Tab`).
    pub fn press(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", self.name.as_str()];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// The screen as text, with the scrollback.
    pub fn screen(&self) -> String {
        let output = Command::new("tmux")
            .args([
                "-L",
                &self.name,
                "capture-pane",
                "-p",
                "-J",
                "-S",
                "-2000",
                "-t",
                &self.name,
            ])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The screen with its colours and styles as escape sequences.
    pub fn screen_with_styles(&self) -> String {
        let output = Command::new("tmux")
            .args([
                "-L",
                &self.name,
                "capture-pane",
                "-p",
                "-e",
                "-J",
                "-t",
                &self.name,
            ])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until `text` is on the screen (at least `count` times), or panics with the
    /// screen after `timeout`.
    pub fn wait_for_count(&self, text: &str, count: usize, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= count {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited {timeout:?} for {text:?} ×{count}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the program sits at an empty `prompt`: the last non-blank line of the screen
    /// is the prompt alone. Keys sent before that can reach the terminal while it is still in
    /// cooked mode, where Ctrl-D is taken by the line discipline and never reaches the editor.
    pub fn wait_for_idle_prompt(&self, prompt: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            let last = screen.lines().rev().find(|l| !l.trim().is_empty());
            if last.is_some_and(|l| l.trim_end() == prompt.trim_end()) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited 30s for an empty {prompt:?} prompt; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `text` is on the screen.
    pub fn wait_for(&self, text: &str) -> String {
        self.wait_for_count(text, 1, Duration::from_secs(30))
    }

    fn tmux(&self, args: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.name])
            .args(args)
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux {args:?} failed");
    }
}

fn rand_suffix() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    u128::from(RandomState::new().hash_one(0u8))
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.name, "kill-server"])
            .status();
    }
}
