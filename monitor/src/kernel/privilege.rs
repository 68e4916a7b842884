//! Capabilities: what montrace holds, dropping them once the eBPF programs are attached, and the
//! install-time grant that lets ordinary users track their own commands exactly.
//!
//! The grant (`sudo montrace setcap`) gives the installed binary two file capabilities,
//! CAP_BPF (load programs, create maps) and CAP_PERFMON (attach them to tracepoints, read task
//! fields), in its permitted and effective sets. Nothing else: no CAP_SYS_ADMIN (mounting tracefs
//! for classic tracepoints; `tp_btf` needs no tracefs), no CAP_SYS_PTRACE, no CAP_DAC_*. An
//! ordinary user who runs the binary gets those two for the start-up only: montrace drops every
//! capability (effective, permitted, inheritable, ambient) right after loading its programs and
//! before it releases the command (forked earlier and held at a barrier, it clears its own
//! before exec), so the command starts with none and montrace then acts with the user's own
//! rights alone (docs/security.md).
//!
//! The capability system calls are made directly (`capget`/`capset`, version 3): a few lines,
//! against a crate that would wrap the same two calls.
use std::{
    ffi::CString,
    io,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _, fs::OpenOptionsExt as _},
    path::Path,
};

pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// What the grant gives the binary.
pub const GRANTED: [u32; 2] = [CAP_BPF, CAP_PERFMON];

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const XATTR_NAME_CAPS: &str = "security.capability";
const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
const VFS_CAP_FLAGS_EFFECTIVE: u32 = 0x0000_0001;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// A thread's capability sets, as 64-bit masks (bit N = capability N).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSets {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
}

impl CapSets {
    /// True when the effective set allows loading and attaching tracing programs.
    pub fn can_trace(&self) -> bool {
        let has = |cap: u32| self.effective & (1 << cap) != 0;
        has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
    }
}

/// This thread's capability sets.
pub fn current() -> io::Result<CapSets> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and two data structs, as capget(2) version 3 takes.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(CapSets {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// Keeps only `caps` (those of them this thread has) in its effective and permitted sets; the
/// inheritable and ambient sets are emptied. The agent's, once its programs are loaded.
pub fn keep_only(caps: &[u32]) -> io::Result<()> {
    let now = current()?;
    let wanted = caps.iter().fold(0u64, |mask, cap| mask | (1 << cap)) & now.permitted;
    // SAFETY: plain prctl; the result is checked.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: wanted as u32,
            permitted: wanted as u32,
            inheritable: 0,
        },
        CapData {
            effective: (wanted >> 32) as u32,
            permitted: (wanted >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: a valid header and two data structs, as capset(2) takes for version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops every capability of this thread: effective, permitted, inheritable and ambient. (The
/// bounding set stays: it only limits what an exec could gain, and the command's exec gains
/// nothing without file capabilities of its own.) A no-op for root, whose privilege is its uid
/// and which `run` keeps as before (docs/security.md).
pub fn drop_all() -> io::Result<()> {
    keep_only(&[])
}

/// Sets this thread's effective set to its permitted set (`true`) or empties it (`false`),
/// keeping the permitted set: between the repetitions of `--repeat`, which each load the
/// programs again.
pub fn set_effective(on: bool) -> io::Result<()> {
    let now = current()?;
    let effective = if on { now.permitted } else { 0 };
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let split = |mask: u64| [mask as u32, (mask >> 32) as u32];
    let (e, p, i) = (
        split(effective),
        split(now.permitted),
        split(now.inheritable),
    );
    let data = [
        CapData {
            effective: e[0],
            permitted: p[0],
            inheritable: i[0],
        },
        CapData {
            effective: e[1],
            permitted: p[1],
            inheritable: i[1],
        },
    ];
    // SAFETY: header and two data structs, as capset(2) version 3 takes.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// [`drop_all`] for a forked child before exec: only system calls on stack data (async-signal-
/// safe), errors ignored (the exec of a program without file capabilities clears the permitted
/// set of an ordinary user anyway).
///
/// # Safety
/// Callable between fork and exec.
pub unsafe fn clear_in_child() {
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    );
    libc::syscall(libc::SYS_capset, &header, data.as_ptr());
}

/// Makes montrace non-dumpable for the rest of its life, as a granted binary run by an ordinary
/// user. Were it dumpable, once montrace has dropped its capabilities the user could ptrace it and
/// take its eBPF map descriptors (`pidfd_getfd`, `/proc/PID/fd`), then put another user's pid into
/// the tracked-process map and read figures `/proc` shows only that process's owner (its I/O and
/// socket bytes, its waits). The kernel lets nobody without CAP_SYS_PTRACE ptrace a non-dumpable
/// process or open its `/proc/PID/fd`, `environ` or `mem`. The exec of the granted binary already
/// leaves it non-dumpable when it gains capabilities (`commit_creds` resets dumpability to
/// `fs.suid_dumpable`, 0 by default); this makes it so whatever that setting and whatever the
/// caller already held. The command is not affected: the held child inherits the flag until its
/// exec, which makes it dumpable again as every exec of an ordinary program does.
pub fn make_undumpable() -> io::Result<()> {
    // SAFETY: prctl with constant arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether montrace runs as an ordinary user with capabilities (the granted binary), as opposed
/// to root (sudo) or no privilege at all.
pub fn capable_user() -> bool {
    // SAFETY: getuid/geteuid have no preconditions.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    uid != 0 && euid != 0 && current().is_ok_and(|c| c.permitted != 0)
}

/// Starts a thread named `name` that runs `f` without any capability. Capabilities are per
/// thread: one started while the granted binary still holds its permitted set (before the
/// programs of a run are loaded, or between `--repeat`'s loads) would hold them too, and no
/// thread but the loader needs one. A failure to drop them leaves them to the thread's end.
pub fn spawn_without_capabilities<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if capable_user() {
                let _ = drop_all();
            }
            f()
        })
}

/// Why the grant cannot be made or would not work.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("setting file capabilities needs root: run `sudo montrace setcap {0}`")]
    NotRoot(String),
    #[error(
        "{path} is writable by {who}: with capabilities on it, whoever can write it could replace \
         it. Install it owned by root and not writable by others, e.g. `sudo install -o root -g \
         root -m 0755 montrace /usr/local/bin/montrace`, then grant that copy"
    )]
    Writable { path: String, who: &'static str },
    #[error(
        "{path} is on a filesystem mounted nosuid: the kernel ignores file capabilities there. \
         Install montrace elsewhere (e.g. /usr/local/bin) and grant that copy"
    )]
    NoSuid { path: String },
    #[error(
        "the filesystem of {path} does not keep file capabilities (no extended attributes: {source}). \
         Install montrace on one that does (ext4, xfs, btrfs; e.g. /usr/local/bin) and grant that copy"
    )]
    NoXattr { path: String, source: io::Error },
    #[error(
        "{path} is not this montrace (its bytes differ from the running binary's): `montrace \
         setcap` grants capabilities to montrace only. Install montrace there and grant that \
         copy (`sudo install -o root -g root -m 0755 montrace {path}`)"
    )]
    NotMontrace { path: String },
    #[error("cannot set the capabilities of {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error(
        "{path} was given the capabilities, but they did not stay (read back: {found}): the \
         filesystem does not keep them"
    )]
    DidNotStay { path: String, found: String },
}

/// `security.capability`, revision 2: `caps` permitted and effective, nothing inheritable.
pub fn file_caps_xattr(caps: &[u32]) -> [u8; 20] {
    let mut permitted = [0u32; 2];
    for &cap in caps {
        permitted[(cap / 32) as usize] |= 1 << (cap % 32);
    }
    let words = [
        VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
        permitted[0],
        0,
        permitted[1],
        0,
    ];
    let mut bytes = [0u8; 20];
    for (i, word) in words.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

/// The capabilities a `security.capability` value grants (permitted), or None when it is not one
/// this reads (revision 2 or 3, which have the same first 20 bytes).
pub fn parse_file_caps(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < 20 {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    let revision = word(0) & 0xff00_0000;
    if revision != VFS_CAP_REVISION_2 && revision != 0x0300_0000 {
        return None;
    }
    Some(u64::from(word(1)) | (u64::from(word(3)) << 32))
}

/// The file capabilities of `path` (permitted), None when it has none.
pub fn file_caps(path: &Path) -> io::Result<Option<u64>> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let name = CString::new(XATTR_NAME_CAPS).expect("no NUL");
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings; buf is writable for its length.
    let n = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENODATA) => Ok(None),
            _ => Err(err),
        };
    }
    Ok(parse_file_caps(&buf[..n as usize]))
}

/// Gives `path` the capabilities in [`GRANTED`] (root only), after checking that it is safe,
/// that it is montrace itself (the same bytes as the running executable: a sudoers rule for
/// montrace must not let a user put capabilities on a `capsh` copy or on python3) and that the
/// kernel will honour them there, and checks that they stayed. Every check and the grant go
/// through one descriptor, so the file checked is the file granted.
pub fn grant(path: &Path) -> Result<u64, GrantError> {
    use std::os::fd::AsRawFd as _;
    let shown = path.display().to_string();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(GrantError::NotRoot(shown));
    }
    let io = |source| GrantError::Io {
        path: shown.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(GrantError::NotMontrace { path: shown });
    }
    if meta.uid() != 0 {
        return Err(GrantError::Writable {
            path: shown,
            who: "its owner, who is not root",
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(GrantError::Writable {
            path: shown,
            who: if meta.mode() & 0o002 != 0 {
                "every user"
            } else {
                "its group"
            },
        });
    }
    let own = std::fs::File::open("/proc/self/exe").map_err(io)?;
    if !same_contents(&file, &own).map_err(io)? {
        return Err(GrantError::NotMontrace { path: shown });
    }
    let fd = file.as_raw_fd();
    // SAFETY: zeroed statvfs is a valid out-parameter; fd is open.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(fd, &mut st) } != 0 {
        return Err(io(io::Error::last_os_error()));
    }
    if st.f_flag & libc::ST_NOSUID != 0 {
        return Err(GrantError::NoSuid { path: shown });
    }
    let name = CString::new(XATTR_NAME_CAPS).expect("no NUL");
    let value = file_caps_xattr(&GRANTED);
    // SAFETY: a valid C string and a value buffer of the given length; fd is open.
    let rc = unsafe { libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if rc != 0 {
        let source = io::Error::last_os_error();
        return Err(match source.raw_os_error() {
            Some(libc::EOPNOTSUPP) => GrantError::NoXattr {
                path: shown,
                source,
            },
            _ => io(source),
        });
    }
    let wanted = GRANTED.iter().fold(0u64, |m, &c| m | (1 << c));
    match file_caps(Path::new(&format!("/proc/self/fd/{fd}"))) {
        Ok(Some(found)) if found == wanted => Ok(found),
        Ok(found) => Err(GrantError::DidNotStay {
            path: shown,
            found: found.map_or("none".into(), |f| format!("{f:#x}")),
        }),
        Err(source) => Err(io(source)),
    }
}

/// Whether two open files hold the same bytes.
fn same_contents(a: &std::fs::File, b: &std::fs::File) -> io::Result<bool> {
    if a.metadata()?.len() != b.metadata()?.len() {
        return Ok(false);
    }
    let (mut a, mut b) = (io::BufReader::new(a), io::BufReader::new(b));
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
    fn read_full(r: &mut impl std::io::Read, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match r.read(&mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        Ok(filled)
    }
}

/// Names of the capabilities in a mask, for people.
pub fn names(mask: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| match bit {
            21 => "CAP_SYS_ADMIN".to_string(),
            38 => "CAP_PERFMON".to_string(),
            39 => "CAP_BPF".to_string(),
            other => format!("cap {other}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_xattr_grants_bpf_and_perfmon_permitted_and_effective() {
        let bytes = file_caps_xattr(&GRANTED);
        // What `setcap cap_bpf,cap_perfmon+ep` writes: revision 2 with the effective flag, the
        // two capabilities in the upper word (38 and 39 are bits 6 and 7 there).
        assert_eq!(
            bytes,
            [0x01, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(parse_file_caps(&bytes), Some((1 << 38) | (1 << 39)));
        assert_eq!(parse_file_caps(&bytes[..10]), None);
        assert_eq!(names((1 << 38) | (1 << 39)), ["CAP_PERFMON", "CAP_BPF"]);
    }

    #[test]
    fn tracing_needs_both_or_sys_admin() {
        let caps = |effective| CapSets {
            effective,
            ..CapSets::default()
        };
        assert!(caps((1 << CAP_BPF) | (1 << CAP_PERFMON)).can_trace());
        assert!(caps(1 << CAP_SYS_ADMIN).can_trace());
        assert!(!caps(1 << CAP_BPF).can_trace());
        assert!(!caps(0).can_trace());
    }

    #[test]
    fn a_writable_binary_is_not_granted() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(matches!(
                grant(Path::new("/bin/true")),
                Err(GrantError::NotRoot(_))
            ));
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("montrace");
        std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let err = grant(&bin).unwrap_err();
        assert!(
            matches!(
                err,
                GrantError::Writable {
                    who: "every user",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(file_caps(&bin).unwrap(), None, "nothing was set");
    }
}

/// The largest `--ring-buffer-size` an ordinary user gets (the granted binary): the ring buffer
/// is kernel memory, locked while the run lasts, that the user's own limits do not count; without
/// a cap any user could pin 1 GiB of it per run. Root may ask for more.
pub const USER_RING_BUFFER_MAX: u32 = 64 << 20;

/// Refuses a ring buffer above [`USER_RING_BUFFER_MAX`] for anyone but root (`root`: euid 0).
pub fn check_ring_buffer_size(bytes: u32, root: bool) -> Result<(), String> {
    if root || bytes <= USER_RING_BUFFER_MAX {
        return Ok(());
    }
    Err(format!(
        "--ring-buffer-size {} MiB: at most {} MiB for an ordinary user (the buffer is kernel \
         memory that no limit of yours counts); a larger one needs root",
        bytes >> 20,
        USER_RING_BUFFER_MAX >> 20
    ))
}

#[cfg(test)]
mod ring_buffer_tests {
    use super::*;

    #[test]
    fn an_ordinary_user_gets_at_most_64_mib_of_ring_buffer() {
        assert!(check_ring_buffer_size(8 << 20, false).is_ok());
        assert!(check_ring_buffer_size(64 << 20, false).is_ok());
        let err = check_ring_buffer_size(128 << 20, false).unwrap_err();
        assert!(err.contains("at most 64 MiB"), "{err}");
        assert!(check_ring_buffer_size(1 << 30, true).is_ok());
    }
}
