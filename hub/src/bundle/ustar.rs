//! A deterministic POSIX ustar writer for the bundle's `FILE.tar` form.
//!
//! Hand-written rather than a new dependency: the bundle needs only regular
//! files and directories, and the same input must give the same bytes
//! (mtime 0, owner 0:0, no user or group names), so a bundle's own checksum
//! is reproducible. GNU and BSD tar read it.

const BLOCK: usize = 512;

/// One entry: a `/`-separated relative path, its bytes, whether it is
/// executable. Directories are derived from the paths.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub path: &'a str,
    pub data: &'a [u8],
    pub executable: bool,
}

/// A path ustar cannot hold (over 255 bytes, or no split into a 155-byte
/// prefix and a 100-byte name).
#[derive(Debug, thiserror::Error)]
#[error("path {0:?} is too long for a ustar archive")]
pub struct PathTooLong(pub String);

/// The archive: directory entries for every parent (sorted, before their
/// contents), then the files in the given order, then the two zero blocks.
pub fn archive(entries: &[Entry<'_>]) -> Result<Vec<u8>, PathTooLong> {
    let mut dirs: Vec<String> = Vec::new();
    for entry in entries {
        let mut parent = entry.path;
        while let Some((dir, _)) = parent.rsplit_once('/') {
            dirs.push(format!("{dir}/"));
            parent = dir;
        }
    }
    dirs.sort();
    dirs.dedup();
    let mut out = Vec::new();
    for dir in &dirs {
        out.extend_from_slice(&header(dir, 0, 0o755, b'5')?);
    }
    for entry in entries {
        let mode = if entry.executable { 0o755 } else { 0o644 };
        out.extend_from_slice(&header(entry.path, entry.data.len() as u64, mode, b'0')?);
        out.extend_from_slice(entry.data);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn header(path: &str, size: u64, mode: u32, kind: u8) -> Result<[u8; BLOCK], PathTooLong> {
    let (prefix, name) = split_path(path).ok_or_else(|| PathTooLong(path.to_owned()))?;
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0); // uid
    octal(&mut h[116..124], 0); // gid
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0); // mtime
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is computed with its own field read as eight spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum));
    Ok(h)
}

/// `(prefix, name)` with name ≤ 100 and prefix ≤ 155 bytes, split at a `/`.
fn split_path(path: &str) -> Option<(&str, &str)> {
    if path.len() <= 100 {
        return Some(("", path));
    }
    // The last separator that still leaves the prefix short enough; a
    // directory's trailing `/` is never the split point.
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    trimmed
        .match_indices('/')
        .map(|(i, _)| i)
        .rfind(|&i| i <= 155 && path.len() - i - 1 <= 100)
        .map(|i| (&path[..i], &path[i + 1..]))
}

/// Zero-padded octal digits and a terminating NUL filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_checksums_and_pads() {
        let tar = archive(&[Entry {
            path: "a/b.txt",
            data: b"hello",
            executable: false,
        }])
        .unwrap();
        // dir header, file header, one data block, two end blocks
        assert_eq!(tar.len(), 5 * BLOCK);
        assert_eq!(&tar[..3], b"a/\0");
        assert_eq!(tar[156], b'5');
        let file = &tar[BLOCK..2 * BLOCK];
        assert_eq!(&file[..8], b"a/b.txt\0");
        assert_eq!(&file[124..136], b"00000000005\0");
        assert_eq!(&file[100..108], b"0000644\0");
        let mut copy = [0u8; BLOCK];
        copy.copy_from_slice(file);
        copy[148..156].fill(b' ');
        let sum: u32 = copy.iter().map(|&b| u32::from(b)).sum();
        let stored = std::str::from_utf8(&file[148..154]).unwrap();
        assert_eq!(u32::from_str_radix(stored, 8).unwrap(), sum);
        assert_eq!(&tar[2 * BLOCK..2 * BLOCK + 5], b"hello");
        assert!(tar[2 * BLOCK + 5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn long_paths_use_the_prefix_field() {
        let dir = "d".repeat(120);
        let path = format!("{dir}/file.yaml");
        assert_eq!(split_path(&path), Some((dir.as_str(), "file.yaml")));
        assert_eq!(split_path(&format!("{dir}/")), None);
        assert!(split_path(&"x".repeat(101)).is_none());
        assert!(
            archive(&[Entry {
                path: &"y".repeat(300),
                data: b"",
                executable: false
            }])
            .is_err()
        );
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        let entries = [Entry {
            path: "x/y",
            data: b"1",
            executable: true,
        }];
        assert_eq!(archive(&entries).unwrap(), archive(&entries).unwrap());
    }
}
