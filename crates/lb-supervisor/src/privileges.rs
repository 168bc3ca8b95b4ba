//! Dropping root once the sockets are in hand, and raising the open-file limit.
//!
//! The master starts as root so that it can bind privileged ports, then (configuration
//! `global.user` / `global.group`) switches to an unprivileged user for good. Sockets it already
//! holds stay usable, and so do the sockets it binds later for a reload only if they need no
//! privilege; that is the operator's trade-off to make.

use nix::errno::Errno;
use std::path::Path;

use nix::unistd::{chown, getegid, geteuid, setgid, setuid, Gid, Group, Uid, User};

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::Error;

/// Switch to `user` and `group` (names): the supplementary groups become just `group`, then the
/// group, then the user, in that order (once the user is changed, the rest is no longer
/// allowed). `group` defaults to the user's primary group. Nothing to do when both are `None`.
///
/// Not running as root, asking for the user and group we already are is accepted (so that the
/// same configuration works started as that user); anything else needs root.
///
/// glibc and musl apply `setuid`/`setgid` to every thread of the process, and illumos keeps
/// credentials per process, so runtime threads already started switch too.
pub(crate) fn drop_privileges(user: Option<&str>, group: Option<&str>) -> Result<(), Error> {
    if user.is_none() && group.is_none() {
        return Ok(());
    }
    let user = user.map(lookup_user).transpose()?;
    let gid = match (group, &user) {
        (Some(name), _) => lookup_group(name)?,
        (None, Some(user)) => user.gid,
        // Unreachable (both None returned above); the current group keeps this total.
        (None, None) => getegid(),
    };
    let uid = user.as_ref().map(|u| u.uid);

    if !geteuid().is_root() {
        if uid.is_none_or(|uid| uid == geteuid()) && gid == getegid() {
            return Ok(());
        }
        let who = user.as_ref().map_or_else(|| format!("group {gid}"), |u| format!("user {:?}", u.name));
        return Err(Error::Privileges {
            what: format!("switching to {who} needs root (running as uid {})", geteuid()),
            source: Errno::EPERM,
        });
    }

    set_groups(gid)?;
    setgid(gid).map_err(|source| Error::Privileges { what: format!("setgid({gid})"), source })?;
    if let Some(uid) = uid {
        setuid(uid).map_err(|source| Error::Privileges { what: format!("setuid({uid})"), source })?;
        // A setuid that left any way back to root would defeat the point; say so rather than
        // run half-privileged.
        if !uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
            return Err(Error::Privileges {
                what: format!("setuid({uid}) left root regainable"),
                source: Errno::EPERM,
            });
        }
    }
    tracing::info!(uid = uid.map(Uid::as_raw), gid = gid.as_raw(), "dropped privileges");
    Ok(())
}

fn lookup_user(name: &str) -> Result<User, Error> {
    match User::from_name(name) {
        Ok(Some(user)) => Ok(user),
        Ok(None) => Err(Error::Privileges { what: format!("global.user: no user {name:?}"), source: Errno::ENOENT }),
        Err(source) => Err(Error::Privileges { what: format!("global.user: looking up {name:?}"), source }),
    }
}

fn lookup_group(name: &str) -> Result<Gid, Error> {
    match Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid),
        Ok(None) => Err(Error::Privileges { what: format!("global.group: no group {name:?}"), source: Errno::ENOENT }),
        Err(source) => Err(Error::Privileges { what: format!("global.group: looking up {name:?}"), source }),
    }
}

/// A master running as root gives its control and runtime sockets to `user`/`group` (as
/// HAProxy's `stats socket … user … group …`), so that lbctl and lb-watcher running as that
/// unprivileged user reach them: the socket stays mode 0600, now owned by that user. Nothing to
/// do when not root (the sockets already belong to whoever runs the master) or when no user or
/// group is configured.
pub(crate) fn give_sockets(paths: &[&Path], user: Option<&str>, group: Option<&str>) -> Result<(), Error> {
    if !geteuid().is_root() || (user.is_none() && group.is_none()) {
        return Ok(());
    }
    let user = user.map(lookup_user).transpose()?;
    let gid = match (group, &user) {
        (Some(name), _) => Some(lookup_group(name)?),
        (None, Some(user)) => Some(user.gid),
        (None, None) => None,
    };
    let uid = user.map(|u| u.uid);
    for path in paths {
        chown(*path, uid, gid).map_err(|source| Error::Privileges {
            what: format!("giving {} to {}", path.display(), describe(uid, gid)),
            source,
        })?;
    }
    Ok(())
}

/// Set each Unix listening socket's mode, and (as root) its owner and group: done by every new
/// worker before it drops privileges, so a reload applies a changed `mode` to the socket kept.
pub(crate) fn set_unix_access(sockets: &[crate::UnixAccess]) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    for access in sockets {
        let path = &access.path;
        if geteuid().is_root() && (access.user.is_some() || access.group.is_some()) {
            let user = access.user.as_deref().map(lookup_user).transpose()?;
            let gid = access.group.as_deref().map(lookup_group).transpose()?;
            let uid = user.map(|u| u.uid);
            chown(path, uid, gid).map_err(|source| Error::Privileges {
                what: format!("giving {} to {}", path.display(), describe(uid, gid)),
                source,
            })?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode)).map_err(|e| {
            Error::Privileges {
                what: format!("setting mode {:04o} on {}", access.mode, path.display()),
                source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            }
        })?;
    }
    Ok(())
}

fn describe(uid: Option<Uid>, gid: Option<Gid>) -> String {
    match (uid, gid) {
        (Some(uid), Some(gid)) => format!("uid {uid} gid {gid}"),
        (Some(uid), None) => format!("uid {uid}"),
        (None, Some(gid)) => format!("gid {gid}"),
        (None, None) => "nobody".to_owned(),
    }
}

/// Make `gid` the only supplementary group, so that root's (e.g. `root`, `sys` on illumos) do
/// not survive the switch.
#[cfg(not(target_vendor = "apple"))]
fn set_groups(gid: Gid) -> Result<(), Error> {
    nix::unistd::setgroups(&[gid]).map_err(|source| Error::Privileges { what: format!("setgroups([{gid}])"), source })
}

/// nix has no `setgroups` on Apple systems (their group model differs); they are development
/// platforms only, so root's supplementary groups are left as they are there.
#[cfg(target_vendor = "apple")]
fn set_groups(_gid: Gid) -> Result<(), Error> {
    Ok(())
}

/// Keep the master's capabilities out of its workers. A master started unprivileged with
/// `CAP_NET_BIND_SERVICE` as an *ambient* capability (systemd's `AmbientCapabilities=`, the way
/// the units in systemd/ run it) would pass it on through every exec, so each worker could bind
/// privileged ports too, though only the master ever binds. Clearing the ambient set leaves the
/// master's own permitted and effective sets as they are: it still binds for a reload. The
/// ambient set is per thread: called on the thread that starts the workers, before any other
/// runtime thread exists. Elsewhere (illumos: privileges, not capabilities) nothing to do.
pub(crate) fn keep_capabilities_from_workers() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::clear_ambient_capability_set() {
        tracing::warn!("clearing the ambient capability set: {e} (workers may inherit the master's capabilities)");
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit: a proxied connection holds two fds, and the
/// usual soft default (1024 on Linux, 256 on illumos) would cap us at a few hundred clients.
/// Returns the soft limit now in force (`u64::MAX` for unlimited); a failure is logged and leaves
/// the old one.
///
/// rustix rather than nix here: nix 0.30 has no `sys::resource` on illumos.
pub(crate) fn raise_fd_limit() -> u64 {
    // rustix says `None` for unlimited.
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(soft) = current else { return u64::MAX };
    let hard = maximum.unwrap_or(u64::MAX);
    if soft >= hard {
        return soft;
    }
    match setrlimit(Resource::Nofile, Rlimit { current: maximum, maximum }) {
        Ok(()) => {
            tracing::debug!(from = soft, to = hard, "raised the open-file limit");
            hard
        }
        Err(e) => {
            // macOS, for one, refuses an unlimited hard limit as the soft one (OPEN_MAX caps it).
            tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
            soft
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_fd_limit_never_lowers() {
        let before = getrlimit(Resource::Nofile);
        let now = raise_fd_limit();
        assert!(now >= before.current.unwrap_or(u64::MAX), "{now} < {before:?}");
        assert!(now <= before.maximum.unwrap_or(u64::MAX));
        assert_eq!(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX), now);
        // Idempotent: already at the hard limit.
        assert_eq!(raise_fd_limit(), now);
    }

    #[test]
    fn nothing_to_drop_is_ok() {
        assert!(drop_privileges(None, None).is_ok());
    }

    #[test]
    fn unknown_user_or_group_is_named() {
        let err = drop_privileges(Some("lb-no-such-user"), None).expect_err("no such user");
        assert!(err.to_string().contains("global.user: no user \"lb-no-such-user\""), "{err}");
        let err = drop_privileges(None, Some("lb-no-such-group")).expect_err("no such group");
        assert!(err.to_string().contains("global.group: no group \"lb-no-such-group\""), "{err}");
        let err = drop_privileges(Some("root"), Some("lb-no-such-group")).expect_err("no such group");
        assert!(err.to_string().contains("lb-no-such-group"), "{err}");
    }

    /// The real switch, in a child process (this test binary run again for just this test), so
    /// that the test process itself keeps its privileges.
    #[test]
    fn sockets_go_to_the_configured_user_when_root() {
        use std::os::unix::fs::MetadataExt;
        let Ok(Some(nobody)) = User::from_name("nobody") else { return };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("control.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let owner_before = std::fs::metadata(&path).expect("stat").uid();
        give_sockets(&[path.as_path()], Some("nobody"), None).expect("give_sockets");
        let meta = std::fs::metadata(&path).expect("stat");
        if geteuid().is_root() {
            assert_eq!((meta.uid(), meta.gid()), (nobody.uid.as_raw(), nobody.gid.as_raw()));
        } else {
            assert_eq!(meta.uid(), owner_before, "not root: left as it is");
        }
        // No user configured: nothing changes.
        give_sockets(&[path.as_path()], None, None).expect("nothing to do");
        let err = give_sockets(&[path.as_path()], Some("lb-no-such-user"), None);
        assert_eq!(err.is_err(), geteuid().is_root(), "an unknown user is an error when there is work to do");
    }

    #[test]
    fn drops_to_nobody_in_a_child() {
        const CHILD: &str = "LB_SUPERVISOR_TEST_DROP_CHILD";
        let Ok(Some(nobody)) = User::from_name("nobody") else { return };
        if std::env::var_os(CHILD).is_some() {
            drop_privileges(Some("nobody"), None).expect("drop to nobody");
            assert_eq!(nix::unistd::getuid(), nobody.uid);
            assert_eq!(geteuid(), nobody.uid);
            assert_eq!(getegid(), nobody.gid);
            assert_eq!(nix::unistd::getgroups().expect("getgroups"), vec![nobody.gid]);
            assert!(setuid(Uid::from_raw(0)).is_err());
            return;
        }
        if !geteuid().is_root() {
            return;
        }
        let exe = std::env::current_exe().expect("current_exe");
        let out = std::process::Command::new(exe)
            .args(["--exact", "privileges::tests::drops_to_nobody_in_a_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {report}{}", String::from_utf8_lossy(&out.stderr));
        assert!(report.contains("1 passed"), "the child did not run the test: {report}");
    }
}
