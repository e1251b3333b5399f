//! SHA-256 digests of a model or checkpoint directory's files, written at save and checked at
//! load, so that a file changed after it was written (a truncated copy, flipped bits, NaNs
//! written into the weights by hand) is refused with its path instead of loading.
//!
//! The digest file is `checksums.sha256` in the format of coreutils' `sha256sum`
//! (`<64 hex digits>  <file name>` a line), so `sha256sum -c checksums.sha256` checks a
//! directory without this crate. A directory without the file (an HF download, a directory
//! written before digests existed) loads unchecked.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// The digest file's name inside a directory.
pub const DIGEST_FILE: &str = "checksums.sha256";

/// Whether a load checks a directory's digests (when it has a [`DIGEST_FILE`]). Weights are
/// checked for NaN and infinities either way: that costs one pass over values already being
/// converted, hashing costs a second read of every file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Check every file listed in the digest file (the default).
    #[default]
    Digests,
    /// Skip the digests (`--no-verify`: huge checkpoints on slow disks).
    Skip,
}

/// What [`verify_digests`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestCheck {
    /// Every listed file matched; the number of files.
    Verified(usize),
    /// The directory has no digest file.
    Absent,
}

/// The SHA-256 of a file, as 64 lowercase hex digits.
///
/// # Errors
/// [`Error::Io`] naming the file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| Error::io(path, e))?;
    Ok(hex(&hasher.finalize()))
}

/// The SHA-256 of bytes, as 64 lowercase hex digits.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The regular files of `dir` (one level) other than the digest file, sorted by name.
fn files_of(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if name == DIGEST_FILE || name.starts_with('.') || !path.is_file() {
            continue;
        }
        files.push((name, path));
    }
    files.sort();
    Ok(files)
}

/// Writes `dir/checksums.sha256` over every regular file of `dir` (one level), through a
/// temporary file renamed into place.
///
/// # Errors
/// [`Error::Io`] naming the file.
pub fn write_digests(dir: &Path) -> Result<()> {
    let mut text = String::new();
    for (name, path) in files_of(dir)? {
        text.push_str(&format!("{}  {name}\n", sha256_file(&path)?));
    }
    let tmp = dir.join(format!(".{DIGEST_FILE}.tmp"));
    let path = dir.join(DIGEST_FILE);
    let mut file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
}

/// Checks every file `dir/checksums.sha256` lists against its digest. A `*.safetensors`
/// file in `dir` that the list does not name is refused too: the loader would read it.
///
/// # Errors
/// [`Error::Digest`] naming the file that is missing, differs or is not listed, or the line
/// of a malformed digest file.
pub fn verify_digests(dir: &Path) -> Result<DigestCheck> {
    let list = dir.join(DIGEST_FILE);
    if !list.is_file() {
        return Ok(DigestCheck::Absent);
    }
    let text = std::fs::read_to_string(&list).map_err(|e| Error::io(&list, e))?;
    let mut listed = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || Error::Digest {
            path: list.clone(),
            message: format!(
                "line {}: expected `<64 hex digits>  <file name>`, got `{line}`",
                i + 1
            ),
        };
        let (digest, name) = line.split_once("  ").ok_or_else(bad)?;
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        // One level only: a listed path must not leave the directory.
        if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
            return Err(bad());
        }
        let path = dir.join(name);
        if !path.is_file() {
            return Err(Error::Digest {
                path,
                message: format!("is listed in {DIGEST_FILE} but missing"),
            });
        }
        let found = sha256_file(&path)?;
        if !found.eq_ignore_ascii_case(digest) {
            return Err(Error::Digest {
                path,
                message: format!(
                    "has changed since it was saved (sha256 {found}, {DIGEST_FILE} says {digest}): a corrupted or edited file"
                ),
            });
        }
        listed.insert(name.to_string());
    }
    for (name, path) in files_of(dir)? {
        if name.ends_with(".safetensors") && !listed.contains(&name) {
            return Err(Error::Digest {
                path,
                message: format!("is not listed in {DIGEST_FILE}: added after the save"),
            });
        }
    }
    Ok(DigestCheck::Verified(listed.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_standard_test_vector() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn issue_42_a_changed_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), "{}").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), [1u8, 2, 3]).unwrap();
        assert_eq!(verify_digests(dir.path()).unwrap(), DigestCheck::Absent);
        write_digests(dir.path()).unwrap();
        assert_eq!(
            verify_digests(dir.path()).unwrap(),
            DigestCheck::Verified(2)
        );
        // The format sha256sum reads.
        let list = std::fs::read_to_string(dir.path().join(DIGEST_FILE)).unwrap();
        assert!(
            list.contains(&format!("{}  a.json\n", sha256_bytes(b"{}"))),
            "{list}"
        );

        std::fs::write(dir.path().join("model.safetensors"), [1u8, 2, 4]).unwrap();
        let err = verify_digests(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("model.safetensors") && err.contains("has changed"),
            "{err}"
        );

        std::fs::write(dir.path().join("model.safetensors"), [1u8, 2, 3]).unwrap();
        std::fs::write(dir.path().join("extra.safetensors"), [0u8]).unwrap();
        let err = verify_digests(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("extra.safetensors") && err.contains("not listed"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("extra.safetensors")).unwrap();

        std::fs::remove_file(dir.path().join("a.json")).unwrap();
        let err = verify_digests(dir.path()).unwrap_err().to_string();
        assert!(err.contains("a.json") && err.contains("missing"), "{err}");
    }

    #[test]
    fn issue_42_a_malformed_digest_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "zz  a\n",
            &format!("{}  ../etc/passwd\n", "0".repeat(64)),
            "no",
        ] {
            std::fs::write(dir.path().join(DIGEST_FILE), format!("\n{bad}")).unwrap();
            let err = verify_digests(dir.path()).unwrap_err().to_string();
            assert!(err.contains("line 2"), "{bad}: {err}");
        }
    }
}
