//! Files only the user may read, created so nobody else can slip one in first: sessions,
//! credentials and the images and audio tools return. Every file is created exclusively
//! (never opened if it exists, never through a symlink) with mode 0600, in directories that
//! are 0700 and checked to be the user's own, so a planted symlink or a leftover file with a
//! wider mode cannot redirect or expose what Tether writes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Creates `dir` (and its parents) if needed and makes sure it is a real directory of ours
/// that nobody else can enter: mode 0700, not a symlink, owned by the current user.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory (a symlink or file is in its place); remove it",
            dir.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = nix::unistd::getuid().as_raw();
        if meta.uid() != me {
            return Err(io::Error::other(format!(
                "{} belongs to another user (uid {}); remove it or set TMPDIR",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// Creates `path` for writing, failing if anything (a file, a symlink) is already there.
/// The file is 0600 from the first moment.
pub fn create_new(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(nix::libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// Creates a new file in `dir` named `{stem}-{random}.{extension}` and returns it with its
/// path; names are unpredictable, and a taken name is skipped, never reused.
pub fn create_unique(dir: &Path, stem: &str, extension: &str) -> io::Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..16 {
        let path = dir.join(format!("{stem}-{:016x}.{extension}", random_u64()));
        match create_new(&path) {
            Ok(file) => return Ok((file, path)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free file name")))
}

/// Replaces `path` with `bytes` in one step: written to a new private file beside it, synced,
/// then renamed over it, so a crash leaves the old or the new content and the result is 0600
/// whatever mode an earlier file or a leftover temporary had.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut file, partial) = create_unique(dir, &format!(".{name}"), "part")?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Not for secrets: only to make names unguessable, which exclusive creation does not rely on.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    RandomState::new().hash_one((nanos, std::process::id()))
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tether-private-{}-{name}-{:x}",
            std::process::id(),
            random_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_planted_symlink_is_never_written_through() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let trap = dir.join("image.png");
        symlink(&victim, &trap).unwrap();
        assert!(create_new(&trap).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn files_are_0600_and_directories_0700_even_over_leftovers() {
        let dir = scratch("modes");
        let private = dir.join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(
            &private,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        private_dir(&private).unwrap();
        assert_eq!(std::fs::metadata(&private).unwrap().mode() & 0o777, 0o700);

        let target = private.join("credentials.json");
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        write_atomically(&target, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o600);

        let (_, path) = create_unique(&private, "tiny", "png").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let (_, other) = create_unique(&private, "tiny", "png").unwrap();
        assert_ne!(path, other);
    }

    #[test]
    fn a_symlink_in_place_of_the_directory_is_refused() {
        let dir = scratch("dir-link");
        let elsewhere = scratch("elsewhere");
        let link = dir.join("tether");
        symlink(&elsewhere, &link).unwrap();
        let error = private_dir(&link).unwrap_err().to_string();
        assert!(error.contains("not a directory"), "{error}");
    }
}
