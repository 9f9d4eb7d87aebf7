//! The prompt cache: the model's state after a prompt's system turn (the usage guide, the
//! servers' instructions, the offered tools), kept on disk so that the next request with the
//! same opening, in this process or the next `tether run`, evaluates only what follows it; and
//! the state at the turn's earlier levels (after the usage guide, before the tools: see
//! `decoding::evaluate_shared`), so that a request with other tools evaluates only its own.
//! On two cores the 165 tokens of the README's first command's system turn took about 0.5 s,
//! more than the model's whole answer; loading them takes a few milliseconds.
//!
//! An entry is llama.cpp's sequence state file (the tokens and their keys and values), named
//! by a hash of llama.cpp's version, the model and those tokens, and by a checksum of its
//! bytes. llama.cpp aborts the process on a state file cut short, so an entry whose bytes do
//! not match its checksum is removed unread; a loaded entry is used only when its tokens are
//! exactly the prompt's, so a stale, colliding or foreign file costs one evaluation, never a
//! wrong answer or a crash. Entries are written under a temporary name and renamed, so
//! concurrent runs never read half a file; past [`MAX_ENTRIES`] the least recently used go.

use std::path::{Path, PathBuf};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;

/// The most entries kept: one per set of tools and servers a person uses, two requests each,
/// and the levels those share.
pub const MAX_ENTRIES: usize = 128;

/// The most bytes kept: the 135M model's entries are 2–4 MB, a 1.5B model's long system turn
/// tens of megabytes.
pub const MAX_BYTES: u64 = 512 << 20;

/// Shorter openings are evaluated each time: their state is not worth a file.
pub const MIN_TOKENS: usize = 32;

/// The llama.cpp whose state files these are: another version may lay them out otherwise,
/// and its reader asserts instead of failing. A unit test holds it to `Cargo.lock`.
const STATE_FORMAT: &str = "llama-cpp-sys-2 0.1.161";

/// What [`PromptCache::restore`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// The state is loaded.
    Restored,
    /// No entry is stored; the context is as it was.
    Absent,
    /// An entry was stored but could not be loaded; the context's cache is empty.
    Failed,
}

/// Where entries live, and which model they belong to.
#[derive(Debug, Clone)]
pub struct PromptCache {
    dir: PathBuf,
    /// Tells models apart: a hash of the model file's path, size and modification time.
    model: u64,
}

impl PromptCache {
    /// A cache in `dir` for the model at `model_path`.
    pub fn new(dir: PathBuf, model_path: &Path) -> PromptCache {
        let mut hash = Fnv::default();
        hash.write(model_path.as_os_str().as_encoded_bytes());
        if let Ok(meta) = std::fs::metadata(model_path) {
            hash.write(&meta.len().to_le_bytes());
            if let Ok(since) = meta
                .modified()
                .map(|m| m.duration_since(std::time::UNIX_EPOCH).unwrap_or_default())
            {
                hash.write(&since.as_nanos().to_le_bytes());
            }
        }
        PromptCache {
            dir,
            model: hash.finish(),
        }
    }

    /// The key of the entry for `tokens`: the start of its file name.
    fn key(&self, tokens: &[LlamaToken]) -> String {
        let mut hash = Fnv::default();
        hash.write(STATE_FORMAT.as_bytes());
        hash.write(&self.model.to_le_bytes());
        for token in tokens {
            hash.write(&token.0.to_le_bytes());
        }
        format!("{:016x}-", hash.finish())
    }

    /// The stored entry for `tokens`, when its bytes match the checksum in its name; an entry
    /// that does not is removed.
    fn entry(&self, tokens: &[LlamaToken]) -> Option<PathBuf> {
        let key = self.key(tokens);
        let path = std::fs::read_dir(&self.dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&key) && n.ends_with(".state"))
            })?;
        let named = path
            .file_stem()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(&key))
            .and_then(|sum| u64::from_str_radix(sum, 16).ok());
        let bytes = std::fs::read(&path).ok()?;
        if named != Some(checksum(&bytes)) {
            tracing::debug!(path = %path.display(), "prompt cache entry damaged; removed");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(path)
    }

    /// Loads the state after `tokens` into `context`'s sequence 0, which is emptied first when
    /// an entry is stored; what the context held is untouched when none is.
    pub fn restore(&self, context: &mut LlamaContext<'_>, tokens: &[LlamaToken]) -> Restore {
        let Some(path) = self.entry(tokens) else {
            return Restore::Absent;
        };
        // A state is loaded into an empty sequence.
        if context.clear_kv_cache_seq(Some(0), None, None).is_err() {
            context.clear_kv_cache();
            return Restore::Failed;
        }
        match context.state_seq_load_file(&path, 0, tokens.len()) {
            Ok((stored, _)) if stored == tokens => {
                // Recently used: eviction goes by modification time.
                let _ = std::fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|file| file.set_modified(std::time::SystemTime::now()));
                Restore::Restored
            }
            outcome => {
                tracing::debug!(
                    path = %path.display(),
                    ok = outcome.is_ok(),
                    "prompt cache entry unusable; evaluating the prompt"
                );
                context.clear_kv_cache();
                Restore::Failed
            }
        }
    }

    /// Stores the state of `context`'s sequence 0, which holds `tokens`. Failures (a
    /// read-only or full disk) only cost the next request the evaluation.
    pub fn store(&self, context: &LlamaContext<'_>, tokens: &[LlamaToken]) {
        let key = self.key(tokens);
        if let Err(error) = create_private_dir(&self.dir) {
            tracing::debug!(dir = %self.dir.display(), %error, "cannot create the prompt cache");
            return;
        }
        let partial = self
            .dir
            .join(format!("{key}0.partial-{}", std::process::id()));
        let stored = context
            .state_seq_save_file(&partial, 0, tokens)
            .map_err(|e| e.to_string())
            .and_then(|_| std::fs::read(&partial).map_err(|e| e.to_string()))
            .and_then(|bytes| {
                let name = format!("{key}{:016x}.state", checksum(&bytes));
                std::fs::rename(&partial, self.dir.join(&name)).map_err(|e| e.to_string())?;
                Ok(name)
            });
        let name = match stored {
            Ok(name) => name,
            Err(error) => {
                let _ = std::fs::remove_file(&partial);
                tracing::debug!(dir = %self.dir.display(), %error, "cannot store a prompt cache entry");
                return;
            }
        };
        // Another run may have stored the same tokens at the same time with other bytes
        // (threads summing in another order): one entry per key.
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let other = entry.file_name();
                let other = other.to_string_lossy();
                if other.starts_with(&key) && other.ends_with(".state") && other != name {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        self.evict();
    }

    /// Removes the least recently used entries past [`MAX_ENTRIES`] or [`MAX_BYTES`], and
    /// partial files a stopped run left behind.
    fn evict(&self) {
        self.evict_past(MAX_ENTRIES, MAX_BYTES);
    }

    fn evict_past(&self, max_entries: usize, max_bytes: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut states: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = entry.metadata().ok();
            let modified = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .unwrap_or(std::time::UNIX_EPOCH);
            let bytes = meta.map_or(0, |m| m.len());
            match path.extension().and_then(|e| e.to_str()) {
                Some("state") => states.push((modified, bytes, path)),
                Some(e) if e.starts_with("partial-") && modified < an_hour_ago => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        // Newest first; keep while both limits hold.
        states.sort_by_key(|state| std::cmp::Reverse(state.0));
        let mut total = 0u64;
        for (index, (_, bytes, path)) in states.iter().enumerate() {
            total = total.saturating_add(*bytes);
            if index >= max_entries || total > max_bytes {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Creates `dir` readable by its owner alone where it is new: the state holds the system
/// prompt, the person's own words among it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// A checksum of a file's bytes, eight at a time (a state file is megabytes).
fn checksum(bytes: &[u8]) -> u64 {
    let mut sum = Fnv::default();
    let words = bytes.chunks_exact(8);
    sum.write(words.remainder());
    sum.write(&(bytes.len() as u64).to_le_bytes());
    let mut hash = sum.finish();
    for word in words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        hash = (hash ^ u64::from_le_bytes(eight)).wrapping_mul(0x0100_0000_01b3);
        hash ^= hash >> 29;
    }
    hash
}

/// 64-bit FNV-1a: stable across builds, unlike `std`'s hasher, so entries outlive an upgrade
/// of the compiler.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_model_and_tokens() {
        let dir = PathBuf::from("/nonexistent");
        let a = PromptCache::new(dir.clone(), Path::new("/models/a.gguf"));
        let b = PromptCache::new(dir, Path::new("/models/b.gguf"));
        let tokens = [LlamaToken(1), LlamaToken(2)];
        assert_ne!(a.key(&tokens), b.key(&tokens));
        assert_ne!(a.key(&tokens), a.key(&tokens[..1]));
        assert_eq!(a.key(&tokens), a.key(&[LlamaToken(1), LlamaToken(2)]));
    }

    #[test]
    fn an_entry_whose_bytes_do_not_match_its_name_is_removed_unread() {
        let dir = std::env::temp_dir().join(format!("tether-prompt-entry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cache = PromptCache::new(dir.clone(), Path::new("/models/a.gguf"));
        let tokens = [LlamaToken(7); 40];
        let bytes = vec![3u8; 1001];
        let good = dir.join(format!(
            "{}{:016x}.state",
            cache.key(&tokens),
            checksum(&bytes)
        ));
        std::fs::write(&good, &bytes).unwrap();
        assert_eq!(cache.entry(&tokens), Some(good.clone()));
        // Cut short, as by a full disk or a killed copy.
        std::fs::write(&good, &bytes[..500]).unwrap();
        assert_eq!(cache.entry(&tokens), None);
        assert!(!good.exists());
        assert_ne!(checksum(&bytes), checksum(&bytes[..1000]));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_cache_folder_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tether-prompt-dir-{}", std::process::id()));
        create_private_dir(&dir.join("prompt-cache")).unwrap();
        let mode = std::fs::metadata(dir.join("prompt-cache"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_state_format_is_the_locked_llama_cpp() {
        let lock =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock"))
                .unwrap();
        let (name, version) = STATE_FORMAT.split_once(' ').unwrap();
        assert!(
            lock.contains(&format!("name = \"{name}\"\nversion = \"{version}\"")),
            "update STATE_FORMAT to the llama-cpp-sys-2 in Cargo.lock"
        );
    }

    #[test]
    fn eviction_keeps_the_most_recently_used() {
        let dir = std::env::temp_dir().join(format!("tether-prompt-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cache = PromptCache::new(dir.clone(), Path::new("/models/a.gguf"));
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        for i in 0..MAX_ENTRIES + 3 {
            let path = dir.join(format!("{i:016x}.state"));
            std::fs::write(&path, b"x").unwrap();
            // The first three are the oldest.
            let when = old + std::time::Duration::from_secs(i as u64);
            std::fs::File::options()
                .append(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        let stale = dir.join("0000000000000000.partial-1");
        std::fs::write(&stale, b"x").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        cache.evict();
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), MAX_ENTRIES, "{left:?}");
        for i in 0..3 {
            assert!(!left.contains(&format!("{i:016x}.state")), "{left:?}");
        }
        assert!(left.contains(&format!("{:016x}.state", MAX_ENTRIES + 2)));
        // A byte budget of 10 keeps the ten newest one-byte entries.
        cache.evict_past(MAX_ENTRIES, 10);
        let left = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(left, 10);
        assert!(dir.join(format!("{:016x}.state", MAX_ENTRIES + 2)).exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
