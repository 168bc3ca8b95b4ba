//! `SCM_RIGHTS`: bytes with file descriptors attached, over a Unix socket.
//!
//! The one module allowed `unsafe`: a fd number the kernel just installed in our table becomes
//! an [`OwnedFd`] here, and nowhere else. Both functions make one attempt on a non-blocking
//! socket and report `WouldBlock`; waiting for readiness is the channel's job.
//!
//! Close-on-exec: a received fd must never leak into a process we spawn (a worker's own
//! children, or the next worker). Where the kernel can set it atomically (`MSG_CMSG_CLOEXEC`,
//! as exposed by nix) we ask for that; elsewhere (illumos, Solaris, macOS) `FD_CLOEXEC` is set
//! with `fcntl` right after receipt. That leaves a window in which another thread's fork+exec
//! could inherit the fd; fds travel from the master (which spawns) to workers (which do not), and
//! what could leak is a listening socket the child is handed anyway, so the window is tolerable.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// The most fds one message (one frame) may carry. The receive side sizes its control buffer
/// for exactly this many, so a peer that sends more gets its message refused (`MSG_CTRUNC`).
pub(crate) const MAX_FDS_PER_MESSAGE: usize = 64;

/// Never raise `SIGPIPE` on a peer that went away; the error comes back as `EPIPE` instead.
/// (Rust binaries ignore `SIGPIPE` already; this keeps us right if a host program does not.)
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "illumos",
    target_os = "solaris"
))]
const SEND_FLAGS: MsgFlags = MsgFlags::MSG_NOSIGNAL;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "illumos",
    target_os = "solaris"
)))]
const SEND_FLAGS: MsgFlags = MsgFlags::empty();

/// Where nix exposes `MSG_CMSG_CLOEXEC`, received fds are close-on-exec from birth.
/// (illumos' headers have the flag too, but nix 0.30 does not expose it there, so illumos takes
/// the `fcntl` path.)
const ATOMIC_CLOEXEC: bool = cfg!(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "netbsd",
    target_os = "openbsd"
));
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "netbsd",
    target_os = "openbsd"
))]
const RECV_FLAGS: MsgFlags = MsgFlags::MSG_CMSG_CLOEXEC;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "dragonfly",
    target_os = "netbsd",
    target_os = "openbsd"
)))]
const RECV_FLAGS: MsgFlags = MsgFlags::empty();

/// Write as much of `bytes` as the socket takes now, with `fds` riding on the first `sendmsg`.
///
/// Returns the bytes written by this call, possibly fewer than `bytes.len()` when the socket
/// filled up part way (the fds went with the first part); `WouldBlock` when nothing could be
/// written, in which case the fds were not sent either and must be passed again. The caller
/// passes fds only on the first call of a frame.
pub(crate) fn send(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} fds in one message, at most {MAX_FDS_PER_MESSAGE} allowed", fds.len()),
        ));
    }
    if bytes.is_empty() {
        // Ancillary data needs at least one byte to travel with on a stream socket.
        return if fds.is_empty() {
            Ok(0)
        } else {
            Err(io::Error::new(io::ErrorKind::InvalidInput, "fds need at least one byte to travel with"))
        };
    }
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let mut written = 0;
    while let Some(rest) = bytes.get(written..).filter(|rest| !rest.is_empty()) {
        let cmsgs: &[ControlMessage<'_>] = if written == 0 && !raw.is_empty() { &rights } else { &[] };
        match sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(rest)], cmsgs, SEND_FLAGS, None) {
            // A stream socket never takes zero of a non-empty buffer; refuse to spin if one did.
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "sendmsg wrote nothing")),
            Ok(n) => written += n,
            Err(Errno::EINTR) => {}
            // Partly written: report progress; the next call gets WouldBlock and waits.
            Err(e) if written > 0 && io::Error::from(e).kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(written)
}

/// One `recvmsg`: up to `buf.len()` bytes, and any fds that came with them appended to `fds`
/// (close-on-exec). `Ok(0)` is end of stream.
///
/// A message carrying more than [`MAX_FDS_PER_MESSAGE`] fds makes the kernel drop the excess
/// (`MSG_CTRUNC`); that is an `InvalidData` error, since which fd belongs to which frame is then
/// lost. (The fds the kernel did install in that case are out of reach through nix and stay open
/// until the process exits; the channel is dead anyway.)
pub(crate) fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut cmsg_buf = nix::cmsg_space!([RawFd; MAX_FDS_PER_MESSAGE]);
    let mut iov = [IoSliceMut::new(buf)];
    let (bytes, received) = loop {
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg_buf), RECV_FLAGS) {
            Ok(msg) => msg,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("peer sent more than {MAX_FDS_PER_MESSAGE} fds in one message; the kernel dropped some"),
            ));
        }
        let mut received: Vec<RawFd> = Vec::new();
        for cmsg in msg.cmsgs()? {
            // Anything else (credentials, if some option turned them on) carries no fd.
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                received.extend(raw);
            }
        }
        break (msg.bytes, received);
    };
    let start = fds.len();
    for raw in received {
        // SAFETY: `raw` was just installed in this process's fd table by recvmsg's SCM_RIGHTS
        // and appears exactly once in the control message; nothing else knows the number yet,
        // so the OwnedFd made here is its sole owner and closes it exactly once.
        fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    // Every fd is owned before anything can fail, so an error below closes them all instead of
    // leaking the rest.
    if !ATOMIC_CLOEXEC {
        if let Err(e) = set_cloexec(fds.get(start..).unwrap_or_default()) {
            fds.truncate(start);
            return Err(e);
        }
    }
    Ok(bytes)
}

/// Close-on-exec after the fact, where `recvmsg` cannot set it (see the module doc). Compiled
/// everywhere so that the path is checked on every platform, called only where needed.
fn set_cloexec(fds: &[OwnedFd]) -> io::Result<()> {
    for fd in fds {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    Ok(())
}

/// Take ownership of a fd inherited across exec under a number our parent put in the
/// environment (the worker's channel end, the detached master's ready pipe), and make it
/// close-on-exec: it is for this process, not for the ones it spawns.
///
/// Refused: the standard streams (std owns them), a number that is not open, and a number
/// already taken (two owners would close it twice).
pub(crate) fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd <= 2 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("inherited fd {fd} is not usable")));
    }
    // Held across the check and the take, so that two threads cannot both take the number.
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    if taken.contains(&fd) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("inherited fd {fd} was already taken")));
    }
    // SAFETY: fcntl(F_GETFD) only reads the fd's flags; on a number that is not open it fails
    // with EBADF and touches nothing.
    let flags = Errno::result(unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) })
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("inherited fd {fd}: {e}")))?;
    taken.push(fd);
    // SAFETY: the number is open (just checked), it is not a standard stream, our parent handed
    // it over for us alone, and TAKEN guarantees no other OwnedFd was made of it here, so this
    // one is its sole owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    fcntl(&owned, FcntlArg::F_SETFD(FdFlag::from_bits_retain(flags) | FdFlag::FD_CLOEXEC))?;
    Ok(owned)
}

/// The fd numbers [`take_inherited`] has handed out (a handful at most).
static TAKEN: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socketpair");
        a.set_nonblocking(true).expect("nonblocking");
        b.set_nonblocking(true).expect("nonblocking");
        (a, b)
    }

    #[test]
    fn bytes_and_fds_arrive_together_with_cloexec() {
        let (a, b) = pair();
        let (x, y) = pair();
        assert_eq!(send(a.as_fd(), b"hello", &[x.as_fd(), y.as_fd()]).expect("send"), 5);
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        let n = recv(b.as_fd(), &mut buf, &mut fds).expect("recv");
        assert_eq!(buf.get(..n), Some(&b"hello"[..]));
        assert_eq!(fds.len(), 2);
        for fd in &fds {
            let flags = fcntl(fd, FcntlArg::F_GETFD).expect("F_GETFD");
            assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
        }
    }

    #[test]
    fn would_block_when_nothing_to_read_and_zero_at_eof() {
        let (a, b) = pair();
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        let err = recv(b.as_fd(), &mut buf, &mut fds).expect_err("nothing to read");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(a);
        assert_eq!(recv(b.as_fd(), &mut buf, &mut fds).expect("eof"), 0);
    }

    #[test]
    fn partial_write_when_the_socket_fills() {
        let (a, _b) = pair();
        let big = vec![7u8; 16 << 20];
        let n = send(a.as_fd(), &big, &[]).expect("some bytes fit");
        assert!(n > 0 && n < big.len(), "wrote {n}");
        let err = send(a.as_fd(), &big, &[]).expect_err("socket full");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn too_many_fds_are_refused_on_both_ends() {
        let (a, b) = pair();
        let (x, _y) = pair();
        let many: Vec<BorrowedFd<'_>> = (0..=MAX_FDS_PER_MESSAGE).map(|_| x.as_fd()).collect();
        let err = send(a.as_fd(), b"x", &many).expect_err("too many fds");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

        // A peer that does not use `send` and exceeds the limit: MSG_CTRUNC on receipt.
        let raw: Vec<RawFd> = many.iter().map(|fd| fd.as_raw_fd()).collect();
        let sent = sendmsg::<()>(
            a.as_raw_fd(),
            &[IoSlice::new(b"x")],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .expect("raw sendmsg");
        assert_eq!(sent, 1);
        let mut buf = [0u8; 4];
        let mut fds = Vec::new();
        let err = recv(b.as_fd(), &mut buf, &mut fds).expect_err("truncated control data");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(fds.is_empty());
    }

    #[test]
    fn the_fallback_sets_cloexec() {
        let (a, _b) = pair();
        fcntl(&a, FcntlArg::F_SETFD(FdFlag::empty())).expect("clear cloexec");
        let fd = OwnedFd::from(a);
        set_cloexec(std::slice::from_ref(&fd)).expect("set_cloexec");
        let flags = fcntl(&fd, FcntlArg::F_GETFD).expect("F_GETFD");
        assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn inherited_fds_are_taken_once_and_made_cloexec() {
        use std::os::fd::IntoRawFd;

        let (a, b) = pair();
        fcntl(&a, FcntlArg::F_SETFD(FdFlag::empty())).expect("clear cloexec");
        let raw = a.into_raw_fd();
        let owned = take_inherited(raw).expect("take");
        let flags = fcntl(&owned, FcntlArg::F_GETFD).expect("F_GETFD");
        assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
        assert!(take_inherited(raw).is_err(), "taken twice");
        assert_eq!(send(owned.as_fd(), b"x", &[]).expect("usable"), 1);
        let mut buf = [0u8; 1];
        assert_eq!(recv(b.as_fd(), &mut buf, &mut Vec::new()).expect("recv"), 1);

        for bad in [-1, 0, 1, 2, 1 << 30] {
            assert!(take_inherited(bad).is_err(), "fd {bad} accepted");
        }
    }

    #[test]
    fn fds_without_bytes_are_refused() {
        let (a, _b) = pair();
        assert_eq!(send(a.as_fd(), b"", &[]).expect("nothing to do"), 0);
        let err = send(a.as_fd(), b"", &[a.as_fd()]).expect_err("fds need a byte");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
