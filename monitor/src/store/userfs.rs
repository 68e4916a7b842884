//! Run-directory I/O with the invoking user's identity.
//!
//! Under `sudo`, montrace is root but the run directory is the user's: it sits in their space and
//! the command (untrusted, running as the user) can plant symlinks in it or swap it for one at
//! any moment. So root never opens, creates, renames or removes anything there itself. Every
//! such call goes through this module, which switches the calling thread's filesystem identity
//! to the user's for the call (`setfsuid`/`setfsgid`, and the user's supplementary groups): the
//! kernel's own permission checks apply, a symlink to `/root/x` or into `/etc` fails with
//! EACCES as it would for the user, and every file and directory is created owned by the user,
//! so no chown pass is needed (it was racy: `RENAME_EXCHANGE` of a directory and a symlink
//! between its check and its use). On top of that, new files are created exclusively and never
//! through a symlink (`O_CREAT|O_EXCL|O_NOFOLLOW`), and finished files are put in place with
//! `rename`, which replaces a planted name instead of following it.
//!
//! The filesystem identity is per thread in Linux (`setfsuid(2)`), and so are the supplementary
//! groups at the system call level (glibc's `setgroups` broadcasts to every thread; the raw
//! system call does not): the switch affects only the thread doing the I/O, for the length of
//! the call, and other threads (the waiter, NVML's) keep root's identity. Switching fsuid away
//! from 0 also drops the filesystem capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, ...) from the
//! thread's effective set; switching back restores them.
//!
//! Without an owner (not under sudo, `--as-root`, or montrace not root) the calls are plain.
use std::{
    cell::Cell,
    fs::{File, OpenOptions},
    io::{self, Write as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::Path,
    sync::OnceLock,
};

use crate::store::Durability;

/// Whose identity run-directory I/O takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

static OWNER: OnceLock<Owner> = OnceLock::new();

thread_local! {
    /// Depth of nested [`as_user`] calls on this thread: only the outermost switches.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Sets whose identity run-directory I/O takes, for the rest of the process. Call once, before
/// any run-directory I/O; a second call with another owner is refused.
pub fn set_owner(owner: Owner) -> io::Result<()> {
    let set = OWNER.get_or_init(|| owner.clone());
    if *set != owner {
        return Err(io::Error::other("the run directory's owner is already set"));
    }
    Ok(())
}

/// The owner set by [`set_owner`], if any.
pub fn owner() -> Option<&'static Owner> {
    OWNER.get()
}

/// Runs `f` with this thread's filesystem identity switched to the owner's (when there is one
/// and montrace is root). Fails, without running `f`, if the switch does not take.
pub fn as_user<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    as_owner(OWNER.get(), f)
}

/// [`as_user`] with an explicit owner.
pub fn as_owner<T>(owner: Option<&Owner>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    // The owner first: most runs have none, and then no system call is made (a run made 39).
    // SAFETY: geteuid has no preconditions.
    let Some(owner) = owner.filter(|_| unsafe { libc::geteuid() } == 0) else {
        return f();
    };
    if DEPTH.with(Cell::get) > 0 {
        return f();
    }
    let _switched = Switched::to(owner)?;
    // Counted down on every way out, a panic in `f` included: a count left behind would make
    // the next call skip the switch and act as root.
    let _depth = Depth::enter();
    f()
}

/// One level of [`as_owner`] on this thread, for as long as it lives.
struct Depth;

impl Depth {
    fn enter() -> Depth {
        DEPTH.with(|d| d.set(d.get() + 1));
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// This thread's filesystem identity switched to the owner's; dropping it switches back.
struct Switched {
    groups: Vec<libc::gid_t>,
    fsuid: u32,
    fsgid: u32,
}

impl Switched {
    fn to(owner: &Owner) -> io::Result<Switched> {
        let groups = current_groups()?;
        set_thread_groups(&owner.groups)?;
        // SAFETY: setfsgid/setfsuid change only this thread's credentials; they return the
        // previous id.
        let (fsgid, fsuid) = unsafe { (libc::setfsgid(owner.gid), libc::setfsuid(owner.uid)) };
        let switched = Switched {
            groups,
            fsuid: fsuid as u32,
            fsgid: fsgid as u32,
        };
        // setfsuid reports no error: ask for the current value (an invalid id changes nothing).
        // SAFETY: as above.
        let (now_uid, now_gid) = unsafe { (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX)) };
        if now_uid as u32 != owner.uid || now_gid as u32 != owner.gid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cannot take uid {} / gid {} for the run directory's files",
                    owner.uid, owner.gid
                ),
            ));
        }
        Ok(switched)
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        // SAFETY: as in `to`.
        unsafe {
            libc::setfsuid(self.fsuid);
            libc::setfsgid(self.fsgid);
        }
        let _ = set_thread_groups(&self.groups);
    }
}

fn current_groups() -> io::Result<Vec<libc::gid_t>> {
    // SAFETY: getgroups(0, NULL) returns the count without writing.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0; n as usize];
    // SAFETY: groups has room for n entries.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(n as usize);
    Ok(groups)
}

/// The raw system call: it changes this thread's supplementary groups only (glibc's wrapper
/// would change every thread's).
fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: the pointer and length describe a valid slice of gids.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates `path` as a new file for writing: never an existing name, never through a symlink.
pub fn create_new(path: &Path) -> io::Result<File> {
    as_user(|| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(path)
    })
}

/// [`create_new`], first removing a leftover at `path` (a temporary file of a killed montrace,
/// or something the command planted; removing a symlink removes the link, not its target).
pub fn create_replacing(path: &Path) -> io::Result<File> {
    match create_new(path) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            remove_file(path)?;
            create_new(path)
        }
        other => other,
    }
}

/// Opens `path` for reading, never through a symlink at its last component.
pub fn open(path: &Path) -> io::Result<File> {
    as_user(|| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    })
}

/// As [`open`], for a regular file only: a FIFO or a device planted at `path` is refused, not
/// opened (a FIFO's open waits for a writer forever; root's Slurm epilog must not).
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = as_user(|| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
    })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Reads a whole regular file (see [`open_regular`]).
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut open_regular(path)?, &mut bytes)?;
    Ok(bytes)
}

/// Writes `path` whole: into a new temporary file beside it, synced, then renamed over `path`. A
/// reader sees the old file or the new one, and a symlink planted at `path` is replaced, not
/// followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, bytes, Durability::Synced)
}

/// [`write_atomic`], synced to the disk before the rename or not (a run's files, see
/// [`Durability`]).
pub fn write_atomic_with(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let temp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    let written = create_replacing(&temp).and_then(|mut file| {
        file.write_all(bytes)?;
        match durability {
            Durability::Synced => file.sync_all(),
            Durability::Unsynced => Ok(()),
        }
    });
    let result = written.and_then(|()| rename(&temp, path));
    if result.is_err() {
        let _ = remove_file(&temp);
    }
    result
}

/// `rename(2)`: replaces `to` itself when it is a symlink.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    as_user(|| std::fs::rename(from, to))
}

pub fn create_dir(path: &Path) -> io::Result<()> {
    as_user(|| std::fs::DirBuilder::new().mode(0o755).create(path))
}

pub fn create_dir_all(path: &Path) -> io::Result<()> {
    as_user(|| {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .recursive(true)
            .create(path)
    })
}

pub fn remove_file(path: &Path) -> io::Result<()> {
    as_user(|| std::fs::remove_file(path))
}

pub fn remove_dir(path: &Path) -> io::Result<()> {
    as_user(|| std::fs::remove_dir(path))
}

/// Removes a directory and what is in it; std's implementation does not follow symlinks.
pub fn remove_dir_all(path: &Path) -> io::Result<()> {
    as_user(|| std::fs::remove_dir_all(path))
}

/// The names in a directory (sorted).
pub fn list_dir(path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    as_user(|| {
        let mut names = std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    })
}

/// `lstat(2)` of `path`.
pub fn symlink_metadata(path: &Path) -> io::Result<std::fs::Metadata> {
    as_user(|| std::fs::symlink_metadata(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_where_a_regular_file_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("run.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever comes: a blocking open would never return.
        assert_eq!(read(&fifo).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        std::fs::write(tmp.path().join("plain"), b"x").unwrap();
        assert_eq!(read(&tmp.path().join("plain")).unwrap(), b"x");
    }

    #[test]
    fn create_new_refuses_an_existing_name_and_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link).is_err());
        assert!(create_new(&target).is_err());
        // A dangling link is not followed either.
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err());
        assert!(!tmp.path().join("nowhere").exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn write_atomic_replaces_a_planted_symlink_without_following_it() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let path = tmp.path().join("run.json");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        // And a planted temporary name.
        std::os::unix::fs::symlink(&target, tmp.path().join(".run.json.tmp")).unwrap();
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert!(open(&tmp.path().join(".run.json.tmp")).is_err());
    }

    #[test]
    fn open_does_not_follow_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("t");
        std::fs::write(&target, b"x").unwrap();
        let link = tmp.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open(&link).is_err());
        assert_eq!(read(&target).unwrap(), b"x");
    }

    /// A panic inside a switched call (caught further up, as the recorder does) leaves the
    /// thread as it was: the next call switches again.
    #[test]
    fn a_panic_inside_leaves_the_next_call_switching() {
        let nobody = Owner {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let caught = std::panic::catch_unwind(|| {
            as_owner(Some(&nobody), || -> io::Result<()> { panic!("inside") })
        });
        assert!(caught.is_err());
        assert_eq!(DEPTH.with(Cell::get), 0);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // Root again after the panic, and the owner's identity inside the next call.
            // SAFETY: setfsuid with an invalid id only reports the current one.
            assert_eq!(unsafe { libc::setfsuid(u32::MAX) }, 0);
            let inside = as_owner(Some(&nobody), || {
                // SAFETY: as above.
                Ok(unsafe { libc::setfsuid(u32::MAX) })
            })
            .unwrap();
            assert_eq!(inside, 65534);
        }
    }

    /// As root with an owner, files come out owned by the owner, and a root-only directory is
    /// out of reach. (Without root the switch is not taken and this checks nothing more than the
    /// plain calls, so it returns early.)
    #[test]
    fn as_root_the_owner_identity_applies() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            tmp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let private = tmp.path().join("root-only");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(
            &private,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        // 65534 is nobody: an id no file here belongs to. (Not set_owner: that would switch
        // every other test in this process.)
        let nobody = Owner {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let create = |path: &Path| {
            let path = path.to_path_buf();
            as_owner(Some(&nobody), move || std::fs::File::create_new(&path))
        };
        let mine = tmp.path().join("mine");
        create(&mine).unwrap();
        let meta = std::fs::metadata(&mine).unwrap();
        assert_eq!(
            (
                std::os::unix::fs::MetadataExt::uid(&meta),
                std::os::unix::fs::MetadataExt::gid(&meta)
            ),
            (65534, 65534)
        );
        let err = create(&private.join("x")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // The thread is root again afterwards.
        std::fs::write(private.join("y"), b"").unwrap();
    }
}
